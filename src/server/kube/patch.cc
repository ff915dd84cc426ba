#include "server/kube/patch.h"

#include <fmt/format.h>

#include <map>
#include <vector>

namespace tessera::server::kube {

using nlohmann::json;

namespace {

// A list whose items are objects named by `name` (containers, env, volumes,
// imagePullSecrets, ...): strategic merge and field paths key them by it.
bool namedList(const json& list) {
  if (!list.is_array() || list.empty()) {
    return false;
  }
  for (const json& item : list) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) {
      return false;
    }
  }
  return true;
}

core::Result<json> strategicMerge(const json& current, const json& patch, int depth) {
  if (depth > 64) {
    return core::invalidArgument("the patch nests deeper than 64 levels");
  }
  if (!patch.is_object()) {
    return patch;
  }
  if (patch.contains("$patch")) {
    const json& p = patch["$patch"];
    if (p == "delete") {
      return json();  // Removed by the caller.
    }
    if (p == "replace") {
      json replaced = patch;
      replaced.erase("$patch");
      return replaced;
    }
    if (p != "merge") {
      return core::invalidArgument("$patch: unknown directive " + p.dump());
    }
  }
  json out = current.is_object() ? current : json::object();
  for (const auto& [key, value] : patch.items()) {
    if (key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/")) {
      continue;  // Order and retention hints: the result's order is the current one.
    }
    if (key.starts_with("$deleteFromPrimitiveList/")) {
      const std::string field = key.substr(std::string_view("$deleteFromPrimitiveList/").size());
      if (out.contains(field) && out[field].is_array() && value.is_array()) {
        json kept = json::array();
        for (const json& v : out[field]) {
          if (std::find(value.begin(), value.end(), v) == value.end()) {
            kept.push_back(v);
          }
        }
        out[field] = std::move(kept);
      }
      continue;
    }
    if (value.is_null()) {
      out.erase(key);
      continue;
    }
    const json* here = out.contains(key) ? &out[key] : nullptr;
    if (value.is_array() && here != nullptr && namedList(*here) && namedList(value)) {
      // Merged item by item, by name; new names appended.
      json merged = *here;
      for (const json& item : value) {
        auto it = std::find_if(merged.begin(), merged.end(),
                               [&](const json& m) { return m["name"] == item["name"]; });
        if (it == merged.end()) {
          if (!(item.contains("$patch") && item["$patch"] == "delete")) {
            json added = item;
            added.erase("$patch");
            merged.push_back(std::move(added));
          }
          continue;
        }
        TESSERA_ASSIGN_OR_RETURN(json m, strategicMerge(*it, item, depth + 1));
        if (m.is_null()) {
          merged.erase(it);
        } else {
          *it = std::move(m);
        }
      }
      out[key] = std::move(merged);
    } else if (value.is_object()) {
      TESSERA_ASSIGN_OR_RETURN(json m,
                               strategicMerge(here != nullptr ? *here : json(), value, depth + 1));
      if (m.is_null()) {
        out.erase(key);
      } else {
        out[key] = std::move(m);
      }
    } else {
      out[key] = value;  // Scalars and other lists are replaced.
    }
  }
  return out;
}

void collectPaths(const json& v, const std::string& at, std::set<std::string>& out, int depth) {
  if (depth > 64) {
    return;
  }
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, child] : v.items()) {
      collectPaths(child, at + "." + k, out, depth + 1);
    }
  } else if (namedList(v)) {
    for (const json& item : v) {
      json rest = item;
      rest.erase("name");
      const std::string key = at + "[name=" + item["name"].get<std::string>() + "]";
      if (rest.empty()) {
        out.insert(key);
      } else {
        collectPaths(rest, key, out, depth + 1);
      }
    }
  } else {
    out.insert(at);
  }
}

}  // namespace

json fieldValue(const json& object, const std::string& path) {
  const json* at = &object;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      const size_t end = path.find_first_of(".[", i + 1);
      const std::string key = path.substr(i + 1, end == std::string::npos ? end : end - i - 1);
      if (!at->is_object() || !at->contains(key)) {
        return nullptr;
      }
      at = &(*at)[key];
      i = end == std::string::npos ? path.size() : end;
    } else if (path.compare(i, 6, "[name=") == 0) {
      const size_t end = path.find(']', i);
      const std::string name = path.substr(i + 6, end - i - 6);
      if (!at->is_array()) {
        return nullptr;
      }
      auto it = std::find_if(at->begin(), at->end(), [&](const json& item) {
        return item.is_object() && item.value("name", json()) == name;
      });
      if (it == at->end()) {
        return nullptr;
      }
      at = &*it;
      i = end + 1;
    } else {
      return nullptr;
    }
  }
  return *at;
}

