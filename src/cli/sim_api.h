// `tessera sim scenario FILE --through-api` (issue #19, "Sim/live parity"): a scenario with
// tenants run through a real server in this process, over its HTTPS API, instead of straight
// into the scheduler. The server is the one `tessera server` runs (store, audit log, scheduler
// driver, control plane, HTTPS listener on loopback) with the scenario's cluster as simulated
// nodes, and a virtual clock that this harness advances: it creates the tenants, their team
// queues and a token per tenant through the API, submits each workload at its time with its
// tenant's token, runs one scheduler pass at each moment the simulator would (a submission, a
// simulated task's end, an evicted task's stop), and reads what happened back from the API
// (workload status and events, queues). Its events.csv and tenants.csv must be those of
// `tessera sim scenario FILE`; any difference is an integration bug (the parity test,
// tests/integration/cli_sim_test.cc, runs every example scenario both ways).
//
// Rows that fall on the same instant may come in another order than the simulator's (the API
// does not say in which order one pass decided things); compare them as sets per instant.
// summary.json has the run's totals only (no per-queue job times).
#pragma once

#include <string>

#include "core/status.h"
#include "sim/openb_experiment.h"
#include "sim/scenario.h"
#include "sim/scenario_run.h"

namespace tessera::cli {

// `work_dir` receives the server's store, audit log and certificates.
core::Result<sim::ScenarioResult> runScenarioThroughApi(const sim::Scenario& scenario,
                                                        const std::string& work_dir);

// `tessera sim openb --through-api` (issue #40, "Placement parity, live"): one run of the FGD
// experiment (sim/openb_experiment.h) through a real server in this process. The trace's nodes
// are the server's simulated nodes, in the run's tie-break rank order (so the scheduler's index
// order is the simulator's rank order); one tenant without a quota submits each pod of the
// tuned list in turn through the API, the harness runs one scheduler pass and reads the pod's
// status back: running (its node and GPUs) or pending, which the experiment counts as failed
// (the pod is then deleted: nothing departs, so it could never run). The server learns the
// typical pods from the submissions itself, as in production (DriverOptions::typical is left
// empty), where the simulator is given the whole pod list's; with `given_typical` the server is
// given the simulator's too. `max_moves` is the scheduler's max_moves_per_pass: running tasks
// it may move to make room for a pending one (the server's default is 8; the experiment has no
// such moves, so with 0 and `given_typical` every pod lands where the simulator puts it).
// The result's curve has the allocation only (its fragmentation is 0). MIG what-ifs are not
// supported.
core::Result<sim::RunResult> runOpenbThroughApi(const sim::OpenbExperiment& exp,
                                                const std::string& policy, uint64_t seed,
                                                double tune, const std::string& work_dir,
                                                bool given_typical = false, int max_moves = 8,
                                                const sim::ProgressFn& progress = {});

}  // namespace tessera::cli
