// `tessera server -config=FILE` and `tessera dev`.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

void addServerCommands(CLI::App& app, int* rc);

}  // namespace tessera::cli
