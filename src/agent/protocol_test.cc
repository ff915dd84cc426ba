#include "agent/protocol.h"

#include <gtest/gtest.h>

#include "agent/runtime.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

NodeGpus fourGpus() {
  NodeGpus g;
  for (int i = 0; i < 4; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(i);
    gpu.memory_mib = 80000;
    gpu.minor = 10 + i;
    g.gpus.push_back(gpu);
  }
  return g;
}

json task() {
  return {{"task", "team-1.train.0"}, {"generation", 3},    {"tenant", "team-1"},
          {"workload", "train"},      {"index", 0},         {"command", {"python", "t.py"}},
          {"env", {{"LR", "0.1"}}},   {"gpus", {2, 0}},     {"milli_per_gpu", 1000},
          {"cpu_milli", 4000},        {"memory_mib", 2048}, {"duration_s", 0}};
}

TEST(ProtocolTest, AnAssignmentPinsTheNodesOwnGpusAndDevices) {
  auto a = assignmentFromJson(task(), fourGpus(), {.device_dir = "/fake/dev"});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->spec.id, "team-1.train.0");
  EXPECT_EQ(a->generation, 3U);
  EXPECT_EQ(a->spec.command, (std::vector<std::string>{"python", "t.py"}));
  EXPECT_EQ(a->spec.env.at("LR"), "0.1");
  EXPECT_EQ(a->spec.gpus.mode, GpuPinning::Mode::kWhole);
  EXPECT_EQ(a->spec.gpus.uuids, (std::vector<std::string>{"GPU-2", "GPU-0"}));
  EXPECT_EQ(a->spec.device_nodes,
            (std::vector<std::string>{"/fake/dev/nvidia12", "/fake/dev/nvidia10"}));
  EXPECT_EQ(a->spec.limits.cpu_milli, 4000);
  EXPECT_EQ(a->spec.limits.memory_mib, 2048);
  EXPECT_TRUE(a->spec.limits.restrict_devices);
  EXPECT_EQ(a->grace, std::chrono::milliseconds(10000));  // The agent's default...
  json t = task();
  t["grace_ms"] = 45000;  // ...unless the workload has its own.
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {})->grace, std::chrono::milliseconds(45000));
}

// Issue #38: a task of a workload of several finds its peers in its environment, by PyTorch's
// names and Tessera's, and in a hostfile of DeepSpeed's and MPI's form.
TEST(ProtocolTest, ATaskOfSeveralGetsItsRendezvous) {
  json t = task();
  t["index"] = 2;
  t["task_count"] = 3;
  t["hosts"] = {"10.1.0.1", "10.1.0.2", "10.1.0.2"};
  t["ports"] = {{"master", 20005}, {"http-api", 20006}};
  t["master_port"] = 20001;
  auto a = assignmentFromJson(t, fourGpus(), {});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  const auto env = rendezvousEnvironment(a->spec, "/work/team-1.train.2");
  EXPECT_EQ(env.at("TESSERA_TASK_COUNT"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("RANK"), "2");
  EXPECT_EQ(env.at("NODE_RANK"), "2");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");  // Its two GPUs.
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.1.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "20001");  // Task 0's, not its own.
  EXPECT_EQ(env.at("TESSERA_PORT_MASTER"), "20005");
  EXPECT_EQ(env.at("TESSERA_PORT_HTTP_API"), "20006");
  EXPECT_EQ(env.at("TESSERA_HOSTS"), "10.1.0.1,10.1.0.2,10.1.0.2");
  EXPECT_EQ(env.at("TESSERA_HOSTFILE"), "/work/team-1.train.2/hostfile");
  EXPECT_EQ(hostfileText(a->spec.rendezvous),
            "10.1.0.1 slots=2\n10.1.0.2 slots=2\n10.1.0.2 slots=2\n");
  // A lone task: its count and ports only, none of PyTorch's names.
  json one = task();
  one["ports"] = {{"http", 20010}};
  auto lone = assignmentFromJson(one, fourGpus(), {});
  ASSERT_TRUE(lone.isOk()) << lone.status().message();
  const auto mine = rendezvousEnvironment(lone->spec, "/w");
  EXPECT_EQ(mine.at("TESSERA_TASK_COUNT"), "1");
  EXPECT_EQ(mine.at("TESSERA_PORT_HTTP"), "20010");
  EXPECT_FALSE(mine.contains("WORLD_SIZE"));
  EXPECT_FALSE(mine.contains("MASTER_ADDR"));
}

