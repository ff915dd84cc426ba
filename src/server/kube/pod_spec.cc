// A Pod's body read as Tessera's workload spec (server/kube/objects.h): what maps, what is
// refused naming the field, and what is accepted with a warning (docs/kubernetes.md, "Mapping").
#include <cmath>
#include <map>
#include <set>

#include "protocol/node_protocol.h"
#include "server/kube/objects.h"
#include "server/route.h"

namespace tessera::server::kube {

using nlohmann::json;

namespace {

// Parses a quantity's number and suffix: the value times `scale` of the unit asked for.
core::Result<double> quantity(const json& q, const std::string& field) {
  std::string text;
  if (q.is_number()) {
    return q.get<double>();
  }
  if (!q.is_string() || (text = q.get<std::string>()).empty()) {
    return core::invalidArgument(field +
                                 ": expected a quantity such as \"2\", \"500m\" or \"4Gi\"");
  }
  static const std::vector<std::pair<std::string, double>> kSuffixes = {
      {"Ki", 1024.0},
      {"Mi", 1024.0 * 1024},
      {"Gi", 1024.0 * 1024 * 1024},
      {"Ti", 1024.0 * 1024 * 1024 * 1024},
      {"k", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"m", 1e-3}};
  double mult = 1;
  std::string number = text;
  for (const auto& [suffix, m] : kSuffixes) {
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      number = text.substr(0, text.size() - suffix.size());
      mult = m;
      break;
    }
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != number.size() || !std::isfinite(v) || v < 0) {
    return core::invalidArgument(field + ": '" + text +
                                 "' is not a quantity (expected e.g. \"2\", \"500m\", \"4Gi\")");
  }
  return v * mult;
}

}  // namespace

core::Result<int64_t> cpuMilli(const json& q) {
  TESSERA_ASSIGN_OR_RETURN(double cores, quantity(q, "cpu"));
  return static_cast<int64_t>(std::ceil(cores * 1000 - 1e-9));
}

core::Result<int64_t> memoryMiB(const json& q) {
  TESSERA_ASSIGN_OR_RETURN(double bytes, quantity(q, "memory"));
  return static_cast<int64_t>(std::ceil(bytes / (1024.0 * 1024) - 1e-9));
}

namespace {

core::Status invalid(const std::string& field, const std::string& message) {
  return core::invalidArgument(field + ": " + message);
}

}  // namespace

// A Secret's or ConfigMap's reference ({"name", "key", "optional"}) at `field`.
core::Result<EnvRef> refOf(const json& ref, std::string resource, const std::string& field,
                           bool keyed) {
  if (!ref.is_object() || !ref.contains("name") || !ref["name"].is_string() ||
      ref["name"].get<std::string>().empty()) {
    return invalid(field + ".name", "Required value");
  }
  EnvRef r;
  r.resource = std::move(resource);
  r.name = ref["name"];
  r.field = field;
  if (keyed) {
    if (!ref.contains("key") || !ref["key"].is_string() || ref["key"].get<std::string>().empty()) {
      return invalid(field + ".key", "Required value");
    }
    r.key = ref["key"];
  }
  if (ref.contains("optional")) {
    if (!ref["optional"].is_boolean()) {
      return invalid(field + ".optional", "expected true or false");
    }
    r.optional = ref["optional"];
  }
  return r;
}

