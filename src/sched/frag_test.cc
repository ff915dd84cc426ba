#include "sched/frag.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace tessera::sched {
namespace {

std::vector<PodShape> repeat(const PodShape& s, int n) { return std::vector<PodShape>(n, s); }

TEST(TypicalPodsTest, MostPopularUntilCoverageThenRenormalised) {
  std::vector<PodShape> shapes;
  for (auto& [shape, n] : std::vector<std::pair<PodShape, int>>{{{1000, 500, 1, {}}, 50},
                                                                {{2000, 1000, 1, {}}, 30},
                                                                {{4000, 0, 0, {}}, 16},
                                                                {{8000, 1000, 8, {}}, 3},
                                                                {{500, 100, 1, {}}, 1}}) {
    auto more = repeat(shape, n);
    shapes.insert(shapes.end(), more.begin(), more.end());
  }
  // 50 + 30 + 16 = 96 >= 95: the third shape crosses the threshold and is kept.
  std::vector<TypicalPod> t = typicalPods(shapes, 0.95);
  ASSERT_EQ(t.size(), 3U);
  EXPECT_EQ(t[0].shape.milli, 500);
  EXPECT_EQ(t[1].shape.cpu_milli, 2000);
  EXPECT_EQ(t[2].shape.gpu_count, 0);
  EXPECT_DOUBLE_EQ(t[0].freq, 50.0 / 96);
  EXPECT_DOUBLE_EQ(t[0].freq + t[1].freq + t[2].freq, 1.0);
  EXPECT_EQ(typicalPods(shapes, 1.0).size(), 5U);
}

TEST(TypicalPodsTest, TiesPutLargerShapesFirst) {
  std::vector<PodShape> shapes = {{1000, 200, 1, {}}, {3000, 200, 1, {}}, {3000, 900, 1, {}}};
  std::vector<TypicalPod> t = typicalPods(shapes, 0.5);
  ASSERT_EQ(t.size(), 2U);  // 1/3 < 0.5 <= 2/3.
  EXPECT_EQ(t[0].shape.cpu_milli, 3000);
  EXPECT_EQ(t[0].shape.milli, 900);
  EXPECT_EQ(t[1].shape.cpu_milli, 3000);
  EXPECT_EQ(t[1].shape.milli, 200);
}

class FragModelTest : public ::testing::Test {
 protected:
  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  model::GpuModelId t4_ = *cat_.find("T4");
  model::GpuModelId v100_ = *cat_.find("V100M32");
  // Half the pods want 500 milli, a quarter a whole GPU, a quarter only CPU.
  FragModel fm_{
      {{{1000, 500, 1, {}}, 2, 0.5}, {{1000, 1000, 1, {}}, 1, 0.25}, {{1000, 0, 0, {}}, 1, 0.25}},
      cat_.size()};
};

TEST_F(FragModelTest, FreeShareTooSmallForTypicalPods) {
  const int32_t left[] = {1000, 300};
  // CPU-only pods: all 1300 is fragment for them (0.25 * 1300 = 325). The 500-pod fits on
  // GPU 0: only the 300 is fragment (0.5 * 300). The whole-GPU pod likewise (0.25 * 300).
  EXPECT_DOUBLE_EQ(fm_.frag(4000, left, t4_), 325 + 150 + 75);
}

TEST_F(FragModelTest, NoCpuMeansEverythingIsFragment) {
  const int32_t left[] = {1000, 300};
  EXPECT_DOUBLE_EQ(fm_.frag(500, left, t4_), 1300);
}

TEST_F(FragModelTest, ModelConstraintMeansNoAccess) {
  FragModel only_v100{{{{1000, 500, 1, {v100_}}, 1, 1.0}}, cat_.size()};
  const int32_t left[] = {1000};
  EXPECT_DOUBLE_EQ(only_v100.frag(4000, left, t4_), 1000);
  EXPECT_DOUBLE_EQ(only_v100.frag(4000, left, v100_), 0);
}

TEST_F(FragModelTest, MultiGpuPodsNeedEnoughFittingGpus) {
  FragModel eight{{{{1000, 1000, 2, {}}, 1, 1.0}}, cat_.size()};
  const int32_t two_free[] = {1000, 1000, 0};
  const int32_t one_free[] = {1000, 600, 0};
  EXPECT_DOUBLE_EQ(eight.frag(4000, two_free, t4_), 0);
  EXPECT_DOUBLE_EQ(eight.frag(4000, one_free, t4_), 1600);
  const int32_t none[] = {0, 0};
  EXPECT_DOUBLE_EQ(eight.frag(4000, none, t4_), 0);
}

TEST_F(FragModelTest, NodeFragReadsTheState) {
  ClusterState state(cat_, {testing::node(cat_, "n", 4, 16, "T4", 2)});
  EXPECT_DOUBLE_EQ(fm_.nodeFrag(state, 0), 0.25 * 2000);
  state.apply(testing::gpuTask(1000, 1, 700), Placement{0, 0b10});
  EXPECT_DOUBLE_EQ(fm_.nodeFrag(state, 0), fm_.frag(3000, std::vector<int32_t>{1000, 300}, t4_));
}

}  // namespace
}  // namespace tessera::sched
