// Runs the real `tessera` binary like a user would and checks its files, output and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "util.h"

namespace {

namespace fs = std::filesystem;

using tessera::integration::CmdResult;
using tessera::integration::slurp;

class CliSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CmdResult tessera(const std::string& args) {
    return tessera::integration::runTessera(args, dir_ / "stderr.txt");
  }

  std::string sample(const std::string& f) {
    return tessera::integration::sourceDir() + "/testdata/openb-sample/" + f;
  }

  fs::path dir_;
};

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST_F(CliSimTest, OpenbWritesPlacementsCurvesAndSummary) {
  const fs::path out = dir_ / "out";
  CmdResult r =
      tessera("sim openb --nodes " + sample("nodes.csv") + " --pods " + sample("pods.csv") +
              " --policy fgd,bestfit --seeds 1-2 --tune 1.3 --out " + out.string() + " -q");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");  // --quiet: no progress output.
  EXPECT_NE(r.out.find("fgd"), std::string::npos);
  EXPECT_NE(r.out.find("bestfit"), std::string::npos);
  for (const char* policy : {"fgd", "bestfit"}) {
    for (int seed : {1, 2}) {
      const std::string stem = std::string(policy) + "-" + std::to_string(seed) + ".csv";
      const std::string placements = slurp(out / ("placements-" + stem));
      ASSERT_FALSE(placements.empty()) << stem;
      EXPECT_EQ(placements.substr(0, placements.find('\n')),
                "seq,pod,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpus,status");
      EXPECT_GT(lines(placements), 408U);  // Tuned to 130%: more pods than the list.
      const std::string curve = slurp(out / ("curve-" + stem));
      EXPECT_EQ(curve.substr(0, curve.find('\n')),
                "arrived_pct,alloc_pct,unalloc_pct,frag_pct,frag_rate_pct");
      EXPECT_EQ(lines(curve), 132U);  // Header and bins 0..130.
    }
  }
  const std::string summary = slurp(out / "summary.csv");
  EXPECT_EQ(summary.substr(0, summary.find('\n')),
            "trace,policy,seed,unalloc_pct_at_100,unalloc_pct_at_130,seconds");
  EXPECT_EQ(lines(summary), 5U);
  EXPECT_NE(summary.find("\npods,fgd,1,"), std::string::npos);

  CmdResult check = tessera("sim check --nodes " + sample("nodes.csv") + " " + out.string() +
                            "/placements-fgd-1.csv " + out.string() + "/placements-bestfit-2.csv");
  EXPECT_EQ(check.rc, 0) << check.err;
  EXPECT_NE(check.out.find("OK: 2 files"), std::string::npos) << check.out;
}

TEST_F(CliSimTest, ExpectedResultsArePrintedBesideOurs) {
  std::ofstream(dir_ / "analysis_allo_discrete.csv")
      << "workload,sc_policy,tune,seed,total_gpus,99,100\n"
      << "openb_pod_list_pods,06-FGD,1.3,42,6212,95.0,95.25\n"
      << "openb_pod_list_pods,06-FGD,1.3,43,6212,95.0,94.75\n";
  CmdResult r = tessera("sim openb -n " + sample("nodes.csv") + " -p " + sample("pods.csv") +
                        " --policy fgd --seeds 3 -o " + (dir_ / "o").string() + " -q --expected " +
                        dir_.string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("authors@100"), std::string::npos);
  EXPECT_NE(r.out.find("5.00 ± 0.35"), std::string::npos) << r.out;  // 100 - mean(95.25, 94.75).
}

TEST_F(CliSimTest, BadInputIsOneClearLineAndExitCode2) {
  std::ofstream(dir_ / "pods.csv") << "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n";
  CmdResult r = tessera("sim openb -n " + sample("nodes.csv") + " -p " +
                        (dir_ / "pods.csv").string() + " -o " + (dir_ / "o").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "error: " + (dir_ / "pods.csv").string() + ":1: missing column 'gpu_milli'\n");
  EXPECT_FALSE(fs::exists(dir_ / "o" / "summary.csv"));

  std::ofstream(dir_ / "empty.csv") << "";
  r = tessera("sim openb -n " + (dir_ / "empty.csv").string() + " -p " + sample("pods.csv"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "error: " + (dir_ / "empty.csv").string() +
                       ":1: file is empty (expected a header line)\n");

  r = tessera("sim openb -n " + sample("nodes.csv") + " -p " + sample("pods.csv") +
              " --policy fgd,tetris");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown policy 'tetris'"), std::string::npos);

  r = tessera("sim openb -n " + sample("nodes.csv") + " -p " + sample("pods.csv") + " --seeds 9-3");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "error: --seeds '9-3': range '9-3' is empty\n");

  r = tessera("sim openb -n /nonexistent.csv -p " + sample("pods.csv"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "error: /nonexistent.csv: cannot open file\n");

  r = tessera("sim openb --pods " + sample("pods.csv"));  // --nodes missing.
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--nodes"), std::string::npos);
}

TEST_F(CliSimTest, HelpDescribesTheFlags) {
  CmdResult r = tessera("sim openb --help");
  EXPECT_EQ(r.rc, 0);
  for (const char* flag : {"--nodes", "--pods", "--policy", "--seeds", "--tune", "--out",
                           "--expected", "--quiet", "--jobs"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
