#include "cli/sim_command.h"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/progress.h"
#include "cli/seeds.h"
#include "cli/sim_api.h"
#include "core/strings.h"
#include "sched/policy.h"
#include "sim/html_report.h"
#include "sim/lower_bound.h"
#include "sim/openb_experiment.h"
#include "sim/openb_variant.h"
#include "sim/philly.h"
#include "sim/placement_check.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/scenario_run.h"

namespace tessera::cli {
namespace {

struct OpenbOptions {
  std::string nodes;
  std::vector<std::string> pods;
  std::string policies = "fgd,tessera";
  std::string seeds = "42";
  double tune = 1.3;
  std::string out = "sim-out";
  std::string expected;
  bool quiet = false;
  bool no_placements = false;
  unsigned jobs = 0;
  // MIG variants (sim/openb_mig.h).
  std::string mig = "none";
  std::string mig_map;
  double mig_fixed_share = 0.5;
  std::string mig_fixed_profiles = "1g.10gb,2g.20gb,3g.40gb";
  // CPU held per free GPU from CPU-only pods: "none", "typical" or milli-CPU.
  std::string hold_cpu = "none";
  // Each run again through a real server's API (runOpenbThroughApi); parity.csv compares them.
  bool through_api = false;
  double parity_tolerance = 0.5;
  std::string api_profile = "learned";  // Or "trace": the server is given the trace's.
  int api_max_moves = 8;                // The scheduler's max_moves_per_pass there.
};

// --hold-cpu-for-gpus: none (0), typical (the trace's typical GPU pod's CPU per GPU) or a
// number of milli-CPU per GPU.
core::Result<int64_t> parseHoldCpu(const std::string& v, const sim::OpenbExperiment& exp) {
  if (v == "none" || v == "0") {
    return int64_t{0};
  }
  if (v == "typical") {
    return exp.typicalCpuPerGpu();
  }
  int64_t milli = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), milli);
  if (ec != std::errc() || end != v.data() + v.size() || milli < 0) {
    return core::invalidArgument("--hold-cpu-for-gpus '" + v +
                                 "': expected none, typical or milli-CPU per GPU (like 8000)");
  }
  return milli;
}

constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

int fail(int code, const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return code;
}

struct OpenbJob {
  size_t trace;
  std::string policy;
  uint64_t seed;
};