TEST(ProtocolTest, AContainerKeepsItsImageAndSimulatedGpusGetStandIns) {
  json t = task();
  t["image"] = "oci-archive:/images/b.tar";
  t["shm_mib"] = 256;
  t["read_only_rootfs"] = true;
  t.erase("command");
  auto a = assignmentFromJson(t, fourGpus(), {.device_dir = ""});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->spec.container.image, "oci-archive:/images/b.tar");
  EXPECT_EQ(a->spec.container.shm_mib, 256);
  EXPECT_TRUE(a->spec.container.read_only_rootfs);
  EXPECT_TRUE(a->spec.command.empty());  // The image's entrypoint, not a placeholder sleep.
  EXPECT_TRUE(a->spec.device_nodes.empty());
  using Dev = std::pair<std::string, std::string>;
  EXPECT_EQ(a->spec.container.simulated_devices,
            (std::vector<Dev>{{"/dev/nvidia12", "GPU-2"}, {"/dev/nvidia10", "GPU-0"}}));
  // Real device nodes: no stand-ins.
  auto real = assignmentFromJson(t, fourGpus(), {.device_dir = "/fake/dev"});
  ASSERT_TRUE(real.isOk());
  EXPECT_TRUE(real->spec.container.simulated_devices.empty());
  EXPECT_EQ(real->spec.device_nodes.size(), 2U);
  // A process without a command still gets the placeholder.
  t.erase("image");
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {})->spec.command[0], "sleep");
}

TEST(ProtocolTest, SharesAreMpsClientsCappedToTheirShare) {
  json t = task();
  t["milli_per_gpu"] = 500;
  t["gpus"] = {3};
  t["isolation"] = "process";
  auto a = assignmentFromJson(t, fourGpus(), {});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->spec.gpus.mode, GpuPinning::Mode::kMps);
  EXPECT_EQ(a->spec.gpus.uuids, std::vector<std::string>{"GPU-3"});
  EXPECT_EQ(a->spec.gpus.mps_thread_percentage, 50);
  EXPECT_EQ(a->spec.gpus.mps_memory_limit_mib, 40000);  // Half of 80,000 MiB.
  t["gpu_memory_mib"] = 10240;                          // Its own cap, when it gave one.
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {})->spec.gpus.mps_memory_limit_mib, 10240);
  t["isolation"] = "hardware";  // The default: still MPS, the strongest a share can have.
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {})->spec.gpus.mode, GpuPinning::Mode::kMps);
}

TEST(ProtocolTest, UnisolatedFractionsGetTheInterposersLimitsAndNoCommandSleeps) {
  json t = task();
  t["milli_per_gpu"] = 250;
  t["isolation"] = "none";
  t["gpus"] = {1};
  t.erase("command");
  t["duration_s"] = 30;
  auto a = assignmentFromJson(t, fourGpus(), {.device_dir = ""});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->spec.gpus.mode, GpuPinning::Mode::kFractional);
  EXPECT_EQ(a->spec.gpus.memory_limit_mib, 20000);
  EXPECT_EQ(a->spec.gpus.compute_share_percent, 25);
  EXPECT_TRUE(a->spec.device_nodes.empty());
  EXPECT_EQ(a->spec.command, (std::vector<std::string>{"sleep", "30"}));
  t["duration_s"] = 0;
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {})->spec.command,
            (std::vector<std::string>{"sleep", "infinity"}));
  t["gpus"] = json::array();
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {})->spec.gpus.mode, GpuPinning::Mode::kNone);
}

// A MIG slice names its GPU and instance; the agent makes the instance and names its MIG device
// (Agent::prepareMig), so the assignment carries no GPU UUID, and a slice is never an MPS client.
TEST(ProtocolTest, AMigSliceNamesItsGpuAndInstance) {
  json t = task();
  t["gpus"] = {1};
  t["milli_per_gpu"] = 428;
  t["mig_profile"] = 4;
  t["mig_start"] = 4;
  auto a = assignmentFromJson(t, fourGpus(), {.device_dir = "/fake/dev"});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->mig.gpu, 1);
  EXPECT_EQ(a->mig.instance, (model::MigInstance{4, 4}));
  EXPECT_EQ(a->spec.gpus.mode, GpuPinning::Mode::kMig);
  EXPECT_TRUE(a->spec.gpus.uuids.empty());
  EXPECT_EQ(a->spec.device_nodes, std::vector<std::string>{"/fake/dev/nvidia11"});
  t["gpus"] = {7};
  EXPECT_FALSE(assignmentFromJson(t, fourGpus(), {}).isOk());
}

