// `tessera sim ...`: trace-driven simulation of the scheduler.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `sim` and its subcommands to `app`. The returned exit code of a run is stored in `*rc`.
void addSimCommand(CLI::App& app, int* rc);

}  // namespace tessera::cli
