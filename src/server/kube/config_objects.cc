// Secrets and ConfigMaps (docs/kubernetes.md, "Secrets and ConfigMaps"): kept as the tenant's
// sealed KV, one key per object, its values as text; read back as the Kubernetes objects.
#include <fmt/format.h>

#include <set>

#include "audit/crypto.h"
#include "core/rfc3339.h"
#include "core/strings.h"
#include "server/kube/objects.h"

namespace tessera::server::kube {

using nlohmann::json;

namespace {

// Kubernetes' limit on a Secret's or ConfigMap's data, in all.
constexpr size_t kMaxDataBytes = size_t{1} << 20;

core::Status invalid(const std::string& field, const std::string& message) {
  return core::invalidArgument(field + ": " + message);
}

// A data key as Kubernetes allows one: [-._a-zA-Z0-9]+, at most 253 characters.
bool validKey(const std::string& k) {
  return !k.empty() && k.size() <= 253 && k != "." && k != ".." &&
         std::all_of(k.begin(), k.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' ||
                  c == '_';
         });
}

bool isText(const std::string& s) {
  return core::isValidUtf8(s) && s.find('\0') == std::string::npos;
}

}  // namespace

std::string kvPathOf(std::string_view resource, const std::string& ns, const std::string& name) {
  return "kube/" + ns + "/" + std::string(resource) + "/" + name;
}

core::Result<KvSubmission> kvFromObject(const json& body, std::string_view kind,
                                        const std::string& ns, bool strict, core::WallTime now) {
  const bool secret = kind == "Secret";
  TESSERA_ASSIGN_OR_RETURN(const json metadata, objectMetadata(body, kind, "v1", ns));
  KvSubmission out;
  out.name = metadata["name"];
  static const std::set<std::string> kSecretFields = {"apiVersion", "kind", "metadata", "data",
                                                      "stringData", "type", "immutable"};
  static const std::set<std::string> kConfigMapFields = {"apiVersion", "kind",       "metadata",
                                                         "data",       "binaryData", "immutable"};
  for (const auto& [key, value] : body.items()) {
    if (!(secret ? kSecretFields : kConfigMapFields).contains(key)) {
      if (strict) {
        return invalid(key, "unknown field");
      }
      out.warnings.push_back(key + " is not a field of a " + std::string(kind) + " and is ignored");
    }
  }
  if (body.contains("binaryData") && !body["binaryData"].empty()) {
    return invalid("binaryData",
                   "Forbidden: Tessera keeps ConfigMaps as text; put the bytes in a Secret's "
                   "data, or base64 them into data yourself");
  }
  json data = json::object();
  size_t bytes = 0;
  auto take = [&](const char* field, bool base64) -> core::Status {
    if (!body.contains(field) || body[field].is_null()) {
      return core::Status::ok();
    }
    if (!body[field].is_object()) {
      return invalid(field, "expected a map of strings");
    }
    for (const auto& [k, v] : body[field].items()) {
      const std::string where = std::string(field) + "[" + k + "]";
      if (!validKey(k)) {
        return invalid(where,
                       "Invalid value: a valid config key must consist of alphanumeric "
                       "characters, '-', '_' or '.'");
      }
      if (!v.is_string()) {
        return invalid(where, "expected a string");
      }
      std::string value = v.get<std::string>();
      if (base64) {
        auto decoded = audit::base64Decode(value);
        if (!decoded.isOk()) {
          return invalid(where,
                         "Invalid value: not base64 (a Secret's data is base64; "
                         "stringData takes text)");
        }
        value = std::move(*decoded);
      }
      if (!isText(value)) {
        return invalid(where, "Forbidden: Tessera keeps a " + std::string(kind) +
                                  "'s values as text (UTF-8 without NUL bytes); binary values "
                                  "are not supported");
      }
      bytes += k.size() + value.size();
      data[k] = std::move(value);
    }
    return core::Status::ok();
  };
  TESSERA_RETURN_IF_ERROR(take("data", secret));
  if (secret) {
    TESSERA_RETURN_IF_ERROR(take("stringData", false));  // Wins over data, as in Kubernetes.
  }
  if (bytes > kMaxDataBytes) {
    return invalid("data", fmt::format("Too long: must have at most {} bytes", kMaxDataBytes));
  }
  json object = {{"creationTimestamp", core::formatRfc3339(now)}};
  if (secret) {
    if (body.contains("type") && !body["type"].is_string()) {
      return invalid("type", "expected a string");
    }
    std::string type = textOr(body, "type");
    if (type.empty()) {
      type = "Opaque";  // "" means Opaque (protobuf bodies send it).
    }
    auto need = [&](const char* key) -> core::Status {
      return data.contains(key) ? core::Status::ok()
                                : invalid(std::string("data[") + key + "]",
                                          "Required value: a " + type + " Secret needs it");
    };
    if (type == "kubernetes.io/dockerconfigjson") {
      TESSERA_RETURN_IF_ERROR(need(".dockerconfigjson"));
    } else if (type == "kubernetes.io/tls") {
      TESSERA_RETURN_IF_ERROR(need("tls.crt"));
      TESSERA_RETURN_IF_ERROR(need("tls.key"));
    }
    object["type"] = type;
  }
  if (body.contains("immutable")) {
    if (!body["immutable"].is_boolean()) {
      return invalid("immutable", "expected true or false");
    }
    object["immutable"] = body["immutable"];
  }
  for (const char* field : {"labels", "annotations"}) {
    if (metadata.contains(field) && !metadata[field].empty()) {
      object[field] = metadata[field];
    }
  }
  data[std::string(kKubeObjectKey)] = std::move(object);
  out.data = std::move(data);
  return out;
}