// The container's env: values into the workload's spec, references to Secrets and ConfigMaps
// (envFrom, valueFrom) into `out.env_refs` for the server to read, and the pod's own name and
// namespace (fieldRef) as values.
core::Status readEnv(const json& c, const std::string& ns, PodSubmission& out) {
  const std::string base = "spec.containers[0]";
  if (c.contains("envFrom")) {
    if (!c["envFrom"].is_array()) {
      return invalid(base + ".envFrom", "expected a list");
    }
    for (size_t i = 0; i < c["envFrom"].size(); ++i) {
      const json& e = c["envFrom"][i];
      const std::string where = base + ".envFrom[" + std::to_string(i) + "]";
      if (!e.is_object()) {
        return invalid(where, "expected an object");
      }
      const bool secret = e.contains("secretRef");
      if (secret == e.contains("configMapRef")) {
        return invalid(where, "Invalid value: exactly one of secretRef and configMapRef");
      }
      const char* field = secret ? "secretRef" : "configMapRef";
      TESSERA_ASSIGN_OR_RETURN(EnvRef ref, refOf(e[field], secret ? "secrets" : "configmaps",
                                                 where + "." + field, false));
      if (e.contains("prefix")) {
        if (!e["prefix"].is_string()) {
          return invalid(where + ".prefix", "expected a string");
        }
        ref.prefix = e["prefix"];
      }
      out.env_refs.push_back(std::move(ref));
    }
  }
  if (!c.contains("env")) {
    return core::Status::ok();
  }
  if (!c["env"].is_array()) {
    return invalid(base + ".env", "expected a list");
  }
  json env = json::object();
  for (size_t i = 0; i < c["env"].size(); ++i) {
    const json& e = c["env"][i];
    const std::string where = base + ".env[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
        e["name"].get<std::string>().empty()) {
      return invalid(where + ".name", "Required value");
    }
    const std::string name = e["name"];
    if (!e.contains("valueFrom")) {
      if (e.contains("value") && !e["value"].is_string()) {
        return invalid(where + ".value", "expected a string");
      }
      env[name] = e.value("value", "");
      continue;
    }
    const json& from = e["valueFrom"];
    const std::string fwhere = where + ".valueFrom";
    if (!from.is_object() || from.size() != 1) {
      return invalid(fwhere,
                     "Invalid value: exactly one of secretKeyRef, configMapKeyRef and "
                     "fieldRef");
    }
    if (from.contains("fieldRef")) {
      const std::string path = textOr(from["fieldRef"], "fieldPath");
      if (path == "metadata.name") {
        env[name] = out.name;
      } else if (path == "metadata.namespace") {
        env[name] = ns;
      } else {
        return invalid(fwhere + ".fieldRef.fieldPath",
                       "Unsupported value: \"" + path +
                           "\": supported values: \"metadata.name\", \"metadata.namespace\" (a "
                           "task's node and address are in TESSERA_* variables)");
      }
      continue;
    }
    const bool secret = from.contains("secretKeyRef");
    if (!secret && !from.contains("configMapKeyRef")) {
      return invalid(fwhere + "." + from.begin().key(),
                     "Forbidden: Tessera reads secretKeyRef, configMapKeyRef and fieldRef");
    }
    const char* field = secret ? "secretKeyRef" : "configMapKeyRef";
    TESSERA_ASSIGN_OR_RETURN(EnvRef ref, refOf(from[field], secret ? "secrets" : "configmaps",
                                               fwhere + "." + field, true));
    ref.env = name;
    out.env_refs.push_back(std::move(ref));
  }
  if (!env.empty()) {
    out.spec["env"] = std::move(env);
  }
  return core::Status::ok();
}

