#include "sim/openb_trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tessera::sim {
namespace {

std::string sourceDir() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");
  return d != nullptr ? d : ".";
}

class OpenbTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-trace-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Reads `pods_text` against a two-node cluster (T4 and V100M32) and returns the error.
  std::string podError(const std::string& pods_text) {
    auto nodes = readOpenbNodes(write("n.csv",
                                      "sn,cpu_milli,memory_mib,gpu,model\na,8000,16384,2,T4\n"
                                      "b,8000,16384,1,V100M32\n"),
                                cat_);
    EXPECT_TRUE(nodes.isOk());
    const std::string path = write("p.csv", pods_text);
    auto pods = readOpenbPods(path, cat_, nodes.value());
    EXPECT_FALSE(pods.isOk());
    std::string msg = pods.status().message();
    // Messages start with the path; tests compare what follows it.
    return msg.compare(0, path.size(), path) == 0 ? msg.substr(path.size()) : msg;
  }

  std::filesystem::path dir_;
  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
};

TEST_F(OpenbTraceTest, ReadsTheSample) {
  const std::string base = sourceDir() + "/testdata/openb-sample/";
  auto nodes = readOpenbNodes(base + "nodes.csv", cat_);
  ASSERT_TRUE(nodes.isOk()) << nodes.status().message();
  EXPECT_EQ(nodes->size(), 64U);
  EXPECT_EQ(nodes->front().name, "openb-node-0000");
  EXPECT_EQ(nodes->front().gpus.size(), 2U);
  EXPECT_EQ(cat_.model(nodes->front().gpus[0].model).name, "P100");
  auto pods = readOpenbPods(base + "pods.csv", cat_, nodes.value());
  ASSERT_TRUE(pods.isOk()) << pods.status().message();
  EXPECT_EQ(pods->size(), 408U);
  auto spec = readOpenbPods(base + "pods-gpuspec.csv", cat_, nodes.value());
  ASSERT_TRUE(spec.isOk()) << spec.status().message();
  size_t constrained = 0;
  for (const OpenbPod& p : spec.value()) {
    constrained += p.models.empty() ? 0 : 1;
  }
  EXPECT_GT(constrained, 10U);
}

TEST_F(OpenbTraceTest, PodErrorsNameFileAndLine) {
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  EXPECT_EQ(podError("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n"),
            ":1: missing column 'gpu_milli'");
  EXPECT_EQ(podError(header + "p,1000,10,1,500,\nq,-5,10,1,500,\n"),
            ":3: column 'cpu_milli' value -5 is negative");
  EXPECT_EQ(podError(header + "p,1000,lots,1,500,\n"),
            ":2: column 'memory_mib' value 'lots' is not an integer");
  EXPECT_EQ(podError(header + "p,1000,10,1,1500,\n"),
            ":2: column 'gpu_milli' value 1500 is above the maximum 1000");
  EXPECT_EQ(podError(header + "p,1000,10,1,500,A100\n"),
            ":2: pod 'p' names GPU model 'A100' that no node has");
  EXPECT_EQ(podError(header + "p,1000,10,1,500,H100\n"),
            ":2: pod 'p' names GPU model 'H100' that no node has");
  EXPECT_EQ(podError(header + "p,1000,10,2,500,\n"),
            ":2: pod 'p' asks for 2 GPUs of 500 milli; a GPU share below 1000 needs num_gpu 1");
  EXPECT_EQ(podError(header + "p,1000,10,1,0,\n"), ":2: pod 'p' asks for 1 GPUs with gpu_milli 0");
  EXPECT_EQ(podError(header), ":2: no pods (only a header)");
  EXPECT_EQ(podError(""), ":1: file is empty (expected a header line)");
  EXPECT_EQ(podError(header + "p,1000,10\n"), ":2: expected 6 fields as in the header, got 3");
}

TEST_F(OpenbTraceTest, ModelListsAndCpuOnlyPods) {
  auto nodes = readOpenbNodes(write("n.csv",
                                    "sn,cpu_milli,memory_mib,gpu,model\n"
                                    "a,8000,16384,2,T4\nb,8000,16384,1,V100M32\n"),
                              cat_);
  ASSERT_TRUE(nodes.isOk());
  auto pods = readOpenbPods(write("p.csv",
                                  "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                                  "p,1000,10,1,500,T4|V100M32\n"
                                  "q,1000,10,0,300,T4\n"),
                            cat_, nodes.value());
  ASSERT_TRUE(pods.isOk()) << pods.status().message();
  EXPECT_EQ(pods->at(0).models.size(), 2U);
  // A CPU-only pod takes no GPU share and has no model constraint, whatever the columns say.
  EXPECT_EQ(pods->at(1).gpu_milli, 0);
  EXPECT_TRUE(pods->at(1).models.empty());
  EXPECT_TRUE(pods->at(1).toRequest().isCpuOnly());
}

TEST_F(OpenbTraceTest, NodeErrors) {
  auto err = [&](const std::string& text) {
    auto r = readOpenbNodes(write("n.csv", text), cat_);
    EXPECT_FALSE(r.isOk());
    std::string m = r.status().message();
    return m.substr(m.find("n.csv") + 5);
  };
  const std::string h = "sn,cpu_milli,memory_mib,gpu,model\n";
  EXPECT_EQ(err("sn,cpu_milli,memory_mib,gpu\n"), ":1: missing column 'model'");
  EXPECT_EQ(err(h + "a,8000,16384,2,\n"), ":2: node 'a' has 2 GPUs but no model");
  EXPECT_EQ(err(h + "a,8000,16384,2,T4\na,1,1,0,\n"), ":3: node 'a' appears twice");
  EXPECT_EQ(err(h + "a,8000,16384,65,T4\n"), ":2: column 'gpu' value 65 is above the maximum 64");
  EXPECT_EQ(err(h + "a,-1,16384,1,T4\n"), ":2: column 'cpu_milli' value -1 is negative");
  EXPECT_EQ(err(h), ":2: no nodes (only a header)");
  // Unknown model names are accepted as plain models.
  auto ok = readOpenbNodes(write("n.csv", h + "a,8000,16384,1,L40S\n"), cat_);
  ASSERT_TRUE(ok.isOk());
  EXPECT_EQ(cat_.model(ok->at(0).gpus[0].model).name, "L40S");
}

}  // namespace
}  // namespace tessera::sim
