// Runs the real `tessera` binary like a user would and checks its files, output and exit codes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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
  EXPECT_EQ(
      summary.substr(0, summary.find('\n')),
      "trace,policy,seed,unalloc_pct_at_100,unalloc_pct_at_130,seconds,cpu_only_failed_at_100");
  EXPECT_EQ(lines(summary), 5U);
  EXPECT_NE(summary.find("\npods,fgd,1,"), std::string::npos);

  CmdResult check = tessera("sim check --nodes " + sample("nodes.csv") + " " + out.string() +
                            "/placements-fgd-1.csv " + out.string() + "/placements-bestfit-2.csv");
  EXPECT_EQ(check.rc, 0) << check.err;
  EXPECT_NE(check.out.find("OK: 2 files"), std::string::npos) << check.out;
}

// `sim openb --through-api` (issue #40): each run again through a real server's API. Given the
// trace's typical pods and no moves (what the experiment has), every pod lands on the node and
// GPUs the simulator gives it: the live path places as the simulator does. Learning the typical
// pods from the submissions (production), the result stays close; and a difference beyond the
// tolerance is exit 1.
TEST_F(CliSimTest, OpenbThroughTheApiPlacesEveryPodWhereTheSimulatorDoes) {
  const std::string base = "sim openb -q -j 1 --nodes " + sample("nodes.csv") + " --pods " +
                           sample("pods.csv") + "," + sample("pods-gpuspec.csv") +
                           " --policy fgd,tessera --seeds 1-2 --through-api";
  const fs::path same = dir_ / "same";
  CmdResult r = tessera(base + " --api-profile trace --api-max-moves 0 --out " + same.string());
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string parity = slurp(same / "parity.csv");
  EXPECT_EQ(parity.substr(0, parity.find('\n')),
            "trace,policy,seed,sim_unalloc_pct_at_100,live_unalloc_pct_at_100,diff_points,"
            "sim_failed,live_failed,same_node_pct,live_seconds");
  ASSERT_EQ(lines(parity), 9U) << parity;  // 2 traces x 2 policies x 2 seeds.
  std::istringstream rows(parity);
  std::string row;
  std::getline(rows, row);
  while (std::getline(rows, row)) {
    std::vector<std::string> f;
    std::istringstream cells(row);
    for (std::string c; std::getline(cells, c, ',');) {
      f.push_back(c);
    }
    ASSERT_EQ(f.size(), 10U) << row;
    EXPECT_EQ(f[3], f[4]) << row;  // Unallocated % at 100 %, both ways.
    EXPECT_EQ(f[6], f[7]) << row;  // Failed pods.
    EXPECT_EQ(f[8], "100.0") << row;
  }
  for (const char* stem : {"fgd-pods-1", "tessera-pods-gpuspec-2"}) {
    const std::string sim = slurp(same / (std::string("placements-") + stem + ".csv"));
    ASSERT_GT(lines(sim), 100U) << stem;
    EXPECT_EQ(slurp(same / (std::string("placements-api-") + stem + ".csv")), sim) << stem;
  }

  const fs::path learned = dir_ / "learned";
  r = tessera(base + " --parity-tolerance 2 --no-placements --out " + learned.string());
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("the typical pods learned from the submissions"), std::string::npos)
      << r.out;
  EXPECT_EQ(lines(slurp(learned / "parity.csv")), 9U);
  // Learning differs from being given the list (the first pods are placed knowing nothing):
  // with no tolerance some run is past it.
  r = tessera("sim openb -q --nodes " + sample("nodes.csv") + " --pods " + sample("pods.csv") +
              " --policy fgd --seeds 1 --through-api --parity-tolerance 0 --no-placements --out " +
              learned.string());
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("error: a run differs by more than 0 points"), std::string::npos) << r.err;
  r = tessera(base + " --mig dynamic --mig-map P100=A100-80GB --out " + learned.string());
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--through-api does not run MIG what-ifs"), std::string::npos) << r.err;
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