std::optional<PatchType> patchTypeOf(std::string_view content_type) {
  const std::string_view type = content_type.substr(0, content_type.find(';'));
  if (type == "application/merge-patch+json") {
    return PatchType::kMerge;
  }
  if (type == "application/json-patch+json") {
    return PatchType::kJson;
  }
  if (type == "application/strategic-merge-patch+json") {
    return PatchType::kStrategic;
  }
  if (type == "application/apply-patch+yaml" || type == "application/apply-patch+json") {
    return PatchType::kApply;
  }
  return std::nullopt;
}

core::Result<json> applyPatch(const json& current, const json& patch, PatchType type) {
  switch (type) {
    case PatchType::kMerge: {
      if (!patch.is_object()) {
        return core::invalidArgument("a merge patch is a JSON object");
      }
      json out = current;
      out.merge_patch(patch);
      return out;
    }
    case PatchType::kJson: {
      if (!patch.is_array()) {
        return core::invalidArgument("a JSON patch is a list of operations");
      }
      try {
        return current.patch(patch);
      } catch (const json::exception& e) {
        // nlohmann's words, without its "[json.exception...]" prefix.
        std::string what = e.what();
        const size_t bracket = what.find("] ");
        return core::invalidArgument(
            "the JSON patch cannot be applied: " +
            (bracket == std::string::npos ? what : what.substr(bracket + 2)));
      }
    }
    case PatchType::kStrategic: {
      if (!patch.is_object()) {
        return core::invalidArgument("a strategic merge patch is a JSON object");
      }
      return strategicMerge(current, patch, 0);
    }
    case PatchType::kApply:
      break;
  }
  return core::invalidArgument("server-side apply is not a patch to apply here");
}

std::set<std::string> fieldPaths(const json& object) {
  std::set<std::string> out;
  if (!object.is_object()) {
    return out;
  }
  for (const auto& [key, value] : object.items()) {
    if (key == "apiVersion" || key == "kind" || key == "status") {
      continue;
    }
    if (key == "metadata") {
      for (const char* field : {"labels", "annotations"}) {
        if (value.is_object() && value.contains(field)) {
          collectPaths(value[field], std::string(".metadata.") + field, out, 0);
        }
      }
      continue;
    }
    collectPaths(value, "." + key, out, 0);
  }
  return out;
}

core::Result<json> serverSideApply(const json& current, const json& applied,
                                   const std::string& manager, bool force, json& managed) {
  if (!applied.is_object()) {
    return core::invalidArgument("an applied configuration is a JSON object");
  }
  if (!managed.is_object()) {
    managed = json::object();
  }
  const std::set<std::string> fields = fieldPaths(applied);
  std::vector<std::string> conflicts;
  for (const std::string& path : fields) {
    if (fieldValue(current, path) == fieldValue(applied, path)) {
      continue;  // Same value: shared, no conflict.
    }
    for (const auto& [other, owned] : managed.items()) {
      if (other != manager && owned.is_array() &&
          std::find(owned.begin(), owned.end(), path) != owned.end()) {
        conflicts.push_back(fmt::format("conflict with \"{}\" using {}: {}", other,
                                        current.value("apiVersion", "v1"), path));
      }
    }
  }
  if (!conflicts.empty() && !force) {
    std::string message = fmt::format("Apply failed with {} conflict{}: ", conflicts.size(),
                                      conflicts.size() == 1 ? "" : "s");
    for (size_t i = 0; i < conflicts.size(); ++i) {
      message += (i == 0 ? "" : "\n") + conflicts[i];
    }
    return core::failedPrecondition(message);
  }
  // The fields it sets are its own now (taken from the others when forced, or changed).
  for (auto& [other, owned] : managed.items()) {
    if (other == manager || !owned.is_array()) {
      continue;
    }
    json kept = json::array();
    for (const json& p : owned) {
      const bool taken =
          p.is_string() && fields.contains(p.get<std::string>()) &&
          fieldValue(current, p.get<std::string>()) != fieldValue(applied, p.get<std::string>());
      if (!taken) {
        kept.push_back(p);
      }
    }
    owned = std::move(kept);
  }
  managed[manager] = json(fields);
  TESSERA_ASSIGN_OR_RETURN(json merged, strategicMerge(current, applied, 0));
  return merged;
}

}  // namespace tessera::server::kube
