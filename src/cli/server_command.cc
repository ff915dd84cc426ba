#include "cli/server_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "agent/agent_config.h"
#include "cli/agent_command.h"
#include "model/gpu_catalogue.h"
#include "model/node_profiles.h"
#include "server/server.h"

namespace tessera::cli {
namespace {

// "FILE:LINE: " for an error about field `a.b[0].c` of FILE: the first line that sets the
// field's last key (`c = ...`, `c {`, `"c":`). The parser already names the line of a syntax
// error ("FILE:3:1: ..."); a check on a value names the field, and this finds it for the
// person fixing the file. "" when no line says it.
std::string lineOf(const std::string& file, const std::string& message) {
  const std::string prefix = file + ": ";
  if (message.rfind(prefix, 0) != 0) {
    return "";
  }
  const std::string rest = message.substr(prefix.size());
  const size_t colon = rest.find(": ");
  if (colon == std::string::npos) {
    return "";
  }
  std::string field = rest.substr(0, colon);
  field = std::regex_replace(field, std::regex(R"(\[[0-9]+\])"), "");
  const size_t dot = field.rfind('.');
  std::string key = dot == std::string::npos ? field : field.substr(dot + 1);
  std::smatch unknown;  // "listener[0]: unknown field 'x'": the line of x, not of the block.
  if (std::regex_search(rest, unknown, std::regex("unknown field '([A-Za-z0-9_-]+)'"))) {
    key = unknown[1];
  }
  if (key.empty() || !std::regex_match(key, std::regex("[A-Za-z0-9_-]+"))) {
    return "";
  }
  const std::regex sets("(^|[\\s{,])\"?" + key + "\"?\\s*(=|\\{|:|\")");
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (std::regex_search(line, sets)) {
      return file + ":" + std::to_string(n) + ": ";
    }
  }
  return "";
}

// `tessera server -validate -config=F`: reads and checks the file, and the files it names that
// the server would open at start, without starting anything.
int validateConfig(const std::string& file) {
  auto parsed = server::readServerConfig(file);
  if (!parsed.isOk()) {
    const std::string message = parsed.status().message();
    const std::string at = lineOf(file, message);
    std::cerr << "error: " << (at.empty() ? message : at + message.substr(file.size() + 2)) << "\n";
    return 2;
  }
  std::vector<std::string> problems;
  for (size_t i = 0; i < parsed->listeners.size(); ++i) {
    const auto& l = parsed->listeners[i];
    for (const auto& [field, path] :
         {std::pair{"tls_cert_file", &l.tls_cert_file}, std::pair{"tls_key_file", &l.tls_key_file},
          std::pair{"tls_client_ca_file", &l.tls_client_ca_file}}) {
      std::ifstream in(*path);
      if (!path->empty() && !in) {
        const std::string what =
            "listener[" + std::to_string(i) + "]." + field + ": '" + *path + "' cannot be read";
        const std::string at = lineOf(file, file + ": " + what);
        problems.push_back((at.empty() ? file + ": " : at) + what);
      }
    }
  }
  if (problems.empty()) {
    // What start would refuse besides: certificates that do not load, addresses, folders.
    for (const std::string& p : server::configStartProblems(*parsed)) {
      problems.push_back(file + ": " + p);
    }
  }
  for (const std::string& p : problems) {
    std::cerr << "error: " << p << "\n";
  }
  if (!problems.empty()) {
    return 2;
  }
  std::cout << "Configuration " << file << " is valid: " << parsed->listeners.size()
            << " listener(s), storage " << (parsed->etcd ? "etcd" : "sqlite") << ". OK\n";
  return 0;
}

}  // namespace