namespace {

// A secret or configMap volume's source at `where` as a Tessera volume (without its path) and
// the reference the server checks at creation.
core::Result<std::pair<json, EnvRef>> kvVolume(const json& src, bool secret, const std::string& ns,
                                               const std::string& where,
                                               std::vector<std::string>& warnings) {
  if (!src.is_object()) {
    return invalid(where, "expected an object");
  }
  const char* name_field = secret ? "secretName" : "name";
  if (!src.contains(name_field) || !src[name_field].is_string() ||
      src[name_field].get<std::string>().empty()) {
    return invalid(where + "." + name_field, "Required value");
  }
  EnvRef ref;
  ref.resource = secret ? "secrets" : "configmaps";
  ref.name = src[name_field];
  ref.field = where;
  ref.volume = true;
  json volume = {{"kv", kvPathOf(ref.resource, ns, ref.name)}};
  if (src.contains("optional")) {
    if (!src["optional"].is_boolean()) {
      return invalid(where + ".optional", "expected true or false");
    }
    ref.optional = src["optional"];
    volume["optional"] = ref.optional;
  }
  if (src.contains("defaultMode")) {
    warnings.push_back(where +
                       ".defaultMode is ignored: a volume's files are readable by the pod's "
                       "user only (0400)");
  }
  if (src.contains("items")) {
    const json& items = src["items"];
    if (!items.is_array()) {
      return invalid(where + ".items", "expected a list");
    }
    json map = json::object();
    std::set<std::string> paths;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string iwhere = where + ".items[" + std::to_string(i) + "]";
      const json& item = items[i];
      if (!item.is_object() || !item.contains("key") || !item["key"].is_string() ||
          item["key"].get<std::string>().empty()) {
        return invalid(iwhere + ".key", "Required value");
      }
      if (!item.contains("path") || !item["path"].is_string() ||
          !protocol::isVolumeFilePath(item["path"].get<std::string>())) {
        return invalid(iwhere + ".path",
                       "Invalid value: a relative path without '..' (components of A-Z, a-z, "
                       "0-9, '-', '_' and '.')");
      }
      if (!paths.insert(item["path"].get<std::string>()).second) {
        return invalid(iwhere + ".path", "Duplicate value");
      }
      if (map.contains(item["key"].get<std::string>())) {
        return invalid(iwhere + ".key",
                       "Forbidden: Tessera writes each key to one file of a volume");
      }
      if (item.contains("mode")) {
        warnings.push_back(iwhere +
                           ".mode is ignored: a volume's files are readable by the "
                           "pod's user only (0400)");
      }
      map[item["key"].get<std::string>()] = item["path"];
      ref.keys.push_back(item["key"]);
    }
    if (!map.empty()) {
      volume["items"] = std::move(map);
    }
  }
  return std::pair{std::move(volume), std::move(ref)};
}

