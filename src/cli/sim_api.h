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
#include "sim/scenario.h"
#include "sim/scenario_run.h"

namespace tessera::cli {

// `work_dir` receives the server's store, audit log and certificates.
core::Result<sim::ScenarioResult> runScenarioThroughApi(const sim::Scenario& scenario,
                                                        const std::string& work_dir);

}  // namespace tessera::cli