// --through-api: every run again through a real server in this process (one at a time: each
// server has threads of its own), compared with the simulator's in parity.csv and a table.
// Exit 1 when a run's unallocated GPU % at 100 % arrived differs by more than the tolerance.
int runOpenbParity(const OpenbOptions& opt,
                   const std::vector<std::unique_ptr<sim::OpenbExperiment>>& experiments,
                   const std::vector<std::string>& pod_files, const std::vector<OpenbJob>& jobs,
                   const std::vector<sim::SummaryRow>& rows,
                   const std::vector<std::vector<sim::PodOutcome>>& sim_outcomes) {
  std::string csv =
      "trace,policy,seed,sim_unalloc_pct_at_100,live_unalloc_pct_at_100,diff_points,"
      "sim_failed,live_failed,same_node_pct,live_seconds\n";
  std::string table =
      fmt::format("{:<14} {:<8} {:>6} {:>9} {:>9} {:>7} {:>10} {:>9}\n", "trace", "policy", "seed",
                  "sim %", "live %", "diff", "same node", "seconds");
  bool within = true;
  constexpr size_t kTicksPerRun = 1000;
  Progress progress(fmt::format("{} runs through the API", jobs.size()), jobs.size() * kTicksPerRun,
                    !opt.quiet);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const OpenbJob& job = jobs[j];
    size_t reported = 0;
    auto live = runOpenbThroughApi(*experiments[job.trace], job.policy, job.seed, opt.tune,
                                   fmt::format("{}/server-{}-{}-{}", opt.out, job.policy,
                                               sim::traceNameOf(pod_files[job.trace]), job.seed),
                                   opt.api_profile == "trace", opt.api_max_moves,
                                   [&](size_t done, size_t total) {
                                     const size_t ticks = done * kTicksPerRun / total;
                                     progress.add(ticks - reported);
                                     reported = ticks;
                                   });
    if (!live.isOk()) {
      progress.finish();
      return fail(kExitFailure, live.status().message());
    }
    if (!opt.no_placements) {
      const std::string trace = sim::traceNameOf(pod_files[job.trace]);
      const std::string suffix = experiments.size() > 1 ? trace + "-" : "";
      if (core::Status st = sim::writePlacements(
              fmt::format("{}/placements-api-{}-{}{}.csv", opt.out, job.policy, suffix, job.seed),
              *live, experiments[job.trace]->nodes());
          !st.isOk()) {
        progress.finish();
        return fail(kExitFailure, st.message());
      }
    }
    const std::vector<sim::PodOutcome>& sim = sim_outcomes[j];
    size_t same = 0;
    int64_t sim_failed = 0;
    for (size_t i = 0; i < sim.size() && i < live->outcomes.size(); ++i) {
      same += sim[i].node == live->outcomes[i].node ? 1 : 0;
      sim_failed += sim[i].node < 0 ? 1 : 0;
    }
    const double live_pct = live->unallocAt(100);
    const double diff = live_pct - rows[j].unalloc_100;
    within = within && std::abs(diff) <= opt.parity_tolerance;
    const double same_pct =
        sim.empty() ? 0 : 100.0 * static_cast<double>(same) / static_cast<double>(sim.size());
    const std::string trace = sim::traceNameOf(pod_files[job.trace]);
    csv += fmt::format("{},{},{},{:.2f},{:.2f},{:.2f},{},{},{:.1f},{:.1f}\n", trace, job.policy,
                       job.seed, rows[j].unalloc_100, live_pct, diff, sim_failed, live->failed,
                       same_pct, live->seconds);
    table += fmt::format("{:<14} {:<8} {:>6} {:>9.2f} {:>9.2f} {:>+7.2f} {:>9.1f}% {:>9.1f}\n",
                         trace, job.policy, job.seed, rows[j].unalloc_100, live_pct, diff, same_pct,
                         live->seconds);
  }
  progress.finish();
  if (core::Status st = sim::writeFileAtomically(opt.out + "/parity.csv", csv); !st.isOk()) {
    return fail(kExitFailure, st.message());
  }
  std::cout << "Through the API (a real server, simulated nodes, "
            << (opt.api_profile == "trace" ? "given the trace's typical pods"
                                           : "the typical pods learned from the submissions")
            << ") against the simulator: unallocated GPU % at arrived = 100%\n"
            << table << "Wrote " << opt.out << "/parity.csv.\n";
  if (!within) {
    std::cerr << fmt::format("error: a run differs by more than {} points\n", opt.parity_tolerance);
    return kExitFailure;
  }
  return 0;
}

