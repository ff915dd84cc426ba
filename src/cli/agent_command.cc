#include "cli/agent_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "agent/agent_config.h"
#include "model/gpu_catalogue.h"

namespace tessera::cli {
namespace {

struct DiscoverFlags {
  std::string config;
  std::string node;
  agent::GpuConfig gpus;
  CLI::Option* backend = nullptr;
  CLI::Option* library = nullptr;
  CLI::Option* profile = nullptr;
  CLI::Option* profile_file = nullptr;
  CLI::Option* fallback = nullptr;
  std::string format = "table";
};

void printTable(const agent::NodeGpus& found, const std::string& node) {
  std::cout << fmt::format("node {}: {} GPU{} ({}", node, found.gpus.size(),
                           found.gpus.size() == 1 ? "" : "s", found.backend);
  if (!found.driver_version.empty()) {
    std::cout << ", driver " << found.driver_version;
  }
  if (!found.cuda_version.empty()) {
    std::cout << ", CUDA " << found.cuda_version;
  }
  std::cout << ")\n";
  if (found.gpus.empty()) {
    return;
  }
  std::cout << fmt::format("{:<4} {:<40} {:<12} {:>10}  {:<17} {:>5}  {}\n", "IDX", "UUID", "MODEL",
                           "MEMORY", "PCI", "MINOR", "MIG");
  for (const agent::Gpu& g : found.gpus) {
    const std::string mig = !g.mig_capable  ? "-"
                            : g.mig_enabled ? fmt::format("on, {} devices", g.mig_devices.size())
                                            : (g.mig_pending ? "off (on after reset)" : "off");
    std::cout << fmt::format("{:<4} {:<40} {:<12} {:>6} MiB  {:<17} {:>5}  {}\n", g.index, g.uuid,
                             g.model.empty() ? g.name : g.model, g.memory_mib,
                             g.pci_bus_id.empty() ? "?" : g.pci_bus_id,
                             g.minor < 0 ? "?" : std::to_string(g.minor), mig);
  }
  for (const agent::Gpu& g : found.gpus) {
    for (const agent::MigDevice& m : g.mig_devices) {
      std::cout << fmt::format("  GPU {} MIG {}: {} {} {} MiB (GPU instance {}, compute {})\n",
                               g.index, m.index, m.uuid, m.profile.empty() ? m.name : m.profile,
                               m.memory_mib, m.gpu_instance_id, m.compute_instance_id);
    }
  }
  if (found.gpus.size() < 2) {
    return;
  }
  std::cout << "\nTopology (NV: NVLink; PIX: one PCIe switch, PXB: several, PHB: host bridge, "
               "NODE: one NUMA node, SYS: across NUMA nodes)\n      ";
  for (size_t j = 0; j < found.gpus.size(); ++j) {
    std::cout << fmt::format("{:<6}", "GPU" + std::to_string(j));
  }
  std::cout << "\n";
  for (size_t i = 0; i < found.gpus.size(); ++i) {
    std::cout << fmt::format("{:<6}", "GPU" + std::to_string(i));
    for (size_t j = 0; j < found.gpus.size(); ++j) {
      std::cout << fmt::format("{:<6}", agent::topologyLabel(found, i, j));
    }
    std::cout << "\n";
  }
}

int discover(const DiscoverFlags& f) {
  agent::AgentConfig config;
  if (!f.config.empty()) {
    auto read = agent::readAgentConfig(f.config);
    if (!read.isOk()) {
      std::cerr << "error: " << read.status().message() << "\n";
      return 2;
    }
    config = std::move(read).value();
  }
  // Flags override the file.
  for (const auto& [opt, from, to] :
       {std::tuple{f.backend, &f.gpus.backend, &config.gpus.backend},
        {f.library, &f.gpus.nvml_library, &config.gpus.nvml_library},
        {f.profile, &f.gpus.profile, &config.gpus.profile},
        {f.profile_file, &f.gpus.profile_file, &config.gpus.profile_file},
        {f.fallback, &f.gpus.fallback_profile, &config.gpus.fallback_profile}}) {
    if (opt->count() > 0) {
      *to = *from;
    }
  }
  if (!f.node.empty()) {
    config.node_name = f.node;
  }
  if (config.node_name.empty()) {
    config.node_name = agent::hostName();
  }
  if (core::Status s = agent::validateGpuConfig(config.gpus); !s.isOk()) {
    std::cerr << "error: " << s.message() << "\n";
    return 2;
  }
  const model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  std::vector<std::string> log;
  auto found = agent::discoverGpus(config.gpus, config.node_name, catalogue, &log);
  for (const std::string& line : log) {
    std::cerr << "warning: " << line << "\n";
  }
  if (!found.isOk()) {
    std::cerr << "error: " << found.status().message() << "\n";
    return 1;
  }
  for (const std::string& w : found->warnings) {
    std::cerr << "warning: " << w << "\n";
  }
  if (f.format == "json") {
    nlohmann::json j = agent::toJson(*found);
    j["node"] = config.node_name;
    std::cout << j.dump(2) << "\n";
  } else {
    printTable(*found, config.node_name);
  }
  return 0;
}

}  // namespace

void addAgentCommands(CLI::App& app, int* rc) {
  CLI::App* agent_cmd =
      app.add_subcommand("agent", "The node agent: what runs on every GPU machine");
  agent_cmd->require_subcommand(1);
  auto f = std::make_shared<DiscoverFlags>();
  CLI::App* d = agent_cmd->add_subcommand(
      "discover", "Show the GPUs the agent finds here (NVML, or a simulated node profile)");
  d->add_option("-c,--config", f->config, "Agent configuration (.hcl or .json)");
  d->add_option("--node", f->node, "Node name (default: the config's node_name, or the host name)");
  f->backend = d->add_option("--backend", f->gpus.backend, "nvml or sim")
                   ->check(CLI::IsMember({"nvml", "sim"}));
  f->library = d->add_option("--nvml-library", f->gpus.nvml_library,
                             "The NVML library to load (default libnvidia-ml.so.1)");
  f->profile = d->add_option("--profile", f->gpus.profile,
                             "Node profile for --backend sim (dgx-h100, dgx-h200, a100-8x, "
                             "a100-40gb-8x, l40s-4x, t4-2x, or one of --profile-file)");
  f->profile_file =
      d->add_option("--profile-file", f->gpus.profile_file, "More node profiles (.hcl or .json)");
  f->fallback = d->add_option("--fallback-profile", f->gpus.fallback_profile,
                              "Simulate this profile when NVML fails (default: fail)");
  d->add_option("--format", f->format, "Output: table or json (also -format=json)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  d->footer(
      "Exit status: 0 found, 1 discovery failed (the error says which call and why), 2 bad "
      "flags or config. Warnings (facts NVML could not give) go to standard error.");
  d->callback([f, rc] { *rc = discover(*f); });
}

}  // namespace tessera::cli
