// `tessera tls ca create` and `tessera tls cert create`: a CA and certificates for a fleet with
// no PKI of its own, as Nomad's `nomad tls` makes them (docs/server.md "TLS").
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Adds `tls` and its subcommands to `app`. The exit code of a run is stored in `*rc`.
void addTlsCommand(CLI::App& app, int* rc);

}  // namespace tessera::cli