int runOpenb(const OpenbOptions& opt) {
  std::vector<std::string> policies = core::splitList(opt.policies);
  if (policies.empty()) {
    return fail(kExitBadInput, "--policy is empty");
  }
  for (const std::string& p : policies) {
    bool known = false;
    for (const std::string& n : sched::policyNames()) {
      known |= n == p;
    }
    if (!known) {
      std::string names;
      for (const std::string& n : sched::policyNames()) {
        names += (names.empty() ? "" : ", ") + n;
      }
      return fail(kExitBadInput, "unknown policy '" + p + "' (known: " + names + ")");
    }
  }
  auto seeds = parseSeeds(opt.seeds);
  if (!seeds.isOk()) {
    return fail(kExitBadInput, seeds.status().message());
  }
  if (!(opt.tune > 0) || opt.tune > 10) {
    return fail(kExitBadInput, fmt::format("--tune {} is outside (0, 10]", opt.tune));
  }
  std::vector<std::string> pod_files;
  for (const std::string& p : opt.pods) {
    for (const std::string& item : core::splitList(p)) {
      pod_files.push_back(item);
    }
  }
  if (pod_files.empty()) {
    return fail(kExitBadInput, "--pods names no file");
  }
  sim::ExpectedResults expected;
  sim::ExpectedCurves expected_curves;
  if (!opt.expected.empty()) {
    auto e = sim::readExpected(opt.expected);
    if (!e.isOk()) {
      return fail(kExitBadInput, e.status().message());
    }
    expected = std::move(e).value();
    auto curves = sim::readExpectedCurves(opt.expected);
    if (!curves.isOk()) {
      return fail(kExitBadInput, curves.status().message());
    }
    expected_curves = std::move(curves).value();
  }
  // Load every trace first, so a bad file fails before any work is done.
  std::vector<std::unique_ptr<sim::OpenbExperiment>> experiments;
  sim::MigOptions mig;
  {
    auto layout = sim::parseMigLayout(opt.mig);
    auto map = sim::parseMigMap(opt.mig_map);
    if (!layout.isOk() || !map.isOk()) {
      return fail(kExitBadInput, (layout.isOk() ? map.status() : layout.status()).message());
    }
    mig = {*layout, *map, opt.mig_fixed_share, core::splitList(opt.mig_fixed_profiles)};
  }
  std::vector<sim::MigSummaryRow> mig_rows;  // By job, when --mig is not none.
  for (const std::string& pods : pod_files) {
    auto e = sim::OpenbExperiment::load(opt.nodes, pods, mig);
    if (!e.isOk()) {
      return fail(kExitBadInput, e.status().message());
    }
    auto hold = parseHoldCpu(opt.hold_cpu, **e);
    if (!hold.isOk()) {
      return fail(kExitBadInput, hold.status().message());
    }
    (*e)->setCpuPerFreeGpu(*hold);
    experiments.push_back(std::move(e).value());
  }
  std::error_code ec;
  std::filesystem::create_directories(opt.out, ec);
  if (ec) {
    return fail(kExitFailure, opt.out + ": cannot create directory: " + ec.message());
  }

  std::vector<OpenbJob> jobs;
  for (size_t t = 0; t < experiments.size(); ++t) {
    for (const std::string& p : policies) {
      for (uint64_t s : seeds.value()) {
        jobs.push_back({t, p, s});
      }
    }
  }
  std::vector<sim::SummaryRow> rows(jobs.size());
  std::vector<sim::OpenbReportRun> curves(jobs.size());  // For report.html.
  std::vector<std::string> errors(jobs.size());
  std::vector<std::vector<sim::PodOutcome>> sim_outcomes(opt.through_api ? jobs.size() : 0);
  if (opt.through_api && mig.layout != sim::MigLayout::kNone) {
    return fail(kExitBadInput, "--through-api does not run MIG what-ifs (--mig)");
  }
  mig_rows.resize(mig.layout == sim::MigLayout::kNone ? 0 : jobs.size());
  constexpr size_t kTicksPerRun = 1000;
  Progress progress(fmt::format("simulating {} runs", jobs.size()), jobs.size() * kTicksPerRun,
                    !opt.quiet);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j = next++; j < jobs.size(); j = next++) {
      const OpenbJob& job = jobs[j];
      const sim::OpenbExperiment& exp = *experiments[job.trace];
      size_t reported = 0;
      auto on_progress = [&](size_t done, size_t total) {
        const size_t ticks = done * kTicksPerRun / total;
        progress.add(ticks - reported);
        reported = ticks;
      };
      auto run = exp.run(job.policy, job.seed, opt.tune, on_progress);
      if (!run.isOk()) {
        errors[j] = run.status().message();
        continue;
      }
      const std::string trace = sim::traceNameOf(pod_files[job.trace]);
      const std::string suffix = experiments.size() > 1 ? trace + "-" : "";
      const std::string stem = fmt::format("{}-{}{}", job.policy, suffix, job.seed);
      core::Status st = sim::writeCurve(opt.out + "/curve-" + stem + ".csv", *run);
      if (st.isOk() && !opt.no_placements) {
        st = sim::writePlacements(opt.out + "/placements-" + stem + ".csv", *run, exp.nodes());
      }
      if (!st.isOk()) {
        errors[j] = st.message();
        continue;
      }
      rows[j] = {trace,
                 job.policy,
                 job.seed,
                 run->unallocAt(100),
                 run->unallocAt(130),
                 run->seconds,
                 run->cpu_only_failed_100};
      if (!mig_rows.empty()) {
        mig_rows[j] = sim::migSummaryRow(trace, *run);
      }
      if (!sim_outcomes.empty()) {
        sim_outcomes[j] = std::move(run->outcomes);
      }
      curves[j] = {trace, job.policy, job.seed, std::move(run->curve)};
    }
  };
  unsigned threads = opt.jobs != 0 ? opt.jobs : std::max(1U, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(jobs.size()));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) {
    pool.emplace_back(worker);
  }
  worker();
  for (std::thread& t : pool) {
    t.join();
  }
  progress.finish();
  for (const std::string& e : errors) {
    if (!e.empty()) {
      return fail(kExitFailure, e);
    }
  }
  core::Status st = sim::writeSummary(opt.out + "/summary.csv", rows);
  if (!st.isOk()) {
    return fail(kExitFailure, st.message());
  }
  sim::OpenbReport report;
  std::string pods;
  for (const std::string& f : pod_files) {
    pods += (pods.empty() ? "" : ", ") + f;
  }
  report.parameters = {{"nodes", opt.nodes},
                       {"pods", pods},
                       {"policies", opt.policies},
                       {"seeds", opt.seeds},
                       {"tune", fmt::format("{}", opt.tune)},
                       {"authors' results", opt.expected.empty() ? "(none)" : opt.expected}};
  if (opt.hold_cpu != "none") {
    std::string held;
    for (size_t t = 0; t < experiments.size(); ++t) {
      held += fmt::format("{}{}: {}", held.empty() ? "" : ", ", sim::traceNameOf(pod_files[t]),
                          experiments[t]->cpuPerFreeGpu());
    }
    report.parameters.push_back({"CPU held per free GPU (milli-CPU)", held});
    std::cout << "CPU held per free GPU from CPU-only pods (milli-CPU): " << held << "\n";
  }
  if (mig.layout != sim::MigLayout::kNone) {
    report.parameters.push_back(
        {"MIG", fmt::format("{} (map {}; fixed share {}, profiles {})", opt.mig, opt.mig_map,
                            opt.mig_fixed_share, opt.mig_fixed_profiles)});
  }
  report.runs = std::move(curves);
  report.rows = rows;
  if (!opt.expected.empty()) {
    report.expected = &expected;
    report.expected_curves = &expected_curves;
  }
  st = sim::writeFileAtomically(opt.out + "/report.html", sim::openbReportHtml(report));
  if (!st.isOk()) {
    return fail(kExitFailure, st.message());
  }
  std::cout << "Unallocated GPU % at arrived = 100% and 130% of GPU capacity (mean ± sd over "
            << seeds->size() << " seed" << (seeds->size() == 1 ? "" : "s") << ")\n";
  std::cout << sim::formatSummaryTable(rows, opt.expected.empty() ? nullptr : &expected);
  if (!mig_rows.empty()) {
    st = sim::writeMigSummary(opt.out + "/mig.csv", mig_rows);
    if (!st.isOk()) {
      return fail(kExitFailure, st.message());
    }
    std::cout << sim::formatMigSummary(mig_rows, mig.layout) << "Wrote " << opt.out
              << "/mig.csv.\n";
  }
  std::cout << "Wrote " << opt.out << "/summary.csv, report.html and per-run curve"
            << (opt.no_placements ? "" : " and placement") << " files.\n";
  if (opt.through_api) {
    return runOpenbParity(opt, experiments, pod_files, jobs, rows, sim_outcomes);
  }
  return 0;
}