// --hold-cpu-for-gpus reaches the runs: the value is printed and recorded, CPU-only pods that
// find no node are counted in summary.csv's last column, and a bad value is one clear line.
TEST_F(CliSimTest, HeldCpuIsPrintedAndItsCostCounted) {
  // Four 2-GPU nodes; half the pods ask for no GPU.
  std::ofstream nodes(dir_ / "nodes.csv");
  nodes << "sn,cpu_milli,memory_mib,gpu,model\n";
  for (int i = 0; i < 4; ++i) {
    nodes << "n" << i << ",64000,262144,2,T4\n";
  }
  nodes.close();
  std::ofstream pods(dir_ / "pods.csv");
  pods << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  for (int i = 0; i < 10; ++i) {
    pods << "g" << i << ",4000,1024,1,1000\nc" << i << ",1000,1024,0,0\n";
  }
  pods.close();
  const std::string base = "sim openb -q -n " + (dir_ / "nodes.csv").string() + " -p " +
                           (dir_ / "pods.csv").string() + " --seeds 1-5 -j 1";
  CmdResult r = tessera(base + " --hold-cpu-for-gpus 100000 -o " + (dir_ / "held").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("CPU held per free GPU from CPU-only pods (milli-CPU): pods: 100000"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cpu-fail"), std::string::npos) << r.out;
  r = tessera(base + " -o " + (dir_ / "free").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  // summary.csv's last field: CPU-only pods failed by 100 %, summed over the runs.
  auto failed = [&](const fs::path& summary) {
    std::istringstream in(slurp(summary));
    std::string line;
    std::getline(in, line);
    int sum = 0;
    while (std::getline(in, line)) {
      sum += std::stoi(line.substr(line.rfind(',') + 1));
    }
    return sum;
  };
  // 100 cores per free GPU: a CPU-only pod fits only beside busy GPUs; without a hold, always.
  EXPECT_EQ(failed(dir_ / "free" / "summary.csv"), 0);
  EXPECT_GT(failed(dir_ / "held" / "summary.csv"), 0);
  r = tessera(base + " --hold-cpu-for-gpus lots -o " + (dir_ / "bad").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "error: --hold-cpu-for-gpus 'lots': expected none, typical or milli-CPU per GPU "
            "(like 8000)\n");
}

// A CSV's rows grouped by instant (its first column), each group sorted: rows of one instant
// may come in another order through the API (sim_api.h), nothing else may differ.
std::map<std::string, std::vector<std::string>> byInstant(const std::string& csv) {
  std::map<std::string, std::vector<std::string>> out;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // Header.
  while (std::getline(in, line)) {
    out[line.substr(0, line.find(','))].push_back(line);
  }
  for (auto& [t, rows] : out) {
    std::sort(rows.begin(), rows.end());
  }
  return out;
}

// The first difference between two CSVs grouped by instant, or "".
std::string firstDifference(const std::string& sim, const std::string& api) {
  const auto a = byInstant(sim);
  const auto b = byInstant(api);
  for (const auto& [t, rows] : a) {
    auto it = b.find(t);
    if (it == b.end()) {
      return "at " + t + " s the simulator has " + rows.front() + ", the API nothing";
    }
    for (size_t i = 0; i < std::max(rows.size(), it->second.size()); ++i) {
      const std::string x = i < rows.size() ? rows[i] : "(nothing)";
      const std::string y = i < it->second.size() ? it->second[i] : "(nothing)";
      if (x != y) {
        return "at " + t + " s:\n  simulator: " + x + "\n  API:       " + y;
      }
    }
  }
  for (const auto& [t, rows] : b) {
    if (!a.contains(t)) {
      return "at " + t + " s the API has " + rows.front() + ", the simulator nothing";
    }
  }
  return "";
}

// Issue #19, "Sim/live parity": every scenario with tenants gives the same events and the same
// queue numbers through a real server's API as through the simulator.
TEST_F(CliSimTest, EveryTenantScenarioRunsTheSameThroughTheApiAsInTheSimulator) {
  const fs::path examples = fs::path(tessera::integration::sourceDir()) / "examples/scenarios";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(examples)) {
    if (e.path().filename().string().rfind("tenants-", 0) == 0) {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 8U);
  std::map<std::string, int> kinds;  // Events of every kind over all scenarios.
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    const fs::path sim = dir_ / (file.stem().string() + "-sim");
    const fs::path api = dir_ / (file.stem().string() + "-api");
    CmdResult r = tessera("sim scenario " + file.string() + " --out " + sim.string() + " -q");
    ASSERT_EQ(r.rc, 0) << r.err;
    r = tessera("sim scenario " + file.string() + " --through-api --out " + api.string() + " -q");
    ASSERT_EQ(r.rc, 0) << r.err;
    for (const char* csv : {"events.csv", "tenants.csv"}) {
      const std::string a = slurp(sim / csv);
      const std::string b = slurp(api / csv);
      ASSERT_GT(lines(a), 1U) << csv;
      EXPECT_EQ(firstDifference(a, b), "") << csv;
      EXPECT_EQ(lines(a), lines(b)) << csv;
    }
    for (const auto& [t, rows] : byInstant(slurp(sim / "events.csv"))) {
      for (const std::string& row : rows) {
        const size_t c = row.find(',');
        ++kinds[row.substr(c + 1, row.find(',', c + 1) - c - 1)];
      }
    }
    // The server really ran it: its audit log has the submissions.
    EXPECT_NE(slurp(api / "server" / "audit.log").find("/workloads/"), std::string::npos);
  }
  for (const char* kind : {"submit", "start", "finish", "evict"}) {
    EXPECT_GT(kinds[kind], 0) << kind;
  }
}

TEST_F(CliSimTest, ThroughTheApiNeedsTenants) {
  const std::string file = tessera::integration::sourceDir() + "/examples/scenarios/reclaim.json";
  CmdResult r =
      tessera("sim scenario " + file + " --through-api --out " + (dir_ / "out").string() + " -q");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("tenants"), std::string::npos) << r.err;
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
