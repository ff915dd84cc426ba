// The secrets commands of `tessera` (docs/secrets.md): `operator init|unseal|seal|status|rotate|
// rewrap`, `secrets kv put|get|delete|undelete|destroy|metadata|list` and `lease lookup|renew|
// revoke|list`. Flags and settings as the other client commands (cli/client_commands.h).
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

void addSecretsCommands(CLI::App& app, int* rc);

}  // namespace tessera::cli
