// `tessera audit ...`: offline tools for the audit log (verify a file, compute the HMAC a sink
// writes for a value, create a checkpoint signing key, extract a tenant's view).
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `audit` and its subcommands to `app`. The exit code of a run is stored in `*rc`.
void addAuditCommand(CLI::App& app, int* rc);

}  // namespace tessera::cli
