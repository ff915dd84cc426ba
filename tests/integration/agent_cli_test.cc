// `tessera agent discover` as an operator runs it: with NVML (the fake libnvidia-ml.so.1 of
// tests/fake_nvml, scripted), without it, and with a simulated profile.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class AgentCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-agent-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const char* b = std::getenv("TESSERA_BINARY_DIR");
    fake_ = std::string(b != nullptr ? b : ".") + "/tests/fake_nvml/full/libnvidia-ml.so.1";
  }
  void TearDown() override { fs::remove_all(dir_); }
  CmdResult run(const std::string& args, const std::string& env = "") {
    return runTessera(args, dir_ / "err", env);
  }
  std::string script(const json& j) {
    const fs::path p = dir_ / "nvml.json";
    std::ofstream(p) << j.dump();
    return "FAKE_NVML_SCRIPT=" + p.string();
  }

  fs::path dir_;
  std::string fake_;
};

TEST_F(AgentCliTest, ShowsTheGpusNvmlReports) {
  const std::string env = script({{"driver_version", "550.54.15"},
                                  {"cuda_version", 12040},
                                  {"gpus",
                                   {{{"uuid", "GPU-aaaaaaaa-1111-2222-3333-444444444444"},
                                     {"name", "NVIDIA H100 80GB HBM3"},
                                     {"memory_mib", 81559},
                                     {"pci_bus_id", "00000000:18:00.0"},
                                     {"mig",
                                      {{"current", 1},
                                       {"devices",
                                        {{{"index", 0},
                                          {"uuid", "MIG-bbbbbbbb-1111-2222-3333-444444444444"},
                                          {"name", "NVIDIA H100 80GB HBM3 MIG 7g.80gb"},
                                          {"memory_mib", 81152}}}}}}},
                                    {{"uuid", "GPU-cccccccc-1111-2222-3333-444444444444"},
                                     {"name", "NVIDIA H100 80GB HBM3"},
                                     {"memory_mib", 81559},
                                     {"pci_bus_id", "00000000:2A:00.0"}}}},
                                  {"topology", {{0, 20}, {20, 0}}},
                                  {"p2p_nvlink", {{0, 0}, {0, 0}}}});
  CmdResult r = run("agent discover --node gpu-01 --nvml-library " + fake_, env);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("node gpu-01: 2 GPUs (nvml, driver 550.54.15, CUDA 12.4)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GPU-aaaaaaaa-1111-2222-3333-444444444444 H100-80GB"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("on, 1 devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MIG-bbbbbbbb-1111-2222-3333-444444444444 7g.80gb"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("GPU0  X     NV"), std::string::npos) << r.out;
  // The same as JSON.
  CmdResult j = run("agent discover -format=json --nvml-library " + fake_, env);
  ASSERT_EQ(j.rc, 0) << j.err;
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["gpus"][1]["uuid"], "GPU-cccccccc-1111-2222-3333-444444444444");
  EXPECT_EQ(doc["gpus"][0]["mig_devices"][0]["profile"], "7g.80gb");
  EXPECT_EQ(doc["topology"][0][1], "NV");
}

TEST_F(AgentCliTest, WithoutNvmlItRefusesOrSimulatesAsConfigured) {
  CmdResult refused = run("agent discover --nvml-library " + (dir_ / "missing.so").string());
  EXPECT_EQ(refused.rc, 1);
  EXPECT_NE(refused.err.find("nvml: cannot load"), std::string::npos) << refused.err;
  // A failing call, not a missing library: the error names it.
  CmdResult lost = run("agent discover --nvml-library " + fake_,
                       script({{"driver_version", "1"},
                               {"gpus", {{{"uuid", "GPU-1"}, {"name", "Tesla T4"}}}},
                               {"errors", {{"nvmlDeviceGetName", 15}}}}));
  EXPECT_EQ(lost.rc, 1);
  EXPECT_NE(lost.err.find("GPU 0: nvmlDeviceGetName: GPU is lost (15)"), std::string::npos)
      << lost.err;
  // From a config file, falling back to a simulated profile.
  std::ofstream(dir_ / "agent.hcl")
      << "node_name = \"lab-1\"\n"
      << "gpus {\n  nvml_library = \"" << (dir_ / "missing.so").string()
      << "\"\n  fallback_profile = \"l40s-4x\"\n}\n";
  CmdResult fallback = run("agent discover -config=" + (dir_ / "agent.hcl").string());
  EXPECT_EQ(fallback.rc, 0) << fallback.err;
  EXPECT_NE(fallback.err.find("simulating node profile 'l40s-4x' instead"), std::string::npos)
      << fallback.err;
  EXPECT_NE(fallback.out.find("node lab-1: 4 GPUs (sim:l40s-4x"), std::string::npos)
      << fallback.out;
}

