// What the store keeps about nodes beyond the config (docs/server.md, "Nodes join"):
//
//   /nodes/<name>        a node that joined (its capacity, GPUs and labels, its credential's
//                        accessor), or a declared node's operator state (cordoned)
//   /join-tokens/<hash>  a join token: the SHA-256 of its secret, its expiry and the labels it
//                        gives the nodes that join with it
//   /pools/<pool>        a pool dedicated to one tenant
//
// The server reads the joined nodes before its scheduler starts (they are agent-run nodes like
// the declared ones), and the cordons and pools right after.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "store/store.h"

namespace tessera::server {

inline constexpr std::string_view kNodesPrefix = "/nodes/";
inline constexpr std::string_view kJoinTokensPrefix = "/join-tokens/";
inline constexpr std::string_view kPoolsPrefix = "/pools/";

struct NodeRecord {
  model::Node node;            // For a joined node: name, CPU, memory, GPUs, labels.
  bool joined = false;         // False: a declared node's state only (`node` has its name).
  bool cordoned = false;       // Takes no new tasks (cordon, drain).
  std::string token_accessor;  // A joined node's current credential.
  core::WallTime joined_at{};

  nlohmann::json toJson(const model::GpuCatalogue& catalogue) const;
  // Errors name `source` (the store key) and the field.
  static core::Result<NodeRecord> fromJson(const nlohmann::json& j,
                                           const model::GpuCatalogue& catalogue,
                                           const std::string& source);
};

// Every node record in the store, by name.
core::Result<std::map<std::string, NodeRecord>> loadNodeRecords(
    store::Store& store, const model::GpuCatalogue& catalogue);

// A node name as agents and the API use it: 1 to 63 letters, digits, '-', '_' or '.', starting
// and ending with a letter or digit (a label value's rules: it appears in paths and logs).
core::Status validateNodeName(const std::string& name);

}  // namespace tessera::server
