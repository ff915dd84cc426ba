#include "core/strings.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

TEST(StringsTest, SplitListTrimsAndDropsEmptyItems) {
  EXPECT_EQ(splitList("a, b,,c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(splitList("T4|V100M32|", '|'), (std::vector<std::string>{"T4", "V100M32"}));
  EXPECT_TRUE(splitList("").empty());
  EXPECT_TRUE(splitList(" , ").empty());
}

}  // namespace
}  // namespace tessera::core
