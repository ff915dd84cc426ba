#include "sched/share_values.h"

#include <gtest/gtest.h>

namespace tessera::sched {
namespace {

TEST(ShareValuesTest, OneSizeHalves) {
  auto v = ShareValues::fromShares({{500, 1.0}});
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_NEAR(v->price(500), 0.5, 1e-9);
  EXPECT_NEAR(v->gapValue(1000), 1.0, 1e-9);
  EXPECT_NEAR(v->gapValue(999), 0.5, 1e-9);
  EXPECT_NEAR(v->gapValue(499), 0.0, 1e-9);
  EXPECT_NEAR(v->reducedCost(1000, 500), 0.0, 1e-9);
  EXPECT_NEAR(v->reducedCost(700, 500), 0.0, 1e-9);  // The 200 left was dead anyway.
  EXPECT_NEAR(v->lpObjective(), 0.5, 1e-9);          // Two per GPU.
}

TEST(ShareValuesTest, ComplementarySizesPairUp) {
  auto v = ShareValues::fromShares({{600, 1.0}, {400, 1.0}});
  ASSERT_TRUE(v.isOk());
  EXPECT_NEAR(v->price(600) + v->price(400), 1.0, 1e-9);  // One GPU holds one of each.
  EXPECT_NEAR(v->lpObjective(), 1.0, 1e-9);
  EXPECT_NEAR(v->reducedCost(1000, 400), 0.0, 1e-9);
  EXPECT_NEAR(v->reducedCost(600, 600), 0.0, 1e-9);
}

TEST(ShareValuesTest, BreakingAGapABigShareNeedsCosts) {
  // 810s need a GPU each; 470s pair up.
  auto v = ShareValues::fromShares({{810, 1.0}, {470, 1.0}});
  ASSERT_TRUE(v.isOk());
  EXPECT_NEAR(v->price(810), 1.0, 1e-9);
  EXPECT_NEAR(v->price(470), 0.5, 1e-9);
  EXPECT_NEAR(v->reducedCost(530, 470), 0.0, 1e-9);   // Completes a 470 pair.
  EXPECT_NEAR(v->reducedCost(1000, 470), 0.0, 1e-9);  // Starts one.
  // A 470 in a 900 gap leaves 430: the gap could have taken an 810.
  EXPECT_NEAR(v->reducedCost(900, 470), 0.5, 1e-9);
  // A size outside the LP is priced at the value it occupies.
  EXPECT_NEAR(v->price(820), v->gapValue(820), 1e-9);
}

TEST(ShareValuesTest, EmptyAndInvalid) {
  auto empty = ShareValues::fromShares({});
  ASSERT_TRUE(empty.isOk());
  EXPECT_EQ(empty->reducedCost(1000, 300), 0.0);
  EXPECT_EQ(ShareValues::fromShares({{1000, 1.0}}).status().message(),
            "share size 1000 is outside 1..999");
  EXPECT_FALSE(ShareValues::fromShares({{0, 1.0}}).isOk());
}

}  // namespace
}  // namespace tessera::sched
