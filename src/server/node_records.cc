#include "server/node_records.h"

#include "core/json_node.h"
#include "core/rfc3339.h"

namespace tessera::server {

using nlohmann::json;

json NodeRecord::toJson(const model::GpuCatalogue& catalogue) const {
  json j = {{"name", node.name}, {"joined", joined}, {"cordoned", cordoned}};
  if (!joined) {
    return j;
  }
  json gpus = json::array();
  for (const model::GpuDevice& g : node.gpus) {
    gpus.push_back({{"model", catalogue.model(g.model).name}, {"memory_mib", g.memory.value()}});
  }
  j["cpu_milli"] = node.cpu.value();
  j["memory_mib"] = node.memory.value();
  j["gpus"] = gpus;
  j["labels"] = node.labels;
  j["token_accessor"] = token_accessor;
  j["joined_at"] = core::formatRfc3339(joined_at);
  return j;
}

core::Result<NodeRecord> NodeRecord::fromJson(const json& j, const model::GpuCatalogue& catalogue,
                                              const std::string& source) {
  core::JsonNode n(j, "", source);
  TESSERA_RETURN_IF_ERROR(n.checkKeys({"name", "joined", "cordoned", "cpu_milli", "memory_mib",
                                       "gpus", "labels", "token_accessor", "joined_at"}));
  NodeRecord r;
  TESSERA_ASSIGN_OR_RETURN(r.node.name, n.child("name").str());
  r.joined = j.value("joined", false);
  r.cordoned = j.value("cordoned", false);
  if (!r.joined) {
    return r;
  }
  TESSERA_ASSIGN_OR_RETURN(int64_t cpu, n.child("cpu_milli").integer(0, INT64_MAX / 4));
  TESSERA_ASSIGN_OR_RETURN(int64_t mem, n.child("memory_mib").integer(0, INT64_MAX / 4));
  r.node.cpu = core::MilliCpu{cpu};
  r.node.memory = core::MiB{mem};
  core::JsonNode gpus = n.child("gpus");
  if (!gpus.value().is_array()) {
    return gpus.error("expected a list");
  }
  for (size_t i = 0; i < gpus.value().size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(std::string model, gpus.at(i).child("model").str());
    auto id = catalogue.find(model);
    if (!id) {
      return gpus.at(i).error("unknown GPU model '" + model + "'");
    }
    TESSERA_ASSIGN_OR_RETURN(int64_t mib, gpus.at(i).child("memory_mib").integer(0, INT64_MAX / 4));
    r.node.gpus.push_back({*id, core::MiB{mib}, model::MigMode::kOff});
  }
  if (n.has("labels")) {
    if (!j["labels"].is_object()) {
      return n.child("labels").error("expected an object");
    }
    for (const auto& [key, value] : j["labels"].items()) {
      if (!value.is_string()) {
        return n.child("labels").error("label '" + key + "': expected a string");
      }
      r.node.labels[key] = value.get<std::string>();
    }
  }
  r.token_accessor = j.value("token_accessor", "");
  if (auto at = core::parseRfc3339(j.value("joined_at", ""))) {
    r.joined_at = *at;
  }
  TESSERA_RETURN_IF_ERROR(model::validateNode(r.node).withContext(source));
  return r;
}

core::Result<std::map<std::string, NodeRecord>> loadNodeRecords(
    store::Store& store, const model::GpuCatalogue& catalogue) {
  const std::string prefix(kNodesPrefix);
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult got, store.range(prefix, store::prefixEnd(prefix)));
  std::map<std::string, NodeRecord> out;
  for (const store::KeyValue& kv : got.kvs) {
    json j;
    try {
      j = json::parse(kv.value);
    } catch (const json::exception& e) {
      return core::internalError("stored node at " + kv.key + " is corrupt: " + e.what());
    }
    TESSERA_ASSIGN_OR_RETURN(NodeRecord r, NodeRecord::fromJson(j, catalogue, kv.key));
    out[r.node.name] = std::move(r);
  }
  return out;
}

core::Status validateNodeName(const std::string& name) {
  if (name.empty() || name.size() > 63 || !model::validateLabel("node", name).isOk()) {
    return core::invalidArgument(
        "node name '" + name.substr(0, 100) +
        "': 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit");
  }
  return core::Status::ok();
}

}  // namespace tessera::server
