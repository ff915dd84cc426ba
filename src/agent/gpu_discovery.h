// What a node's GPUs are, as the agent finds them, and the interface of the two ways it finds
// them: NVML on a real machine (agent/nvml_discovery.h) and simulated node profiles for
// development, CI and demos (agent/sim_discovery.h).
//
//   std::unique_ptr<GpuDiscovery> d = ...;
//   core::Result<NodeGpus> found = d->discover();   // an error says what failed and where
//   for (const std::string& w : found->warnings) log(w);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"

namespace tessera::agent {

// One MIG device (a compute instance inside a GPU instance) of a GPU in MIG mode.
struct MigDevice {
  int index = 0;        // NVML's MIG device index on its GPU (indices may have gaps).
  std::string uuid;     // "MIG-...": what CUDA_VISIBLE_DEVICES takes.
  std::string name;     // "NVIDIA H100 80GB HBM3 MIG 3g.40gb".
  std::string profile;  // "3g.40gb", from the name; empty if it does not say.
  int64_t memory_mib = 0;
  int gpu_instance_id = -1;  // -1: unknown.
  int compute_instance_id = -1;
};

struct Gpu {
  int index = 0;             // NVML index (the order of CUDA_DEVICE_ORDER=PCI_BUS_ID).
  std::string uuid;          // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
  std::string name;          // NVML's product name, e.g. "NVIDIA H100 80GB HBM3".
  std::string model;         // The catalogue's model ("H100-80GB"); empty if not recognized.
  int64_t memory_mib = 0;    // Total memory.
  std::string pci_bus_id;    // "00000000:18:00.0"; empty if unknown.
  int minor = -1;            // N of /dev/nvidiaN; -1 if unknown.
  bool mig_capable = false;  // The GPU has a MIG mode at all.
  bool mig_enabled = false;  // MIG mode is on now.
  bool mig_pending = false;  // MIG mode after the next GPU reset.
  // Its agent switches its MIG mode as work needs (AgentOptions::mig_managed): sent in
  // heartbeats as "mig_managed"; not part of discovery.
  bool mig_managed = false;
  std::vector<MigDevice> mig_devices;
  // MIG instances its agent left from tasks that ended (catalogue profile of `model`, start
  // slice): the scheduler places the next task of their profile in one (no re-layout). Sent in
  // heartbeats as "mig_idle"; not part of discovery.
  std::vector<model::MigInstance> mig_idle;
};

// How two GPUs are connected, nearest first (NVML's nvmlGpuTopologyLevel_t).
enum class PcieLink : int {
  kSame = 0,         // The same board (multi-GPU boards).
  kSwitch = 10,      // One PCIe switch (NVML "SINGLE").
  kSwitches = 20,    // Several PCIe switches, no host bridge ("MULTIPLE").
  kHostBridge = 30,  // One host bridge.
  kNuma = 40,        // Host bridges of one NUMA node ("NODE").
  kSystem = 50,      // Across NUMA nodes (SMP interconnect).
  kUnknown = -1,
};

// "switch", "host-bridge", ...: for logs and the API.
const char* pcieLinkName(PcieLink link);

struct NodeGpus {
  std::string backend;         // "nvml" or "sim:<profile>".
  std::string driver_version;  // "550.54.15"; empty if unknown (and for sim, "sim").
  std::string cuda_version;    // "12.4"; empty if unknown.
  std::vector<Gpu> gpus;       // By index.
  // Per pair (i, j), i != j: the PCIe distance and whether NVLink joins them. Square, of
  // gpus.size(); the diagonal is kSame and false.
  std::vector<std::vector<PcieLink>> pcie;
  std::vector<std::vector<bool>> nvlink;
  // What could not be read but did not stop discovery ("GPU 1: MIG mode: Not Supported"), one
  // line each, for the agent's log.
  std::vector<std::string> warnings;
};

class GpuDiscovery {
 public:
  virtual ~GpuDiscovery() = default;
  // "nvml (libnvidia-ml.so.1)", "sim (dgx-h100)".
  virtual std::string describe() const = 0;
  // Reads the node's GPUs now. Errors say which call failed, on which GPU, and why.
  virtual core::Result<NodeGpus> discover() = 0;
};

// The JSON form (for `tessera agent discover -format=json` and the node's registration): GPUs
// with their MIG devices, versions, and the topology as nvidia-smi's labels ("NV", "PIX", ...).
nlohmann::json toJson(const NodeGpus& gpus);

// nvidia-smi topo's label for a pair: "X" for a GPU with itself, "NV" when NVLink joins them,
// else PIX (one PCIe switch), PXB (several), PHB (host bridge), NODE (one NUMA node), SYS.
std::string topologyLabel(const NodeGpus& gpus, size_t i, size_t j);

// The catalogue model of an NVML product name ("NVIDIA H100 80GB HBM3" -> "H100-80GB",
// "NVIDIA A100-SXM4-40GB" -> "A100-40GB", "Tesla T4" -> "T4"); empty when it is not one we know.
std::string modelFromProductName(const std::string& name, int64_t memory_mib);

// The MIG profile at the end of a MIG device's name ("... MIG 3g.40gb" -> "3g.40gb"), or empty.
std::string migProfileFromName(const std::string& name);

}  // namespace tessera::agent