// The pod's volumes that its container mounts, as Tessera's `volumes` (secret and configMap:
// kv volumes of the namespace's Secrets and ConfigMaps; emptyDir: a tmpfs); everything else is
// refused naming the field.
core::Status readVolumes(const json& spec, const json& c, const std::string& ns,
                         PodSubmission& out) {
  std::map<std::string, json> sources;  // By volume name: its Tessera volume, without a path.
  std::map<std::string, EnvRef> refs;
  std::map<std::string, std::string> on_disk;  // emptyDirs asked for on disk, by name: where.
  if (spec.contains("volumes")) {
    const json& volumes = spec["volumes"];
    if (!volumes.is_array()) {
      return invalid("spec.volumes", "expected a list");
    }
    for (size_t i = 0; i < volumes.size(); ++i) {
      const std::string where = "spec.volumes[" + std::to_string(i) + "]";
      const json& v = volumes[i];
      if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) {
        return invalid(where + ".name", "Required value");
      }
      const std::string name = v["name"];
      if (!validName(name)) {  // A lowercase RFC 1123 label, as a volume's name is.
        return invalid(where + ".name",
                       "Invalid value: \"" + name.substr(0, 64) + "\": a lowercase RFC 1123 label");
      }
      if (sources.contains(name)) {
        return invalid(where + ".name", "Duplicate value: \"" + name + "\"");
      }
      std::vector<std::string> kinds;
      for (const auto& [key, value] : v.items()) {
        if (key != "name") {
          kinds.push_back(key);
        }
      }
      if (kinds.size() != 1) {
        return invalid(where,
                       "Invalid value: exactly one volume source (secret, configMap or "
                       "emptyDir)");
      }
      const std::string& kind = kinds[0];
      if (kind == "secret" || kind == "configMap") {
        TESSERA_ASSIGN_OR_RETURN(
            auto made, kvVolume(v[kind], kind == "secret", ns, where + "." + kind, out.warnings));
        sources[name] = std::move(made.first);
        refs[name] = std::move(made.second);
      } else if (kind == "emptyDir") {
        const json& e = v[kind];
        if (!e.is_object()) {
          return invalid(where + ".emptyDir", "expected an object");
        }
        const std::string medium = textOr(e, "medium");
        if (medium != "" && medium != "Memory") {
          return invalid(where + ".emptyDir.medium", "Unsupported value: \"" + medium +
                                                         "\": supported values: \"\", "
                                                         "\"Memory\"");
        }
        json tmpfs = json::object();
        if (e.contains("sizeLimit")) {
          TESSERA_ASSIGN_OR_RETURN(int64_t mib, memoryMiB(e["sizeLimit"]));
          if (mib < 1) {
            return invalid(where + ".emptyDir.sizeLimit", "Invalid value: at least 1Mi");
          }
          tmpfs["sizeMiB"] = mib;
        }
        if (medium.empty()) {  // Said if it is mounted.
          on_disk[name] = where;
        }
        sources[name] = {{"tmpfs", std::move(tmpfs)}};
      } else {
        return invalid(where + "." + kind,
                       "Forbidden: Tessera mounts secret, configMap and emptyDir volumes "
                       "(no node or persistent storage)");
      }
    }
  }
  const std::string base = "spec.containers[0].volumeMounts";
  if (!c.contains("volumeMounts")) {
    return core::Status::ok();
  }
  const json& mounts = c["volumeMounts"];
  if (!mounts.is_array()) {
    return invalid(base, "expected a list");
  }
  if (!mounts.empty() && !out.spec.contains("image")) {
    return invalid(base,
                   "Forbidden: volumes are mounted in containers, and a pod without an image runs "
                   "as a process on its node (read a Secret through env or envFrom)");
  }
  json list = json::array();
  std::set<std::string> paths;
  for (size_t i = 0; i < mounts.size(); ++i) {
    const std::string where = base + "[" + std::to_string(i) + "]";
    const json& m = mounts[i];
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string()) {
      return invalid(where + ".name", "Required value");
    }
    const std::string name = m["name"];
    auto source = sources.find(name);
    if (source == sources.end()) {
      return invalid(where + ".name", "Not found: \"" + name + "\"");
    }
    std::string path = textOr(m, "mountPath");
    while (path.size() > 1 && path.back() == '/') {
      path.pop_back();
    }
    if (!protocol::isMountPath(path)) {
      return invalid(where + ".mountPath",
                     "Invalid value: an absolute path without '.' or '..' components, outside "
                     "/proc, /sys and /dev (but /dev/shm)");
    }
    if (!paths.insert(path).second) {
      return invalid(where + ".mountPath", "Invalid value: \"" + path + "\": must be unique");
    }
    for (const char* refused : {"subPath", "subPathExpr", "mountPropagation"}) {
      if (m.contains(refused)) {
        return invalid(where + "." + refused,
                       "Forbidden: Tessera mounts a whole volume at its mountPath");
      }
    }
    if (m.contains("readOnly") && !m["readOnly"].is_boolean()) {
      return invalid(where + ".readOnly", "expected true or false");
    }
    if (source->second.contains("tmpfs") && m.value("readOnly", false)) {
      return invalid(where + ".readOnly",
                     "Forbidden: an emptyDir mounted read-only would stay empty");
    }
    if (auto disk = on_disk.find(name); disk != on_disk.end()) {
      out.warnings.push_back(disk->second +
                             ".emptyDir is a tmpfs here: its files are kept in memory and count "
                             "against the pod's memory");
      on_disk.erase(disk);
    }
    json volume = source->second;
    volume["path"] = path;
    list.push_back(std::move(volume));
    if (auto ref = refs.find(name); ref != refs.end()) {
      EnvRef r = ref->second;
      if (std::none_of(out.env_refs.begin(), out.env_refs.end(),
                       [&](const EnvRef& e) { return e.volume && e.field == r.field; })) {
        out.env_refs.push_back(std::move(r));
      }
    }
  }
  if (!list.empty()) {
    out.spec["volumes"] = std::move(list);
  }
  return core::Status::ok();
}

}  // namespace