TEST_F(AgentCliTest, SimulatedProfilesAndBadInput) {
  CmdResult sim = run("agent discover --backend sim --profile a100-8x --node n1 --format json");
  ASSERT_EQ(sim.rc, 0) << sim.err;
  const json doc = json::parse(sim.out);
  EXPECT_EQ(doc["gpus"].size(), 8U);
  EXPECT_EQ(doc["gpus"][0]["model"], "A100-80GB");
  // Stable: the same node gets the same UUIDs.
  CmdResult again = run("agent discover --backend sim --profile a100-8x --node n1 --format json");
  EXPECT_EQ(json::parse(again.out)["gpus"][3]["uuid"], doc["gpus"][3]["uuid"]);
  EXPECT_EQ(run("agent discover --backend sim").rc, 2);
  CmdResult unknown = run("agent discover --backend sim --profile dgx-b300");
  EXPECT_EQ(unknown.rc, 1);
  EXPECT_NE(unknown.err.find("unknown node profile 'dgx-b300'"), std::string::npos) << unknown.err;
  std::ofstream(dir_ / "bad.hcl") << "gpus {\n  backend = \"cuda\"\n}\n";
  CmdResult bad = run("agent discover -config=" + (dir_ / "bad.hcl").string());
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("bad.hcl: gpus.backend: 'cuda' is not a backend"), std::string::npos)
      << bad.err;
  std::ofstream(dir_ / "mig.hcl") << "gpus {\n  backend = \"sim\"\n  profile = \"dgx-h100\"\n"
                                     "  mig_mode = \"sometimes\"\n}\n";
  CmdResult mig = run("agent discover -config=" + (dir_ / "mig.hcl").string());
  EXPECT_EQ(mig.rc, 2);
  EXPECT_NE(mig.err.find(
                "mig.hcl: gpus.mig_mode: 'sometimes' is not a MIG mode policy (fixed or managed)"),
            std::string::npos)
      << mig.err;
  std::ofstream(dir_ / "typo.hcl") << "gpu {\n  backend = \"sim\"\n}\n";
  CmdResult typo = run("agent discover -config=" + (dir_ / "typo.hcl").string());
  EXPECT_EQ(typo.rc, 2);
  EXPECT_NE(typo.err.find("unknown field 'gpu'"), std::string::npos) << typo.err;
}

// Issue #36: a node's credential never goes on a command line (every process of the machine
// reads /proc/<pid>/cmdline); a token file others can read is refused as ssh refuses such keys.
// Each refusal comes before the agent does anything else (exit 2).
TEST_F(AgentCliTest, ANodesCredentialIsNeverTakenFromTheCommandLine) {
  const std::string common =
      "agent run --node n1 --backend sim --profile t4-2x --address https://127.0.0.1:1 "
      "--work-dir " +
      (dir_ / "work").string();
  CmdResult in_argv = run(common + " --token tsr.abcdefghijklmnopqrstuvwx");
  EXPECT_EQ(in_argv.rc, 2);
  EXPECT_NE(in_argv.err.find("--token puts the node's credential on the command line, where "
                             "every process on this machine can read it"),
            std::string::npos)
      << in_argv.err;
  EXPECT_NE(in_argv.err.find("--token-file FILE, mode 0600) or in TESSERA_TOKEN"),
            std::string::npos);
  CmdResult join_in_argv = run(common + " --join-token tjn.abcdefghijklmnopqrstuvwx");
  EXPECT_EQ(join_in_argv.rc, 2);
  EXPECT_NE(join_in_argv.err.find("--join-token puts the node's credential on the command line"),
            std::string::npos)
      << join_in_argv.err;
  const fs::path file = dir_ / "token";
  std::ofstream(file) << "tsr.abcdefghijklmnopqrstuvwx\n";
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::others_read);
  CmdResult open_file = run(common + " --token-file " + file.string());
  EXPECT_EQ(open_file.rc, 2);
  EXPECT_NE(open_file.err.find(file.string() +
                               ": mode 0644 lets other users of this machine read the node's "
                               "credential; chmod 600"),
            std::string::npos)
      << open_file.err;
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(dir_ / "two") << "tsr.one tsr.two\n";
  fs::permissions(dir_ / "two", fs::perms::owner_read);
  CmdResult two = run(common + " --token-file " + (dir_ / "two").string());
  EXPECT_EQ(two.rc, 2);
  EXPECT_NE(two.err.find("expected one token (a line), found several words"), std::string::npos)
      << two.err;
  CmdResult missing = run(common + " --token-file " + (dir_ / "none").string());
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.err.find("No such file or directory"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tessera::integration
