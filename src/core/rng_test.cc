#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace tessera::core {
namespace {

TEST(RngTest, SameSeedSameStream) {
  Rng a(42);
  Rng b(42);
  Rng c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= (x != c.next());
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, UniformStaysInBoundsAndCoversIt) {
  Rng r(7);
  std::vector<int> hits(10, 0);
  for (int i = 0; i < 10000; ++i) {
    uint64_t v = r.uniform(10);
    ASSERT_LT(v, 10U);
    ++hits[v];
  }
  for (int h : hits) {
    EXPECT_GT(h, 850);  // Expected 1000 each; 850 is > 4.5 sd away.
    EXPECT_LT(h, 1150);
  }
  double d = r.uniformDouble();
  EXPECT_GE(d, 0.0);
  EXPECT_LT(d, 1.0);
}

TEST(RngTest, ShuffleIsAPermutation) {
  Rng r(1);
  std::vector<int> v(50);
  std::iota(v.begin(), v.end(), 0);
  std::vector<int> w = v;
  r.shuffle(std::span<int>(w));
  EXPECT_NE(v, w);
  std::sort(w.begin(), w.end());
  EXPECT_EQ(v, w);
}

}  // namespace
}  // namespace tessera::core
