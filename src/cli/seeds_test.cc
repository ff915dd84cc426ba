#include "cli/seeds.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

TEST(SeedsTest, RangeListAndSingle) {
  EXPECT_EQ(parseSeeds("42-51").value(),
            (std::vector<uint64_t>{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}));
  EXPECT_EQ(parseSeeds("1,5,9").value(), (std::vector<uint64_t>{1, 5, 9}));
  EXPECT_EQ(parseSeeds("7").value(), (std::vector<uint64_t>{7}));
  EXPECT_EQ(parseSeeds("1, 3-5").value(), (std::vector<uint64_t>{1, 3, 4, 5}));
}

TEST(SeedsTest, Errors) {
  EXPECT_EQ(parseSeeds("").status().message(), "--seeds is empty");
  EXPECT_EQ(parseSeeds("5-3").status().message(), "--seeds '5-3': range '5-3' is empty");
  EXPECT_EQ(parseSeeds("x").status().message(), "--seeds 'x': 'x' is not a non-negative integer");
  EXPECT_EQ(parseSeeds("-4").status().message(), "--seeds '-4': '' is not a non-negative integer");
  EXPECT_FALSE(parseSeeds("1-1000000").isOk());
}

}  // namespace
}  // namespace tessera::cli