int runCheck(const std::string& nodes, const std::vector<std::string>& files) {
  size_t placed = 0;
  size_t failed = 0;
  for (const std::string& f : files) {
    auto stats = sim::checkPlacements(nodes, f);
    if (!stats.isOk()) {
      return fail(stats.status().code() == core::StatusCode::kFailedPrecondition ? kExitFailure
                                                                                 : kExitBadInput,
                  stats.status().message());
    }
    placed += stats->placed;
    failed += stats->failed;
  }
  std::cout << "OK: " << files.size() << " file" << (files.size() == 1 ? "" : "s") << ", " << placed
            << " placed pods within node CPU, memory and per-GPU capacity (" << failed
            << " failed pods)\n";
  return 0;
}

int simulateAndReport(const sim::Scenario& scenario, const std::string& label,
                      const std::string& out, bool quiet, const std::string& title,
                      const std::vector<sim::ReportParameter>& parameters);

core::Status writeScenarioReport(const sim::ScenarioResult& result, const std::string& out,
                                 const std::string& title,
                                 const std::vector<sim::ReportParameter>& parameters) {
  return sim::writeFileAtomically(out + "/report.html",
                                  sim::scenarioReportHtml(result, title, parameters));
}

int runScenarioCommand(const std::string& file, const std::string& out, bool quiet,
                       bool through_api) {
  auto scenario = sim::readScenario(file);
  if (!scenario.isOk()) {
    return fail(kExitBadInput, scenario.status().message());
  }
  if (!through_api) {
    return simulateAndReport(*scenario, file, out, quiet, "Tessera simulation report: sim scenario",
                             {{"scenario", file}});
  }
  if (!quiet) {
    std::cerr << "running " << file << " through a server's API (its files in " << out
              << "/server)\n";
  }
  auto result = runScenarioThroughApi(*scenario, out + "/server");
  if (!result.isOk()) {
    return fail(
        result.status().code() == core::StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure,
        result.status().message());
  }
  if (core::Status st = sim::writeScenarioOutputs(*result, out); !st.isOk()) {
    return fail(kExitFailure, st.message());
  }
  if (core::Status st =
          writeScenarioReport(*result, out, "Tessera simulation report: sim scenario --through-api",
                              {{"scenario", file}, {"run", "through a server's API"}});
      !st.isOk()) {
    return fail(kExitFailure, st.message());
  }
  std::cout << fmt::format("makespan {:.0f} s, {} evictions, {} passes, {} workloads never ran\n",
                           result->makespan_s, result->evictions, result->passes,
                           result->failed_workloads);
  std::cout << "Wrote " << out << "/tenants.csv, events.csv, summary.json and report.html.\n";
  return 0;
}

