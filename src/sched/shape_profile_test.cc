#include "sched/shape_profile.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::sched {
namespace {

using std::chrono::hours;

const PodShape kShare{8000, 500, 1, {}};
const PodShape kWhole{16000, 1000, 1, {}};
const PodShape kCpu{4000, 0, 0, {}};

TEST(ShapeProfileTest, TypicalShapesAreTheWeightiestWithTheirFrequencies) {
  core::FakeClock clock;
  ShapeProfile p({.half_life = hours(24), .max_shapes = 16});
  p.add(kShare, 60, clock.now());
  p.add(kWhole, 30, clock.now());
  p.add(kCpu, 8, clock.now());
  p.add({1000, 100, 1, {}}, 2, clock.now());  // 2 %: beyond FGD's 95 % coverage.
  EXPECT_DOUBLE_EQ(p.seen(clock.now()), 100);
  const std::vector<TypicalPod> t = p.typical();
  ASSERT_EQ(t.size(), 3U);
  EXPECT_EQ(t[0].shape, kShare);
  EXPECT_EQ(t[1].shape, kWhole);
  EXPECT_EQ(t[2].shape, kCpu);
  EXPECT_NEAR(t[0].freq, 60.0 / 98, 1e-12);
  EXPECT_NEAR(t[2].freq, 8.0 / 98, 1e-12);
}

TEST(ShapeProfileTest, OldSubmissionsCountHalfAfterAHalfLife) {
  core::FakeClock clock;
  ShapeProfile p({.half_life = hours(24), .max_shapes = 16});
  p.add(kShare, 100, clock.now());
  clock.advance(hours(24));
  EXPECT_NEAR(p.seen(clock.now()), 50, 1e-9);
  p.add(kWhole, 100, clock.now());  // Now twice the share's weight.
  const std::vector<TypicalPod> t = p.typical();
  ASSERT_EQ(t.size(), 2U);
  EXPECT_EQ(t[0].shape, kWhole);
  EXPECT_NEAR(t[0].freq, 2.0 / 3, 1e-9);
  // Years later the weights are still finite, and the mix is the recent one.
  for (int day = 0; day < 3000; ++day) {
    clock.advance(hours(24));
    p.add(kCpu, 1, clock.now());
  }
  EXPECT_NEAR(p.seen(clock.now()), 2, 1e-6);  // 1 + 1/2 + 1/4 + ...
  EXPECT_EQ(p.typical()[0].shape, kCpu);
  EXPECT_NEAR(p.typical()[0].freq, 1, 1e-9);
}

TEST(ShapeProfileTest, MemoryIsBoundedByDroppingTheLightestShape) {
  core::FakeClock clock;
  ShapeProfile p({.half_life = hours(24), .max_shapes = 3});
  p.add(kShare, 50, clock.now());
  p.add(kWhole, 40, clock.now());
  p.add(kCpu, 1, clock.now());
  for (int i = 0; i < 1000; ++i) {  // A stream of one-off shapes.
    p.add({1000 + i, 250, 1, {}}, 1, clock.now());
  }
  EXPECT_EQ(p.size(), 3U);
  const std::vector<ShapeProfile::Entry> e = p.entries(clock.now());
  ASSERT_EQ(e.size(), 3U);
  EXPECT_EQ(e[0].shape, kShare);
  EXPECT_EQ(e[1].shape, kWhole);
  EXPECT_EQ(e[2].shape.cpu_milli, 1999);  // The newest one-off took the lightest's place.
}

TEST(ShapeProfileTest, EntriesRestoreTheSameProfileLater) {
  core::FakeClock clock;
  ShapeProfile p({.half_life = hours(24), .max_shapes = 8});
  p.add(kShare, 30, clock.now());
  clock.advance(hours(12));
  p.add(kWhole, 10, clock.now());
  const std::vector<ShapeProfile::Entry> saved = p.entries(clock.now());
  ShapeProfile q({.half_life = hours(24), .max_shapes = 8});
  clock.advance(hours(1));
  q.restore(saved, clock.now());
  EXPECT_NEAR(q.seen(clock.now()), p.seen(clock.now() - hours(1)), 1e-9);
  ASSERT_EQ(q.typical().size(), p.typical().size());
  for (size_t i = 0; i < p.typical().size(); ++i) {
    EXPECT_EQ(q.typical()[i].shape, p.typical()[i].shape);
    EXPECT_NEAR(q.typical()[i].freq, p.typical()[i].freq, 1e-9);
  }
  // Nonsense weights are not taken.
  q.restore({{kCpu, -1}, {kShare, std::nan("")}, {kWhole, 5}}, clock.now());
  EXPECT_EQ(q.size(), 1U);
}

TEST(ShapeProfileTest, WeightedTypicalPodsMatchCountedOnes) {
  std::vector<PodShape> list;
  for (int i = 0; i < 7; ++i)
    list.push_back(kShare);
  for (int i = 0; i < 7; ++i)
    list.push_back(kWhole);  // A tie: the larger CPU first.
  for (int i = 0; i < 1; ++i)
    list.push_back(kCpu);
  const std::vector<TypicalPod> counted = typicalPods(list);
  const std::vector<TypicalPod> weighted = typicalPods({{kCpu, 1.0}, {kShare, 7.0}, {kWhole, 7.0}});
  ASSERT_EQ(counted.size(), weighted.size());
  for (size_t i = 0; i < counted.size(); ++i) {
    EXPECT_EQ(counted[i].shape, weighted[i].shape);
    EXPECT_EQ(counted[i].count, weighted[i].count);
    EXPECT_DOUBLE_EQ(counted[i].freq, weighted[i].freq);
  }
  EXPECT_EQ(counted[0].shape, kWhole);
}

}  // namespace
}  // namespace tessera::sched
