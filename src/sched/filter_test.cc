#include "sched/filter.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace tessera::sched {
namespace {

using testing::cpuTask;
using testing::gpuTask;
using testing::migTask;

class FilterTest : public ::testing::Test {
 protected:
  FilterTest() {
    TrustGroups trust;
    trust.setGroup(model::TenantId{1}, 10);
    trust.setGroup(model::TenantId{2}, 10);
    state_ = std::make_unique<ClusterState>(
        cat_,
        std::vector<model::Node>{testing::node(cat_, "h100", 64, 256, "H100-80GB", 2),
                                 testing::node(cat_, "t4", 16, 64, "T4", 2)},
        trust);
  }

  NodeFit check(NodeIndex n, const model::TaskRequest& req) {
    return checkNode(*state_, n, resolveRequest(*state_, req));
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  std::unique_ptr<ClusterState> state_;
};

TEST_F(FilterTest, Cpu) {
  EXPECT_TRUE(check(1, cpuTask(16000)).fits());
  EXPECT_EQ(check(1, cpuTask(16001)).reason, FilterReason::kCpu);
}

TEST_F(FilterTest, Memory) {
  EXPECT_TRUE(check(1, cpuTask(1000, 64 * 1024)).fits());
  EXPECT_EQ(check(1, cpuTask(1000, 64 * 1024 + 1)).reason, FilterReason::kMemory);
}

TEST_F(FilterTest, GpuCount) {
  NodeFit two = check(0, gpuTask(1000, 2));
  EXPECT_TRUE(two.fits());
  EXPECT_EQ(two.eligible, 0b11U);
  EXPECT_EQ(check(0, gpuTask(1000, 3)).reason, FilterReason::kGpuCount);
  // One GPU busy: a 2-GPU task no longer fits, a 1-GPU task does, on the other GPU.
  state_->apply(gpuTask(1000, 1), Placement{0, 0b01});
  EXPECT_EQ(check(0, gpuTask(1000, 2)).reason, FilterReason::kGpuShare);
  NodeFit one = check(0, gpuTask(1000, 1));
  EXPECT_TRUE(one.fits());
  EXPECT_EQ(one.eligible, 0b10U);
}

TEST_F(FilterTest, GpuShare) {
  state_->apply(gpuTask(1000, 1, 700), Placement{1, 0b01});
  state_->apply(gpuTask(1000, 1, 500), Placement{1, 0b10});
  NodeFit f = check(1, gpuTask(1000, 1, 300));
  EXPECT_TRUE(f.fits());
  EXPECT_EQ(f.eligible, 0b11U);
  f = check(1, gpuTask(1000, 1, 400));
  EXPECT_EQ(f.eligible, 0b10U);
  EXPECT_EQ(check(1, gpuTask(1000, 1, 501)).reason, FilterReason::kGpuShare);
  // A whole GPU needs an idle one.
  EXPECT_EQ(check(1, gpuTask(1000, 1)).reason, FilterReason::kGpuShare);
}

TEST_F(FilterTest, GpuMemory) {
  model::TaskRequest r = gpuTask(1000, 1, 100);
  r.gpu_memory = core::MiB{16384};  // All of a T4.
  EXPECT_TRUE(check(1, r).fits());
  r.gpu_memory = core::MiB{16385};
  EXPECT_EQ(check(1, r).reason, FilterReason::kGpuMemory);
  // A share without explicit memory takes its proportion: 600 milli of a T4 leaves 40%.
  state_->apply(gpuTask(1000, 1, 600), Placement{1, 0b01});
  state_->apply(gpuTask(1000, 1, 600), Placement{1, 0b10});
  r.gpu_memory = core::MiB{16384 - 16384 * 6 / 10 + 1};
  EXPECT_EQ(check(1, r).reason, FilterReason::kGpuMemory);
  r.gpu_memory = core::MiB{16384 - 16384 * 6 / 10};
  EXPECT_TRUE(check(1, r).fits());
}

TEST_F(FilterTest, GpuModel) {
  model::TaskRequest r = gpuTask(1000, 1);
  r.models = {*cat_.find("T4")};
  EXPECT_EQ(check(0, r).reason, FilterReason::kGpuModel);
  EXPECT_TRUE(check(1, r).fits());
  r.models.push_back(*cat_.find("H100-80GB"));
  EXPECT_TRUE(check(0, r).fits());
}

TEST_F(FilterTest, MigProfileAndSlot) {
  EXPECT_EQ(check(1, migTask("3g.40gb")).reason, FilterReason::kMigProfile);  // T4: no MIG.
  EXPECT_EQ(check(0, migTask("3g.71gb")).reason, FilterReason::kMigProfile);  // H200 name.
  EXPECT_TRUE(check(0, migTask("3g.40gb")).fits());
  const model::GpuModelInfo& h100 = cat_.model(*cat_.find("H100-80GB"));
  const int g4 = h100.findMigProfile("4g.40gb");
  const int g3 = h100.findMigProfile("3g.40gb");
  // GPU 0: 4g + 3g fills it; GPU 1 holds a whole-GPU task.
  state_->apply(migTask("4g.40gb"), Placement{0, 0b01, g4, 0});
  state_->apply(migTask("3g.40gb"), Placement{0, 0b01, g3, 4});
  state_->apply(gpuTask(1000, 1), Placement{0, 0b10});
  NodeFit f = check(0, migTask("1g.10gb"));
  EXPECT_EQ(f.reason, FilterReason::kMigSlot);
  // A MIG request cannot join a GPU in exclusive use, nor a fraction a MIG GPU.
  EXPECT_EQ(checkGpu(*state_, state_->gpus(0)[1], resolveRequest(*state_, migTask("1g.10gb"))),
            FilterReason::kSharingMode);
  EXPECT_EQ(checkGpu(*state_, state_->gpus(0)[0], resolveRequest(*state_, gpuTask(100, 1, 100))),
            FilterReason::kSharingMode);
}

// The API gives a MIG request a share of 1000 (its gpu count of 1): a free slot is what counts,
// not whether a whole GPU's share is free on the node. (Two tenants' slices on the last GPU.)
TEST_F(FilterTest, AMigRequestFitsAFreeSlotWhateverItsShareField) {
  const model::GpuModelInfo& h100 = cat_.model(*cat_.find("H100-80GB"));
  state_->apply(gpuTask(1000, 1), Placement{0, 0b10});
  model::TaskRequest slice = migTask("3g.40gb");
  slice.gpu_milli = core::kWholeGpu;
  slice.tenant = model::TenantId{5};
  state_->apply(slice, Placement{0, 0b01, h100.findMigProfile("3g.40gb"), 0});
  slice.tenant = model::TenantId{6};  // Another tenant, in no trust group: slices may share.
  EXPECT_TRUE(check(0, slice).fits()) << filterReasonName(check(0, slice).reason);
}

TEST_F(FilterTest, SharingModeKeepsOneIsolationKind) {
  model::TaskRequest mps = gpuTask(1000, 1, 300);
  model::TaskRequest timeslice = mps;
  timeslice.isolation = model::Isolation::kNone;
  state_->apply(mps, Placement{1, 0b01});
  state_->apply(gpuTask(1000, 1, 300), Placement{1, 0b10});
  EXPECT_EQ(check(1, timeslice).reason, FilterReason::kSharingMode);
  EXPECT_TRUE(check(1, mps).fits());
}

TEST_F(FilterTest, TrustBoundary) {
  auto share = [](uint32_t tenant) {
    model::TaskRequest r = gpuTask(1000, 1, 300);
    r.tenant = model::TenantId{tenant};
    return r;
  };
  // Tenant 1 holds a share of both T4 GPUs.
  state_->apply(share(1), Placement{1, 0b01});
  state_->apply(share(1), Placement{1, 0b10});
  EXPECT_TRUE(check(1, share(1)).fits());  // Itself.
  EXPECT_TRUE(check(1, share(2)).fits());  // Same trust group.
  EXPECT_EQ(check(1, share(3)).reason, FilterReason::kTrustBoundary);
  // Whole GPUs and MIG slices may sit beside other tenants on the same node.
  model::TaskRequest whole = gpuTask(1000, 1);
  whole.tenant = model::TenantId{3};
  EXPECT_TRUE(check(0, whole).fits());
}

TEST_F(FilterTest, CpuOnlyTaskIgnoresGpus) {
  state_->apply(gpuTask(1000, 2), Placement{1, 0b11});
  NodeFit f = check(1, cpuTask(1000));
  EXPECT_TRUE(f.fits());
  EXPECT_EQ(f.eligible, 0U);
}

TEST_F(FilterTest, CpuHeldForFreeGpusIsOutOfReachOfCpuOnlyTasks) {
  // t4: 16 cores, 2 GPUs. Hold 6 cores per free GPU: 12 of 16 while both are free.
  state_->setCpuPerFreeGpu(6000);
  EXPECT_TRUE(check(1, cpuTask(4000)).fits());
  EXPECT_EQ(check(1, cpuTask(4001)).reason, FilterReason::kCpuHeldForGpus);
  // GPU tasks use the held CPU.
  EXPECT_TRUE(check(1, gpuTask(16000, 2)).fits());
  // Half a GPU taken: 9 cores held (1.5 free GPUs), 15 free.
  state_->apply(gpuTask(1000, 1, 500), Placement{1, 0b01});
  EXPECT_TRUE(check(1, cpuTask(6000)).fits());
  EXPECT_EQ(check(1, cpuTask(6001)).reason, FilterReason::kCpuHeldForGpus);
  // Every GPU busy: nothing is held.
  state_->apply(gpuTask(1000, 1, 500), Placement{1, 0b01});
  state_->apply(gpuTask(1000, 1), Placement{1, 0b10});
  EXPECT_TRUE(check(1, cpuTask(13000)).fits());
  // Off again: the whole node's free CPU.
  state_->setCpuPerFreeGpu(0);
  EXPECT_TRUE(check(0, cpuTask(64000)).fits());
  EXPECT_EQ(filterReasonName(FilterReason::kCpuHeldForGpus), "CPU held for the node's free GPUs");
}

}  // namespace
}  // namespace tessera::sched
