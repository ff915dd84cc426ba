#include "core/csv.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

TEST(CsvTest, ParsesHeaderRowsAndLineNumbers) {
  auto t = CsvTable::parse("a,b\n1,2\n\n\"x,\"\"y\",3\r\n", "f.csv");
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(t->header(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(t->rowCount(), 2U);
  EXPECT_EQ(t->cell(0, 1), "2");
  EXPECT_EQ(t->cell(1, 0), "x,\"y");
  EXPECT_EQ(t->lineOf(0), 2U);
  EXPECT_EQ(t->lineOf(1), 4U);  // The blank line 3 is skipped but counted.
}

TEST(CsvTest, EmptyFileIsAnError) {
  auto t = CsvTable::parse("", "empty.csv");
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().message(), "empty.csv:1: file is empty (expected a header line)");
  EXPECT_FALSE(CsvTable::parse("\n\n", "blank.csv").isOk());
}

TEST(CsvTest, WrongFieldCountNamesTheLine) {
  auto t = CsvTable::parse("a,b\n1,2\n3\n", "f.csv");
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().message(), "f.csv:3: expected 2 fields as in the header, got 1");
}

TEST(CsvTest, UnterminatedQuote) {
  auto t = CsvTable::parse("a\n\"abc\n", "q.csv");
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().message(), "q.csv:2: unterminated quoted field");
}

TEST(CsvTest, MissingColumn) {
  auto t = CsvTable::parse("a,b\n1,2\n", "f.csv");
  ASSERT_TRUE(t.isOk());
  auto c = t->requireColumn("gpu");
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().message(), "f.csv:1: missing column 'gpu'");
  EXPECT_EQ(t->findColumn("b"), 1);
  EXPECT_EQ(t->findColumn("c"), -1);
}

struct IntCase {
  const char* cell;
  bool ok;
  int64_t value;
  const char* message;
};

TEST(CsvTest, IntegerCells) {
  const IntCase cases[] = {
      {"42", true, 42, ""},
      {" 7 ", true, 7, ""},
      {"0", true, 0, ""},
      {"-1", false, 0, "f.csv:2: column 'n' value -1 is negative"},
      {"1.5", false, 0, "f.csv:2: column 'n' value '1.5' is not an integer"},
      {"abc", false, 0, "f.csv:2: column 'n' value 'abc' is not an integer"},
      {"", false, 0, "f.csv:2: column 'n' is empty, expected an integer"},
      {"99999999999999999999", false, 0,
       "f.csv:2: column 'n' value '99999999999999999999' is out of range"},
  };
  for (const IntCase& c : cases) {
    auto t = CsvTable::parse(std::string("n\n") + c.cell + "\n", "f.csv");
    ASSERT_TRUE(t.isOk()) << c.cell;
    if (t->rowCount() == 0) {
      // A blank cell in a one-column file is a blank line: skipped.
      EXPECT_FALSE(c.ok);
      continue;
    }
    auto v = t->getInt(0, 0, 0);
    EXPECT_EQ(v.isOk(), c.ok) << c.cell;
    if (c.ok) {
      EXPECT_EQ(v.value(), c.value);
    } else {
      EXPECT_EQ(v.status().message(), c.message);
    }
  }
  auto t = CsvTable::parse("a,n\nx,\n", "f.csv");
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->getInt(0, 1, 0).status().message(),
            "f.csv:2: column 'n' is empty, expected an integer");
  auto big = CsvTable::parse("n\n2000\n", "f.csv");
  EXPECT_EQ(big->getInt(0, 0, 0, 1000).status().message(),
            "f.csv:2: column 'n' value 2000 is above the maximum 1000");
}

TEST(CsvTest, ReadFileMissing) {
  auto t = CsvTable::readFile("/nonexistent/x.csv");
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.status().message(), "/nonexistent/x.csv: cannot open file");
}

}  // namespace
}  // namespace tessera::core