struct PhillyArgs {
  std::string trace;
  std::string out = "sim-out";
  sim::PhillyOptions options;
  bool fifo = false;
  bool quiet = false;
  int64_t checkpoint_s = 0;
  int64_t min_runtime_s = 300;
  int64_t max_unsaved_s = 3600;
  int64_t patience_s = 0;
  std::string reclaim_to = "fair-share";
};

int runPhillyCommand(PhillyArgs args) {
  auto jobs = sim::readPhillyTrace(args.trace);
  if (!jobs.isOk()) {
    return fail(kExitBadInput, jobs.status().message());
  }
  args.options.fair_share = !args.fifo;
  if (args.checkpoint_s < 0 || args.min_runtime_s < 0 || args.max_unsaved_s < 0 ||
      args.patience_s < 0) {
    return fail(kExitBadInput,
                "--checkpoint-every, --min-runtime, --max-unsaved and --reclaim-patience must "
                "not be negative");
  }
  args.options.max_unsaved_gpu_time = std::chrono::seconds(args.max_unsaved_s);
  args.options.reclaim_patience = std::chrono::seconds(args.patience_s);
  args.options.checkpoint_every = std::chrono::seconds(args.checkpoint_s);
  args.options.min_runtime = std::chrono::seconds(args.min_runtime_s);
  args.options.reclaim_to =
      args.reclaim_to == "quota" ? sched::ReclaimTo::kQuota : sched::ReclaimTo::kFairShare;
  auto scenario = sim::phillyScenario(*jobs, args.options);
  if (!scenario.isOk()) {
    return fail(kExitBadInput, scenario.status().message());
  }
  std::vector<sim::ReportParameter> parameters = {
      {"trace", args.trace},
      {"cluster", args.options.cluster},
      {"scheduling", args.fifo ? "FIFO (--fifo)" : "fair share"},
      {"quotas",
       args.options.quota_file.empty() ? "proportional to GPU-time" : args.options.quota_file},
      {"jobs", args.options.max_jobs == 0 ? "all" : std::to_string(args.options.max_jobs)},
      {"checkpoint every", fmt::format("{} s", args.checkpoint_s)},
      {"min runtime", fmt::format("{} s", args.min_runtime_s)},
      {"max unsaved", fmt::format("{} GPU-s", args.max_unsaved_s)},
      {"reclaim to", args.reclaim_to},
      {"reclaim patience", fmt::format("{} s", args.patience_s)}};
  return simulateAndReport(*scenario, args.trace, args.out, args.quiet,
                           "Tessera simulation report: sim philly", parameters);
}

int simulateAndReport(const sim::Scenario& scenario, const std::string& label,
                      const std::string& out, bool quiet, const std::string& title,
                      const std::vector<sim::ReportParameter>& parameters) {
  Progress progress("simulating " + label, scenario.workloads.size(), !quiet);
  size_t reported = 0;
  auto result = sim::runScenario(scenario, [&](size_t done, size_t /*total*/) {
    progress.add(done - reported);
    reported = done;
  });
  progress.finish();
  if (!result.isOk()) {
    return fail(kExitFailure, result.status().message());
  }
  core::Status st = sim::writeScenarioOutputs(*result, out);
  if (st.isOk()) {
    st = writeScenarioReport(*result, out, title, parameters);
  }
  if (!st.isOk()) {
    return fail(kExitFailure, st.message());
  }
  std::cout << fmt::format("{:<16} {:>6} {:>12} {:>12} {:>12} {:>8} {:>14}\n", "queue", "jobs",
                           "mean JCT s", "p95 JCT s", "GPU-hours", "evicted", "max to quota s");
  for (const sim::QueueSummary& q : result->queues) {
    std::cout << fmt::format("{:<16} {:>6} {:>12.0f} {:>12.0f} {:>12.1f} {:>8} {:>14.0f}\n", q.name,
                             q.jobs_completed, q.mean_jct_s, q.p95_jct_s, q.gpu_seconds / 3600,
                             q.tasks_evicted, q.max_time_to_quota_s);
  }
  std::cout << fmt::format(
      "makespan {:.0f} s, GPU utilisation {:.1f}%, mean Jain index {:.3f}, {} evictions, {} "
      "passes, {} workloads never ran\n",
      result->makespan_s, 100 * result->utilisation, result->mean_jain, result->evictions,
      result->passes, result->failed_workloads);
  std::cout << fmt::format(
      "useful work {:.0f} GPU-hours, lost to evictions {:.0f} GPU-hours ({:.1f}%), goodput "
      "{:.1f}%\n",
      result->useful_gpu_seconds / 3600, result->lost_gpu_seconds / 3600,
      result->useful_gpu_seconds > 0 ? 100 * result->lost_gpu_seconds / result->useful_gpu_seconds
                                     : 0.0,
      100 * result->goodput);
  std::cout << "Wrote " << out << "/tenants.csv, events.csv, summary.json and report.html.\n";
  return 0;
}

}  // namespace

