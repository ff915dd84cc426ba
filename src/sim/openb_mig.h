// MIG variants of the openb experiment (`tessera sim openb --mig none|fixed|dynamic`): which
// fractional pods a MIG slice can serve, and how a GPU's share and memory map to a profile.
//
// Layouts (see docs/placement.md, "Dynamic MIG"):
//   none     today's experiment: fractional pods share GPUs (MPS-style caps), no MIG.
//   fixed    a share of the MIG-capable nodes is pre-partitioned: every GPU of such a node holds
//            one homogeneous layout (7 x 1g.10gb, 3 x 2g.20gb or 2 x 3g.40gb, cycling over the
//            nodes) and takes fractional pods only as slices of that profile; the other GPUs
//            take no slices and work as today.
//   dynamic  every MIG-capable GPU is partitioned on demand: an idle GPU takes a slice or a
//            share, whichever the policy places first; a GPU with slices takes only slices, a
//            shared GPU only shares (model::MigMode::kAny in the scheduler).
// The openb node list has no MIG-capable model (its GPUs are G1/G2/G3, T4, P100, V100, A10), so
// `map` turns the nodes of some models into a MIG-capable one (a what-if): `G3=A100-80GB` makes
// every G3 node an A100-80GB node, and pods that named G3 in gpu_spec name A100-80GB instead.
//
//   MigOptions mig{MigLayout::kDynamic, {{"G3", "A100-80GB"}}};
//   auto exp = OpenbExperiment::load("nodes.csv", "pods.csv", mig);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"

namespace tessera::sim {

enum class MigLayout : uint8_t { kNone, kFixed, kDynamic };

std::string_view migLayoutName(MigLayout l);
// "none", "fixed" or "dynamic".
core::Result<MigLayout> parseMigLayout(std::string_view s);

struct MigOptions {
  MigLayout layout = MigLayout::kNone;
  // Node GPU models to replace, FROM -> TO (TO must be a catalogue model).
  std::vector<std::pair<std::string, std::string>> map;
  // Fixed layout: the share of MIG-capable nodes pre-partitioned, spread evenly in node-list
  // order, and the profiles of their homogeneous layouts, cycling over those nodes.
  double fixed_share = 0.5;
  std::vector<std::string> fixed_profiles = {"1g.10gb", "2g.20gb", "3g.40gb"};
};

// Parses "G3=A100-80GB,V100M32=A100-80GB" (empty: no mapping).
core::Result<std::vector<std::pair<std::string, std::string>>> parseMigMap(std::string_view s);

// GPU memory (MiB) a pod of `milli` per-GPU share needs in a slice: the scheduler's rule for
// fractional requests (memory in proportion to the share), applied to the memory the GPU offers
// in MIG mode (its full 7g instance), rounded up. Precondition: `model.supportsMig()`.
int64_t migMemoryNeed(const model::GpuModelInfo& model, int32_t milli);

// The smallest profile of `model` that holds a pod of `milli` per-GPU share: at least
// ceil(7 x milli / 1000) compute slices and `migMemoryNeed` memory; smallest means fewest memory
// slices, then fewest compute slices, then table order. "+me" profiles (one per GPU, for media
// engines) are never chosen. With `allowed` non-empty only those profile indexes are candidates.
// nullopt when `milli` is not a fractional share (outside 1..999) or no candidate holds it.
std::optional<int> smallestMigProfile(const model::GpuModelInfo& model, int32_t milli,
                                      std::span<const int> allowed = {});

// What MIG did in one run (all zero for `none`).
struct MigRunStats {
  int64_t mig_pods = 0;       // Fractional pods served by a slice.
  int64_t shared_pods = 0;    // Fractional pods served by a shared GPU.
  int64_t padding_milli = 0;  // Sum over slices of the slice's compute share minus the pod's.
};

}  // namespace tessera::sim
