// A small CSV reader for trace and node-list files, with errors that name the file and line.
//
//   TESSERA_ASSIGN_OR_RETURN(CsvTable t, CsvTable::readFile("nodes.csv"));
//   TESSERA_ASSIGN_OR_RETURN(size_t cpu_col, t.requireColumn("cpu_milli"));
//   for (size_t r = 0; r < t.rowCount(); ++r) {
//     TESSERA_ASSIGN_OR_RETURN(int64_t cpu, t.getInt(r, cpu_col, /*min=*/0));
//   }
//
// Accepts LF or CRLF line endings, double-quoted fields with "" escapes, and ignores blank
// lines. The first line is the header. Every row must have as many fields as the header.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::core {

class CsvTable {
 public:
  // Parses `text`; `source` names it in error messages (usually the file path).
  static Result<CsvTable> parse(std::string_view text, std::string source);
  static Result<CsvTable> readFile(const std::string& path);

  const std::string& source() const { return source_; }
  const std::vector<std::string>& header() const { return header_; }
  size_t rowCount() const { return rows_.size(); }

  // Index of the column named `name`, or an error naming the file and the missing column.
  Result<size_t> requireColumn(std::string_view name) const;
  // Index of the column, or -1 when absent.
  int findColumn(std::string_view name) const;

  std::string_view cell(size_t row, size_t column) const { return rows_[row].fields[column]; }
  // The 1-based line number of a row in the source file, for error messages.
  size_t lineOf(size_t row) const { return rows_[row].line; }

  // The cell as a decimal integer in [min, max]; an error "file:line: column 'x' ..." otherwise.
  Result<int64_t> getInt(size_t row, size_t column, int64_t min = INT64_MIN,
                         int64_t max = INT64_MAX) const;

  // "file:line" for a row, for callers composing their own messages.
  std::string where(size_t row) const;

 private:
  struct Row {
    size_t line;
    std::vector<std::string> fields;
  };

  std::string source_;
  std::vector<std::string> header_;
  std::vector<Row> rows_;
};

}  // namespace tessera::core
