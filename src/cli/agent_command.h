// `tessera agent ...`: the node agent's commands. So far `tessera agent discover`, which shows
// what the agent finds on this machine (GPUs, MIG devices, topology), as the agent would
// register it.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

void addAgentCommands(CLI::App& app, int* rc);

}  // namespace tessera::cli