core::Result<json> objectMetadata(const json& body, std::string_view kind,
                                  std::string_view api_version, const std::string& ns) {
  if (!body.is_object()) {
    return invalid("body", "expected a " + std::string(kind) + " object");
  }
  if ((body.contains("kind") && body["kind"] != kind) ||
      (body.contains("apiVersion") && body["apiVersion"] != api_version)) {
    return invalid(
        "kind", "expected apiVersion " + std::string(api_version) + ", kind " + std::string(kind));
  }
  json metadata = body.value("metadata", json::object());
  if (!metadata.is_object()) {
    return invalid("metadata", "expected an object");
  }
  if (!metadata.contains("name") || !metadata["name"].is_string() ||
      metadata["name"].get<std::string>().empty()) {
    return invalid("metadata.name", "Required value: name or generateName is required");
  }
  if (metadata.contains("namespace") && metadata["namespace"] != ns) {
    return core::invalidArgument(
        "the namespace of the provided object does not match the namespace sent on the request");
  }
  for (const char* field : {"labels", "annotations"}) {
    if (!metadata.contains(field)) {
      continue;
    }
    if (!metadata[field].is_object()) {
      return invalid(std::string("metadata.") + field, "expected a map of strings");
    }
    for (const auto& [k, v] : metadata[field].items()) {
      if (!v.is_string()) {
        return invalid(std::string("metadata.") + field + "[" + k + "]", "expected a string");
      }
    }
  }
  return metadata;
}

