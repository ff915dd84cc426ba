#include "cli/server_command.h"

#include <iostream>
#include <memory>

#include "server/server.h"

namespace tessera::cli {

void addServerCommands(CLI::App& app, int* rc) {
  auto config = std::make_shared<std::string>();
  CLI::App* server = app.add_subcommand(
      "server",
      "Run the control plane: API, tenants, tokens, policies, scheduler and audit log, as "
      "configured in an HCL or JSON file (see docs/server.md)");
  server->add_option("-c,--config", *config, "Server configuration (.hcl or .json)")->required();
  server->callback([config, rc] {
    auto parsed = server::readServerConfig(*config);
    if (!parsed.isOk()) {
      std::cerr << "error: " << parsed.status().message() << "\n";
      *rc = 2;
      return;
    }
    *rc = server::runServer(*parsed);
  });

  auto dev = std::make_shared<server::DevOptions>();
  CLI::App* d = app.add_subcommand(
      "dev",
      "A development server: SQLite store, TLS with a generated CA, simulated GPU nodes, a demo "
      "tenant; prints the address and tokens and writes them to DATA_DIR/dev.json");
  d->add_option("--data-dir", dev->data_dir,
                "Where the store, certificates, audit log and dev.json go (default: a new "
                "temporary directory)");
  d->add_option("--addr", dev->addr, "Address to listen on (port 0: any free port)")
      ->capture_default_str();
  d->add_option("--nodes", dev->nodes,
                "Simulated nodes, PROFILE:COUNT,... (dgx-h100, dgx-h200, "
                "a100-8x, a100-40gb-8x, l40s-4x, t4-2x)")
      ->capture_default_str();
  d->callback([dev, rc] { *rc = server::runDev(*dev); });
}

}  // namespace tessera::cli