json objectFromKv(std::string_view kind, const std::string& tenant, const std::string& ns,
                  const std::string& name, const json& data, int64_t version) {
  const bool secret = kind == "Secret";
  const json about = data.is_object() && data.contains(kKubeObjectKey) &&
                             data[std::string(kKubeObjectKey)].is_object()
                         ? data[std::string(kKubeObjectKey)]
                         : json::object();
  const std::string created = textOr(about, "creationTimestamp");
  json metadata = {
      {"name", name},
      {"namespace", ns},
      {"uid", uuidOf(tenant + "/" + kvPathOf(secret ? "secrets" : "configmaps", ns, name) + "@" +
                     created)},
      {"resourceVersion", std::to_string(version)},
      {"creationTimestamp", created}};
  for (const char* field : {"labels", "annotations"}) {
    if (about.contains(field) && about[field].is_object()) {
      metadata[field] = about[field];
    }
  }
  json values = json::object();
  if (data.is_object()) {
    for (const auto& [k, v] : data.items()) {
      if (k == kKubeObjectKey || !v.is_string()) {
        continue;  // Not a value (a KV key Tessera's own API wrote may hold anything).
      }
      values[k] = secret ? audit::base64Encode(v.get<std::string>()) : v.get<std::string>();
    }
  }
  json object = {{"apiVersion", "v1"}, {"kind", kind}, {"metadata", std::move(metadata)}};
  if (!values.empty()) {
    object["data"] = std::move(values);
  }
  if (secret) {
    object["type"] = textOr(about, "type", "Opaque");
  }
  if (about.contains("immutable")) {
    object["immutable"] = about["immutable"];
  }
  return object;
}

json kvTable(std::string_view kind, const std::vector<json>& objects, const std::string& rv,
             IncludeObject include, core::WallTime now) {
  const bool secret = kind == "Secret";
  json columns = json::array();
  columns.push_back(column("Name", "Name must be unique within a namespace.", 0, "name"));
  if (secret) {
    columns.push_back(column("Type", "The type of the secret."));
  }
  columns.push_back(column("Data", "The number of keys it holds."));
  columns.push_back(
      column("Age", "CreationTimestamp is a timestamp of when this object was created."));
  json rows = json::array();
  for (const json& o : objects) {
    json cells = json::array();
    cells.push_back(o["metadata"]["name"]);
    if (secret) {
      cells.push_back(o.value("type", "Opaque"));
    }
    cells.push_back(o.contains("data") ? o["data"].size() : 0);
    cells.push_back(ageCell(o["metadata"], now));
    rows.push_back(tableRow(std::move(cells), o, include));
  }
  return makeTable(std::move(columns), std::move(rows), rv);
}

}  // namespace tessera::server::kube