void addSimCommand(CLI::App& app, int* rc) {
  CLI::App* sim = app.add_subcommand("sim", "Trace-driven simulation of the scheduler");
  sim->require_subcommand(1);
  auto opt = std::make_shared<OpenbOptions>();
  CLI::App* openb = sim->add_subcommand(
      "openb",
      "Replay the Alibaba GPU-sharing trace (openb) as in the FGD paper: shuffle, tune to a "
      "multiple of GPU capacity, place each pod once, and report unallocated GPUs");
  openb
      ->add_option("--nodes,-n,--node-list", opt->nodes,
                   "Node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->required();
  openb
      ->add_option("--pods,-p,--pod-list", opt->pods,
                   "Pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]); "
                   "several may be given, comma-separated or repeated")
      ->required();
  openb
      ->add_option("--policy,--policies,-P", opt->policies,
                   "Placement policies, comma-separated: random, dotprod, bestfit, gpupacking, "
                   "gpuclustering, fgd, tessera")
      ->capture_default_str();
  openb
      ->add_option("--seeds,--seed,-s", opt->seeds,
                   "Seeds: one (42), a list (1,5,9) or a range (42-51)")
      ->capture_default_str();
  openb->add_option("--tune,-t", opt->tune, "Tune the pod list to this multiple of GPU capacity")
      ->capture_default_str();
  openb->add_option("--out,-o", opt->out, "Output directory (CSV and JSON files, report.html)")
      ->capture_default_str();
  openb->add_option("--expected,-e", opt->expected,
                    "Directory with the FGD authors' analysis_allo_discrete.csv, to print their "
                    "numbers beside ours and draw their curves in report.html");
  openb->add_option("--jobs,-j", opt->jobs, "Runs in parallel (default: one per CPU core)");
  openb->add_flag("--quiet,-q", opt->quiet, "No progress bar");
  openb->add_flag("--no-placements", opt->no_placements,
                  "Do not write placements-*.csv (they are large for many runs)");
  openb
      ->add_option("--mig", opt->mig,
                   "MIG layout for fractional pods: none (shares only), fixed (a share of the "
                   "MIG-capable nodes pre-partitioned) or dynamic (partitioned on demand)")
      ->capture_default_str();
  openb->add_option("--mig-map", opt->mig_map,
                    "What-if: node GPU models replaced by others, FROM=TO comma-separated (the "
                    "openb trace has no MIG-capable model), e.g. G3=A100-80GB");
  openb
      ->add_option("--hold-cpu-for-gpus", opt->hold_cpu,
                   "CPU each node keeps per free GPU out of reach of CPU-only pods: none (FGD's "
                   "experiment), typical (what the trace's typical GPU pod asks per GPU) or "
                   "milli-CPU per GPU. A CPU-only pod that finds no node fails")
      ->capture_default_str();
  openb
      ->add_option("--mig-fixed-share", opt->mig_fixed_share,
                   "--mig fixed: share of the MIG-capable nodes pre-partitioned")
      ->capture_default_str();
  openb
      ->add_option("--mig-fixed-profiles", opt->mig_fixed_profiles,
                   "--mig fixed: the profile of each pre-partitioned node's homogeneous layout, "
                   "cycling over those nodes")
      ->capture_default_str();
  openb->add_flag("--through-api", opt->through_api,
                  "Run each run again through a real server in this process, over its HTTPS "
                  "API, with the trace's nodes simulated and the typical pods learned from the "
                  "submissions; parity.csv compares the two (issue #40). Exit 1 when one differs "
                  "by more than --parity-tolerance points");
  openb
      ->add_option("--parity-tolerance", opt->parity_tolerance,
                   "--through-api: the largest difference allowed, in points of unallocated "
                   "GPU % at 100 % arrived")
      ->capture_default_str();
  openb
      ->add_option("--api-profile", opt->api_profile,
                   "--through-api: the server's typical pods: learned (from the submissions, as "
                   "in production) or trace (the whole pod list's, as the simulator's)")
      ->check(CLI::IsMember({"learned", "trace"}))
      ->capture_default_str();
  openb
      ->add_option("--api-max-moves", opt->api_max_moves,
                   "--through-api: running tasks the scheduler may move per pass to make room "
                   "for a pending pod (the server's max_moves_per_pass; the experiment has no "
                   "moves: 0 with --api-profile trace places every pod as the simulator does)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  openb->callback([opt, rc] { *rc = runOpenb(*opt); });

  auto scenario_file = std::make_shared<std::string>();
  auto scenario_out = std::make_shared<std::string>("sim-out");
  auto scenario_quiet = std::make_shared<bool>(false);
  CLI::App* scenario = sim->add_subcommand(
      "scenario",
      "Time-driven simulation of a scenario (JSON: cluster, queue tree, workloads over time) "
      "through the fair-share scheduler");
  scenario->add_option("file", *scenario_file, "Scenario JSON file")->required();
  scenario
      ->add_option("--out,-o", *scenario_out, "Output directory (CSV and JSON files, report.html)")
      ->capture_default_str();
  scenario->add_flag("--quiet,-q", *scenario_quiet, "No progress bar");
  auto through_api = std::make_shared<bool>(false);
  scenario->add_flag("--through-api", *through_api,
                     "Run it through a real server in this process, over its HTTPS API (a "
                     "scenario with \"tenants\"), with simulated nodes and a virtual clock: "
                     "events.csv and tenants.csv must match the simulator's");
  scenario->callback([=] {
    *rc = runScenarioCommand(*scenario_file, *scenario_out, *scenario_quiet, *through_api);
  });

  auto philly = std::make_shared<PhillyArgs>();
  CLI::App* philly_cmd = sim->add_subcommand(
      "philly",
      "Replay the Microsoft Philly job table (one tenant per virtual cluster) through the "
      "fair-share scheduler, or plain FIFO with --fifo");
  philly_cmd
      ->add_option("--trace,-t", philly->trace,
                   "philly.csv (timestamp,duration,num_gpus,gpu_time,cluster)")
      ->required();
  philly_cmd
      ->add_option("--cluster,-c", philly->options.cluster,
                   "Cluster: PROFILE:COUNT (dgx-h100:250) or NODESxGPUS (250x8)")
      ->capture_default_str();
  philly_cmd->add_option("--quotas", philly->options.quota_file,
                         "CSV queue,gpus (default: quotas proportional to each tenant's GPU-time)");
  philly_cmd->add_option("--max-jobs", philly->options.max_jobs, "Replay only the first N jobs");
  philly_cmd->add_flag("--fifo", philly->fifo, "Fair share off: one FIFO queue, no reclaim");
  philly_cmd->add_option("--checkpoint-every", philly->checkpoint_s,
                         "Seconds between checkpoints of every job (default 0: an evicted job "
                         "restarts from zero)");
  philly_cmd
      ->add_option("--min-runtime", philly->min_runtime_s,
                   "Seconds a task runs before it may be reclaimed or preempted")
      ->capture_default_str();
  philly_cmd
      ->add_option("--max-unsaved", philly->max_unsaved_s,
                   "GPU-seconds of unsaved work (run since the last checkpoint, times GPUs) above "
                   "which reclaim leaves a job alone")
      ->capture_default_str();
  philly_cmd
      ->add_option("--reclaim-patience", philly->patience_s,
                   "Seconds a job waits while its tenant is within its fair share before it may "
                   "reclaim")
      ->capture_default_str();
  philly_cmd
      ->add_option("--reclaim-to", philly->reclaim_to,
                   "What reclaim restores: each tenant's fair share, or only its quota "
                   "(then the surplus is shared by allocation order alone)")
      ->check(CLI::IsMember({"fair-share", "quota"}))
      ->capture_default_str();
  philly_cmd
      ->add_option("--out,-o", philly->out, "Output directory (CSV and JSON files, report.html)")
      ->capture_default_str();
  philly_cmd->add_flag("--quiet,-q", philly->quiet, "No progress bar");
  philly_cmd->callback([philly, rc] { *rc = runPhillyCommand(*philly); });

  // Pod-list variants and the allocation lower bound (sim/openb_variant.h, sim/lower_bound.h).
  struct VariantArgs {
    std::string pods, out, gpuspec_from;
    double cpu = -1, gpushare = -1, gpuspec = -1;
    uint64_t seed = 1;
  };
  auto va = std::make_shared<VariantArgs>();
  CLI::App* variant = sim->add_subcommand(
      "openb-variant",
      "Derive an openb pod-list variant (cpuNNN: CPU-only pods make up NNN/10 % of pods; "
      "gpushareNN: sharing pods make up NN % of GPU request; gpuspecNN: NN % of GPU pods accept "
      "only some GPU models) from a base list, with a seed");
  variant->add_option("--pods,-p", va->pods, "Base pod list CSV (the default trace)")->required();
  variant->add_option("--cpu-pct", va->cpu, "CPU-only pods, % of all pods (e.g. 30 for cpu300)");
  variant->add_option("--gpushare-pct", va->gpushare, "Sharing pods, % of GPU request");
  variant->add_option("--gpuspec-pct", va->gpuspec,
                      "GPU pods with a gpu_spec (accepted models), % of GPU pods");
  variant->add_option("--gpuspec-from", va->gpuspec_from,
                      "Pod list whose gpu_spec values are drawn for --gpuspec-pct, by pod kind "
                      "(e.g. openb_pod_list_gpuspec20.csv)");
  variant->add_option("--seed,-s", va->seed, "Seed")->capture_default_str();
  variant->add_option("--out,-o", va->out, "Output CSV")->required();
  variant->callback([va, rc] {
    sim::VariantSpec spec;
    spec.seed = va->seed;
    if (va->cpu >= 0) {
      spec.cpu_pct = va->cpu;
    }
    if (va->gpushare >= 0) {
      spec.gpushare_pct = va->gpushare;
    }
    if (va->gpuspec >= 0) {
      spec.gpuspec_pct = va->gpuspec;
      if (va->gpuspec_from.empty()) {
        *rc = fail(kExitBadInput, "--gpuspec-pct needs --gpuspec-from, a pod list with specs");
        return;
      }
    }
    if (!spec.cpu_pct && !spec.gpushare_pct && !spec.gpuspec_pct) {
      *rc = fail(kExitBadInput, "give --cpu-pct, --gpushare-pct, --gpuspec-pct or several");
      return;
    }
    auto text = sim::writeOpenbVariant(va->pods, spec, va->out, va->gpuspec_from);
    if (!text.isOk()) {
      *rc = fail(kExitBadInput, text.status().message());
      return;
    }
    std::cout << *text;
    *rc = 0;
  });
  auto bo = std::make_shared<OpenbOptions>();
  auto bound_pct = std::make_shared<int>(100);
  CLI::App* bound = sim->add_subcommand(
      "openb-bound",
      "Lower bound (LP relaxation, GLPK) on the unallocated GPU % any scheduler reaches on the "
      "pods `sim openb` has arrived by a given % of GPU capacity");
  bound->add_option("--nodes,-n", bo->nodes, "Node list CSV")->required();
  bound->add_option("--pods,-p", bo->pods, "Pod list CSVs, comma-separated or repeated")
      ->required();
  bound->add_option("--seeds,--seed,-s", bo->seeds, "Seeds, as for sim openb")
      ->capture_default_str();
  bound->add_option("--tune,-t", bo->tune, "Tune factor, as for sim openb")->capture_default_str();
  bound->add_option("--arrived", *bound_pct, "Arrived % of GPU capacity")->capture_default_str();
  bound->callback([bo, bound_pct, rc] {
    auto seeds = parseSeeds(bo->seeds);
    if (!seeds.isOk()) {
      *rc = fail(kExitBadInput, seeds.status().message());
      return;
    }
    std::vector<std::string> files;
    for (const std::string& p : bo->pods) {
      for (const std::string& item : core::splitList(p)) {
        files.push_back(item);
      }
    }
    auto text = sim::openbBoundReport(bo->nodes, files, seeds.value(), bo->tune, *bound_pct);
    if (!text.isOk()) {
      *rc = fail(kExitBadInput, text.status().message());
      return;
    }
    std::cout << *text;
    *rc = 0;
  });

  auto nodes = std::make_shared<std::string>();
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* check = sim->add_subcommand(
      "check",
      "Replay placements-*.csv files against the node list and verify that no node's CPU "
      "or memory and no GPU's share was over-committed");
  check->add_option("--nodes,-n,--node-list", *nodes, "Node list CSV")->required();
  check->add_option("placements", *files, "placements-*.csv files")->required();
  check->callback([nodes, files, rc] { *rc = runCheck(*nodes, *files); });
}

}  // namespace tessera::cli