core::Result<PodSubmission> workloadFromPod(const json& pod, const std::string& ns, bool strict) {
  PodSubmission out;
  TESSERA_ASSIGN_OR_RETURN(const json metadata, objectMetadata(pod, "Pod", "v1", ns));
  out.name = metadata["name"];
  const json spec = pod.value("spec", json::object());
  if (!spec.is_object()) {
    return invalid("spec", "expected an object");
  }
  // What Tessera does not do is refused, naming the field; what it may safely ignore is
  // accepted with a warning.
  static const std::set<std::string> kKnownSpec = {"containers",
                                                   "restartPolicy",
                                                   "schedulerName",
                                                   "nodeSelector",
                                                   "tolerations",
                                                   "priorityClassName",
                                                   "terminationGracePeriodSeconds",
                                                   "activeDeadlineSeconds",
                                                   "imagePullSecrets",
                                                   "serviceAccountName",
                                                   "dnsPolicy",
                                                   "securityContext",
                                                   "affinity",
                                                   "enableServiceLinks",
                                                   "automountServiceAccountToken",
                                                   "volumes"};
  static const std::set<std::string> kRefusedSpec = {
      "hostNetwork", "hostPID", "hostIPC", "initContainers", "ephemeralContainers", "nodeName"};
  for (const auto& [key, value] : spec.items()) {
    if (kRefusedSpec.contains(key)) {
      return invalid("spec." + key, "Forbidden: Tessera does not support this field");
    }
    if (!kKnownSpec.contains(key)) {
      if (strict) {
        return invalid("spec." + key, "unknown field");
      }
      out.warnings.push_back("spec." + key + " is not supported by Tessera and is ignored");
    }
  }
  for (const char* ignored : {"affinity", "tolerations", "priorityClassName"}) {
    if (spec.contains(ignored)) {
      out.warnings.push_back(std::string("spec.") + ignored +
                             " is ignored: Tessera places by its own pools, labels and queues");
    }
  }
  const json containers = spec.value("containers", json::array());
  if (!containers.is_array() || containers.empty()) {
    return invalid("spec.containers", "Required value");
  }
  if (containers.size() > 1) {
    return invalid("spec.containers",
                   "Forbidden: Tessera runs one container per pod (a task); got " +
                       std::to_string(containers.size()));
  }
  const json& c = containers[0];
  if (textOr(c, "name").empty()) {
    return invalid("spec.containers[0].name", "Required value");
  }
  static const std::set<std::string> kKnownContainer = {"name",
                                                        "image",
                                                        "command",
                                                        "args",
                                                        "env",
                                                        "envFrom",
                                                        "volumeMounts",
                                                        "resources",
                                                        "imagePullPolicy",
                                                        "workingDir",
                                                        "terminationMessagePath",
                                                        "terminationMessagePolicy",
                                                        "ports",
                                                        "securityContext"};
  for (const auto& [key, value] : c.items()) {
    if (!kKnownContainer.contains(key)) {
      if (strict) {
        return invalid("spec.containers[0]." + key, "unknown field");
      }
      out.warnings.push_back("spec.containers[0]." + key + " is not supported and is ignored");
    }
  }
  if (c.contains("securityContext") && c["securityContext"].is_object() &&
      c["securityContext"].contains("privileged") && c["securityContext"]["privileged"] == true) {
    return invalid("spec.containers[0].securityContext.privileged",
                   "Forbidden: Tessera runs no privileged containers");
  }
  json& w = out.spec = json::object();
  if (c.contains("image")) {
    if (!c["image"].is_string()) {
      return invalid("spec.containers[0].image", "expected a string");
    }
    w["image"] = c["image"];
  }
  json argv = json::array();
  for (const char* field : {"command", "args"}) {
    if (!c.contains(field)) {
      continue;
    }
    if (!c[field].is_array()) {
      return invalid(std::string("spec.containers[0].") + field, "expected a list of strings");
    }
    for (const json& a : c[field]) {
      if (!a.is_string()) {
        return invalid(std::string("spec.containers[0].") + field, "expected a list of strings");
      }
      argv.push_back(a);
    }
  }
  if (!argv.empty()) {
    w["command"] = argv;
  } else if (!w.contains("image")) {
    return invalid("spec.containers[0].command",
                   "Required value: a pod without an image needs a command");
  }
  TESSERA_RETURN_IF_ERROR(readEnv(c, ns, out));
  TESSERA_RETURN_IF_ERROR(readVolumes(spec, c, ns, out));
  // imagePullSecrets name Secrets of the namespace: the first is the workload's pullSecret (a
  // kubernetes.io/dockerconfigjson Secret's .dockerconfigjson is what it reads).
  if (spec.contains("imagePullSecrets")) {
    const json& pulls = spec["imagePullSecrets"];
    if (!pulls.is_array()) {
      return invalid("spec.imagePullSecrets", "expected a list");
    }
    for (size_t i = 0; i < pulls.size(); ++i) {
      const std::string where = "spec.imagePullSecrets[" + std::to_string(i) + "].name";
      if (!pulls[i].is_object() || !pulls[i].contains("name") || !pulls[i]["name"].is_string() ||
          pulls[i]["name"].get<std::string>().empty()) {
        return invalid(where, "Required value");
      }
      if (i == 0 && w.contains("image")) {
        w["pullSecret"] = kvPathOf("secrets", ns, pulls[i]["name"]);
      } else {
        out.warnings.push_back(where +
                               " is ignored: Tessera logs in with the first pull secret "
                               "of a pod with an image");
      }
    }
  }
  // Resources: GPUs from limits (requests alone are invalid, as in Kubernetes), CPU and memory
  // from requests (else limits).
  const json resources = c.value("resources", json::object());
  if (!resources.is_object()) {
    return invalid("spec.containers[0].resources", "expected an object");
  }
  const json limits = resources.value("limits", json::object());
  const json requests = resources.value("requests", json::object());
  if (!limits.is_object() || !requests.is_object()) {
    return invalid(
        std::string("spec.containers[0].resources.") + (limits.is_object() ? "requests" : "limits"),
        "expected a map of quantities");
  }
  const std::string rwhere = "spec.containers[0].resources";
  if (requests.contains("nvidia.com/gpu") && !limits.contains("nvidia.com/gpu")) {
    return invalid(rwhere + ".limits[nvidia.com/gpu]",
                   "Required value: GPUs are asked for in limits (requests alone are invalid)");
  }
  const json annotations = metadata.value("annotations", json::object());
  const json labels = metadata.value("labels", json::object());
  if (limits.contains("nvidia.com/gpu")) {
    const json& g = limits["nvidia.com/gpu"];
    TESSERA_ASSIGN_OR_RETURN(double n, quantity(g, rwhere + ".limits[nvidia.com/gpu]"));
    if (n != std::floor(n) || n < 0) {
      return invalid(rwhere + ".limits[nvidia.com/gpu]",
                     "Invalid value: must be a whole number of GPUs");
    }
    if (requests.contains("nvidia.com/gpu") && requests["nvidia.com/gpu"] != g) {
      TESSERA_ASSIGN_OR_RETURN(double r, quantity(requests["nvidia.com/gpu"], rwhere));
      if (r != n) {
        return invalid(rwhere + ".requests[nvidia.com/gpu]", "Invalid value: must equal the limit");
      }
    }
    if (n > 0) {
      w["gpu"] = {{"count", static_cast<int64_t>(n)}};
    }
  }
  // A MIG slice, as the device plugin's mixed strategy names it: nvidia.com/mig-<profile>: 1.
  for (const auto& [key, value] : limits.items()) {
    if (!key.starts_with("nvidia.com/mig-")) {
      continue;
    }
    const std::string where = rwhere + ".limits[" + key + "]";
    if (w.contains("gpu")) {
      return invalid(where,
                     "Forbidden: one kind of GPU request per pod (a MIG slice, whole GPUs "
                     "or a fraction)");
    }
    TESSERA_ASSIGN_OR_RETURN(double n, quantity(value, where));
    if (n != 1) {
      return invalid(where, "Invalid value: Tessera gives a pod one MIG slice; ask for 1");
    }
    w["gpu"] = {{"mig", key.substr(std::string_view("nvidia.com/mig-").size())}};
  }
  // KAI's and Run:ai's fractions: gpu-fraction (of one GPU), or gpu-memory (MiB).
  if (annotations.is_object() && annotations.contains("gpu-fraction")) {
    if (w.contains("gpu")) {
      return invalid("metadata.annotations[gpu-fraction]",
                     "Forbidden: a fraction and a whole-GPU limit together");
    }
    const json& f = annotations["gpu-fraction"];
    double v = -1;
    try {
      v = f.is_string() ? std::stod(f.get<std::string>()) : -1;
    } catch (const std::exception&) {
    }
    if (!(v > 0 && v <= 1)) {
      return invalid("metadata.annotations[gpu-fraction]",
                     "Invalid value: expected a fraction in (0, 1], e.g. \"0.5\"");
    }
    w["gpu"] = {{"milli", static_cast<int64_t>(std::llround(v * 1000))}};
    // Run:ai's dynamic fractions: a burst limit over the fraction, served by idle time only;
    // time-sliced, as a share whose limit can move must be.
    if (annotations.contains("gpu-fraction-limit")) {
      const json& l = annotations["gpu-fraction-limit"];
      double limit = -1;
      try {
        limit = l.is_string() ? std::stod(l.get<std::string>()) : -1;
      } catch (const std::exception&) {
      }
      if (!(limit >= v && limit <= 1)) {
        return invalid(
            "metadata.annotations[gpu-fraction-limit]",
            "Invalid value: expected a fraction from gpu-fraction up to 1, e.g. \"0.8\"");
      }
      w["gpu"]["milliLimit"] = static_cast<int64_t>(std::llround(limit * 1000));
      w["gpu"]["isolation"] = "none";
    }
  } else if (annotations.is_object() && annotations.contains("gpu-memory")) {
    if (w.contains("gpu")) {
      return invalid("metadata.annotations[gpu-memory]",
                     "Forbidden: a GPU memory share and a whole-GPU limit together");
    }
    int64_t mib = 0;
    try {
      mib = annotations["gpu-memory"].is_string()
                ? std::stoll(annotations["gpu-memory"].get<std::string>())
                : 0;
    } catch (const std::exception&) {
    }
    if (mib <= 0) {
      return invalid("metadata.annotations[gpu-memory]",
                     "Invalid value: expected MiB of GPU memory, e.g. \"2000\"");
    }
    w["gpu"] = {{"memoryMiB", mib}};
  }
  for (const auto& [source, name] : {std::pair{&requests, "requests"}, {&limits, "limits"}}) {
    if (source->contains("cpu") && !w.contains("cpuMilli")) {
      auto v = cpuMilli((*source)["cpu"]);
      if (!v.isOk()) {
        return invalid(rwhere + "." + name + "[cpu]", v.status().message());
      }
      w["cpuMilli"] = *v;
    }
    if (source->contains("memory") && !w.contains("memoryMiB")) {
      auto v = memoryMiB((*source)["memory"]);
      if (!v.isOk()) {
        return invalid(rwhere + "." + name + "[memory]", v.status().message());
      }
      w["memoryMiB"] = *v;
    }
  }
  // The queue: KAI's label, then Run:ai's; else the tenant's default.
  for (const char* label : {"kai.scheduler/queue", "runai/queue"}) {
    if (labels.is_object() && labels.contains(label) && labels[label].is_string()) {
      w["queue"] = labels[label];
      break;
    }
  }
  if (spec.contains("nodeSelector")) {
    if (!spec["nodeSelector"].is_object()) {
      return invalid("spec.nodeSelector", "expected a map of labels");
    }
    w["nodeSelector"] = spec["nodeSelector"];
  }
  const std::string scheduler = textOr(spec, "schedulerName", "default-scheduler");
  static const std::set<std::string> kSchedulers = {"default-scheduler", "kai-scheduler",
                                                    "runai-scheduler", "tessera"};
  if (!kSchedulers.contains(scheduler)) {
    out.warnings.push_back("spec.schedulerName '" + scheduler +
                           "' is not a scheduler here; Tessera schedules this pod");
  }
  if (spec.contains("restartPolicy") && !spec["restartPolicy"].is_string()) {
    return invalid("spec.restartPolicy", "expected a string");
  }
  const std::string restart = textOr(spec, "restartPolicy", "Always");
  if (restart == "OnFailure") {
    w["restart"] = {{"attempts", 6}, {"mode", "delay"}};
  } else if (restart == "Always") {
    out.warnings.push_back(
        "spec.restartPolicy Always: Tessera restarts a pod that fails, not one that exits 0 "
        "(a task that ends is done)");
    w["restart"] = {{"attempts", 6}, {"mode", "delay"}};
  } else if (restart != "Never") {
    return invalid("spec.restartPolicy", "Unsupported value: \"" + restart +
                                             "\": supported values: \"Always\", "
                                             "\"OnFailure\", \"Never\"");
  }
  if (spec.contains("terminationGracePeriodSeconds") &&
      spec["terminationGracePeriodSeconds"].is_number_integer()) {
    w["gracePeriod"] = std::clamp<int64_t>(spec["terminationGracePeriodSeconds"], 0, 3600);
  }
  if (spec.contains("activeDeadlineSeconds") && spec["activeDeadlineSeconds"].is_number_integer()) {
    w["maxRuntime"] = std::max<int64_t>(0, spec["activeDeadlineSeconds"]);
  }
  // What is kept of the Pod, to show it back: the spec with Kubernetes' defaults.
  json kept = spec;
  kept["restartPolicy"] = restart;
  kept["schedulerName"] = scheduler;
  if (!kept.contains("terminationGracePeriodSeconds")) {
    kept["terminationGracePeriodSeconds"] = 30;
  }
  out.kube = {{"kind", "Pod"}, {"namespace", ns}, {"spec", std::move(kept)}};
  for (const char* field : {"labels", "annotations"}) {
    if (metadata.contains(field)) {
      out.kube[field] = metadata[field];
    }
  }
  return out;
}

}  // namespace tessera::server::kube