void addServerCommands(CLI::App& app, int* rc) {
  auto config = std::make_shared<std::string>();
  auto validate = std::make_shared<bool>(false);
  CLI::App* server = app.add_subcommand(
      "server",
      "Run the control plane: API, tenants, tokens, policies, scheduler and audit log, as "
      "configured in an HCL or JSON file (see docs/server.md)");
  server->add_option("-c,--config", *config, "Server configuration (.hcl or .json)")->required();
  server->add_flag("--validate", *validate,
                   "Only check the configuration (also -validate): print what is wrong, with "
                   "file and line, and exit 2; or say OK and exit 0. Starts nothing");
  server->callback([config, validate, rc] {
    if (*validate) {
      *rc = validateConfig(*config);
      return;
    }
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
                "Nodes, PROFILE:COUNT,... (dgx-h100, dgx-h200, a100-8x, a100-40gb-8x, l40s-4x, "
                "t4-2x) or NAME=PROFILE,...; each is run by an in-process agent with simulated "
                "GPUs, so workloads run as real processes (logs: DATA_DIR/nodes/<node>)")
      ->capture_default_str();
  auto durable_answers = std::make_shared<std::string>("secrets");
  d->add_option("--audit-durable-answers", *durable_answers,
                "Which answers wait until their audit records are on disk: those that reveal "
                "secrets, or all (audit_durable_answers in a server config; a change always "
                "waits for its request's record)")
      ->capture_default_str()
      ->check(CLI::IsMember({"secrets", "all"}));
  auto simulated = std::make_shared<bool>(false);
  CLI::Option* simulated_opt =
      d->add_flag("--simulated", *simulated,
                  "No agents: the server simulates the nodes (tasks run for their --duration, "
                  "nothing is executed)");
  auto external = std::make_shared<bool>(false);
  d->add_flag("--external-agents", *external,
              "Declare the nodes for agents but start none: run `tessera agent run` for each "
              "(the command is printed, with its node's credential in DATA_DIR/agent-tokens), as "
              "on real machines")
      ->excludes(simulated_opt);
  d->callback([dev, durable_answers, simulated, external, rc] {
    dev->audit_durable_every_answer = *durable_answers == "all";
    // One agent per node on a thread of its own, as `tessera agent run` would run on each
    // machine; stopped (with their tasks) before the server stops.
    struct Agents {
      std::atomic<bool> stop{false};
      std::vector<std::thread> threads;
    };
    auto agents = std::make_shared<Agents>();
    if (*external) {
      dev->start_agents = [](const server::DevInfo& info) {
        // Each agent gets its node's own credential in a file (0600): never the root token, and
        // no token on a command line, where every process of the machine can read it.
        std::cout << "\nNodes wait for their agents; start each with:\n";
        for (const server::NodeDecl& n : info.nodes) {
          std::cout << "  tessera agent run --node " << n.name << " --backend sim --profile "
                    << n.profile << " --address " << info.address << " --ca-cert " << info.ca_cert
                    << " --token-file " << info.node_token_files.at(n.name) << " --work-dir "
                    << info.data_dir << "/nodes/" << n.name << " --node-mode development\n";
        }
        std::cout << std::flush;
      };
    } else if (!*simulated) {
      dev->start_agents = [agents](const server::DevInfo& info) {
        if (::geteuid() == 0) {
          // As root each tenant's tasks run as its own user (as on a real node), in their
          // folders under DATA_DIR/nodes: they may pass through DATA_DIR, not list it (what
          // else is there, the store and the keys, is mode 0600).
          std::error_code ec;
          std::filesystem::create_directories(info.data_dir + "/nodes", ec);
          for (const std::string& d : {info.data_dir, info.data_dir + "/nodes"}) {
            if (::chmod(d.c_str(), 0711) != 0) {
              std::cerr << "warning: cannot chmod 0711 " << d << "\n";
            }
          }
        }
        // MIG: the last node whose GPUs offer it shows its last two in MIG mode, so MIG slices
        // run (`tessera run NAME --mig 3g.40gb`) and whole-GPU work keeps the other GPUs.
        const model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
        const server::NodeDecl* mig_node = nullptr;
        int mig_gpus = 0;
        for (const server::NodeDecl& n : info.nodes) {
          const std::optional<model::NodeProfile> p = model::findNodeProfile(n.profile);
          const auto model = p ? catalogue.find(p->gpu_model) : std::nullopt;
          if (p && model && p->gpus >= 4 && catalogue.model(*model).supportsMig()) {
            mig_node = &n;
            mig_gpus = p->gpus;
          }
        }
        if (mig_node != nullptr) {
          std::cout << "MIG: GPUs " << mig_gpus - 2 << " and " << mig_gpus - 1 << " of node "
                    << mig_node->name
                    << " are in MIG mode: tessera run NAME --mig 3g.40gb -- sh -c "
                    << "'echo $CUDA_VISIBLE_DEVICES' runs there\n"
                    << std::flush;
        }
        for (const server::NodeDecl& n : info.nodes) {
          AgentSettings s;
          s.config.node_name = n.name;
          s.config.gpus.backend = "sim";
          s.config.gpus.profile = n.profile;
          if (&n == mig_node) {
            s.config.gpus.sim_mig = {mig_gpus - 2, mig_gpus - 1};
          }
          s.client.address = info.address;
          s.client.ca_cert_file = info.ca_cert;
          s.client.token = info.node_tokens.at(n.name);
          s.work_dir = info.data_dir + "/nodes/" + n.name;
          // A development node: tenants are kept apart as root (their own users), and
          // otherwise run as this user, which the agent says at start.
          s.config.node_mode = agent::NodeMode::kDevelopment;
          s.detach_on_stop = false;
          agents->threads.emplace_back([s, agents] { (void)runAgentLoop(s, agents->stop); });
        }
      };
      dev->stop_agents = [agents] {
        agents->stop = true;
        for (std::thread& t : agents->threads) {
          t.join();
        }
        agents->threads.clear();
      };
    }
    *rc = server::runDev(*dev);
    if (dev->stop_agents) {
      dev->stop_agents();  // The server failed to start: no signal came.
    }
  });
}

}  // namespace tessera::cli