// The interposer holds a time-sliced share to its limits: preloaded when the agent has it; on
// a node with real GPUs, a task without it is refused rather than run unlimited.
TEST(ProtocolTest, TimeSlicedSharesArePreloadedWithTheInterposerOrRefused) {
  json t = task();
  t["milli_per_gpu"] = 300;
  t["isolation"] = "none";
  t["gpus"] = {1};
  const std::string lib = "/opt/tessera/lib/libtessera-cuda.so";
  auto a = assignmentFromJson(t, fourGpus(), {.interposer = lib, .require_interposer = true});
  ASSERT_TRUE(a.isOk()) << a.status().message();
  EXPECT_EQ(a->spec.gpus.interposer, lib);
  EXPECT_EQ(gpuEnvironment(a->spec.gpus).at("LD_PRELOAD"), lib);
  auto refused = assignmentFromJson(t, fourGpus(), {.require_interposer = true});
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("needs the CUDA interposer"), std::string::npos)
      << refused.status().message();
  // Simulated GPUs: the variables alone. MPS shares and whole GPUs never get it.
  EXPECT_TRUE(assignmentFromJson(t, fourGpus(), {})->spec.gpus.interposer.empty());
  t["isolation"] = "process";
  EXPECT_TRUE(assignmentFromJson(t, fourGpus(), {.interposer = lib, .require_interposer = true})
                  ->spec.gpus.interposer.empty());
}

TEST(ProtocolTest, RefusesGpusTheNodeDoesNotHaveAndMalformedTasks) {
  json t = task();
  t["gpus"] = {4};
  auto a = assignmentFromJson(t, fourGpus(), {});
  ASSERT_FALSE(a.isOk());
  EXPECT_NE(a.status().message().find("GPU 4 is not on this node"), std::string::npos);
  t = task();
  t["command"] = "python t.py";
  EXPECT_EQ(assignmentFromJson(t, fourGpus(), {}).status().code(),
            core::StatusCode::kInvalidArgument);
  t = task();
  t.erase("generation");
  EXPECT_FALSE(assignmentFromJson(t, fourGpus(), {}).isOk());
  t = task();
  t["mig_profile"] = 0;  // Without its start slice.
  EXPECT_NE(assignmentFromJson(t, fourGpus(), {}).status().message().find("mig_start"),
            std::string::npos);
  t["mig_start"] = 0;  // On two GPUs.
  EXPECT_NE(assignmentFromJson(t, fourGpus(), {}).status().message().find("needs one GPU"),
            std::string::npos);
  // The server could not resolve the task's secrets: it must not start, and the agent says why.
  t = task();
  t["credentials_error"] = "its secrets: secret 'app/x': kv: no secret at 'app/x'";
  auto refused = assignmentFromJson(t, fourGpus(), {});
  EXPECT_EQ(refused.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("no secret at 'app/x'"), std::string::npos);
}

TEST(ProtocolTest, ReportsSayWhatHappened) {
  TaskReport r;
  r.id = "t.w.0";
  r.generation = 2;
  r.state = TaskReport::State::kExited;
  r.exit.signal = 9;
  r.exit.oom_killed = true;
  r.exit.run_time = std::chrono::milliseconds(1500);
  const json j = reportToJson(r);
  EXPECT_EQ(j["state"], "exited");
  EXPECT_EQ(j["signal"], 9);
  EXPECT_EQ(j["oom_killed"], true);
  EXPECT_EQ(j["run_time_ms"], 1500);
  r.state = TaskReport::State::kFailedToStart;
  r.error = "no such program";
  EXPECT_EQ(reportToJson(r)["error"], "no such program");
  EXPECT_EQ(reportToJson(r)["state"], "failed_to_start");
}

}  // namespace
}  // namespace tessera::agent
