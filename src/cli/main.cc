// tessera: one binary, subcommands in the HashiCorp style (`tessera sim openb ...`).
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "cli/agent_command.h"
#include "cli/audit_command.h"
#include "cli/client_commands.h"
#include "cli/secrets_commands.h"
#include "cli/server_command.h"
#include "cli/sim_command.h"

namespace {

// HashiCorp spelling: `-config=FILE` is `--config=FILE` (CLI11 wants two dashes for long names).
// Arguments after `--` are a workload's command and are left as they are.
std::vector<std::string> hashicorpArgs(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    for (const char* name : {"-config", "-format", "-address", "-key-shares", "-key-threshold"}) {
      const std::string n(name);
      if (args[i] == n || args[i].rfind(n + "=", 0) == 0) {
        args[i] = "-" + args[i];
      }
    }
  }
  return args;
}

int run(int argc, char** argv) {
  CLI::App app{
      "Tessera shares GPU clusters between teams: one scheduler, a virtual cluster per tenant.",
      "tessera"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  int rc = 0;
  tessera::cli::addSimCommand(app, &rc);
  tessera::cli::addAuditCommand(app, &rc);
  tessera::cli::addServerCommands(app, &rc);
  tessera::cli::addAgentCommands(app, &rc);
  tessera::cli::addClientCommands(app, &rc);
  tessera::cli::addSecretsCommands(app, &rc);
  tessera::cli::addAuditTail(*app.get_subcommand("audit"), &rc);
  try {
    std::vector<std::string> args = hashicorpArgs(argc, argv);
    std::vector<char*> ptrs;
    ptrs.reserve(args.size());
    for (std::string& a : args) {
      ptrs.push_back(a.data());
    }
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // Usage errors exit 2, like bad input; --help and --version exit 0.
    return code == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (...) {
    std::cerr << "error: unexpected internal error\n";
    return 1;
  }
}
