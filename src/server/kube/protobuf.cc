#include "server/kube/protobuf.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "audit/crypto.h"
#include "core/strings.h"

namespace tessera::server::kube {

using nlohmann::json;

namespace {

constexpr std::string_view kMagic{"k8s\0", 4};

// One field of a message as the wire has it: a varint (wire type 0), or bytes (2); the fixed
// widths are read and kept as varints, since no field read here has them.
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t varint = 0;
  std::string_view bytes;
};

core::Status malformed(const std::string& where, const std::string& what) {
  return core::invalidArgument("protobuf body: " + where + ": " + what);
}

core::Result<std::vector<Field>> fieldsOf(std::string_view message, const std::string& where) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(message.data()),
                                            static_cast<int>(message.size()));
  std::vector<Field> out;
  while (static_cast<size_t>(in.CurrentPosition()) < message.size()) {
    Field f;
    const uint32_t tag = in.ReadTag();
    f.number = tag >> 3;
    f.wire = tag & 7;
    if (tag == 0 || f.number == 0) {
      return malformed(where, "a field without a number");
    }
    bool ok = true;
    switch (f.wire) {
      case 0:
        ok = in.ReadVarint64(&f.varint);
        break;
      case 1:
        ok = in.ReadLittleEndian64(&f.varint);
        break;
      case 5: {
        uint32_t v = 0;
        ok = in.ReadLittleEndian32(&v);
        f.varint = v;
        break;
      }
      case 2: {
        uint32_t len = 0;
        ok = in.ReadVarint32(&len);
        const auto at = static_cast<size_t>(in.CurrentPosition());
        ok = ok && len <= message.size() - at && in.Skip(static_cast<int>(len));
        if (ok) {
          f.bytes = message.substr(at, len);
        }
        break;
      }
      default:
        return malformed(where, "field " + std::to_string(f.number) + " has wire type " +
                                    std::to_string(f.wire) + ", which no Kubernetes field has");
    }
    if (!ok) {
      return malformed(where, "field " + std::to_string(f.number) + " is cut short");
    }
    out.push_back(f);
  }
  return out;
}

core::Result<std::string> text(const Field& f, const std::string& where) {
  if (f.wire != 2) {
    return malformed(where, "expected a string");
  }
  if (!core::isValidUtf8(f.bytes)) {
    return malformed(where, "not UTF-8");
  }
  return std::string(f.bytes);
}

// A map field's entry ({1: key, 2: value}): its key, and its value's field as sent (an empty
// string when there is none).
struct MapEntry {
  std::string key;
  Field value{.number = 2, .wire = 2};
};

core::Result<MapEntry> mapEntryOf(const Field& f, const std::string& where) {
  if (f.wire != 2) {
    return malformed(where, "expected a map entry");
  }
  TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(f.bytes, where));
  MapEntry entry;
  for (const Field& e : fields) {
    if (e.number == 1) {
      TESSERA_ASSIGN_OR_RETURN(entry.key, text(e, where + " key"));
    } else if (e.number == 2) {
      entry.value = e;
    }
  }
  return entry;
}

// A map field's entry into `out`; `bytes`: the value is bytes, kept as base64 (as JSON carries
// them).
core::Status mapEntry(const Field& f, json& out, const std::string& where, bool bytes = false) {
  TESSERA_ASSIGN_OR_RETURN(MapEntry entry, mapEntryOf(f, where));
  const std::string& key = entry.key;
  std::string value;
  if (bytes) {
    value = audit::base64Encode(entry.value.bytes);
  } else {
    TESSERA_ASSIGN_OR_RETURN(value, text(entry.value, where + "[" + key + "]"));
  }
  if (!out.is_object()) {
    out = json::object();
  }
  out[key] = value;
  return core::Status::ok();
}

// ObjectMeta: name 1, generateName 2, namespace 3, labels 11, annotations 12.
core::Result<json> metadataOf(std::string_view message) {
  TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(message, "metadata"));
  json m = json::object();
  for (const Field& f : fields) {
    const char* name = f.number == 1   ? "name"
                       : f.number == 2 ? "generateName"
                       : f.number == 3 ? "namespace"
                                       : nullptr;
    if (name != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(std::string v, text(f, std::string("metadata.") + name));
      if (!v.empty()) {  // Empty strings are sent, and mean unset.
        m[name] = v;
      }
    } else if (f.number == 11 || f.number == 12) {
      const char* field = f.number == 11 ? "labels" : "annotations";
      TESSERA_RETURN_IF_ERROR(mapEntry(f, m[field], std::string("metadata.") + field));
    }
  }
  return m;
}

// Strings of a message by field number, into `out` under the given names ("" : unset).
core::Status strings(std::string_view message, const std::string& where,
                     const std::vector<std::pair<uint32_t, const char*>>& names, json& out) {
  TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(message, where));
  out = json::object();
  for (const Field& f : fields) {
    for (const auto& [number, name] : names) {
      if (f.number == number) {
        TESSERA_ASSIGN_OR_RETURN(std::string v, text(f, where + "." + name));
        if (!v.empty()) {
          out[name] = v;
        }
      }
    }
  }
  return core::Status::ok();
}

// How a field of a message reads in JSON, for the messages of a Job or a Pod decoded by the
// tables below.
enum class Kind {
  kString,       // "" is unset, as the wire sends every string field.
  kInt,          // Kept as sent: a pointer field (backoffLimit 0) is present only when set.
  kNonZeroInt,   // A plain int field, sent even when 0: 0 is unset.
  kBool,         // false is unset (every bool read here defaults to false).
  kMessage,      // A nested object, by its table; empty is unset unless `presence`.
  kInline,       // An embedded struct whose fields JSON puts in the enclosing object.
  kMetadata,     // ObjectMeta (metadataOf).
  kStringMap,    // map<string, string>.
  kQuantity,     // resource.Quantity, a message whose field 1 is its string.
  kQuantityMap,  // map<string, Quantity>.
};

struct MessageTable;

struct FieldTable {
  uint32_t number;
  const char* name;
  Kind kind;
  const MessageTable* message = nullptr;
  bool repeated = false;
  bool presence = false;  // An empty message still says something (emptyDir: {}).
};

struct MessageTable {
  const char* name;
  std::vector<FieldTable> fields;
};

// The field numbers of k8s.io/api's generated.proto (batch/v1, core/v1) and apimachinery's
// meta/v1, for the fields a Job or Pod of Tessera's is read with (docs/kubernetes.md). A field
// not here that is set is refused, naming it: nothing is dropped unseen.
const MessageTable kLocalObjectReference{"LocalObjectReference", {{1, "name", Kind::kString}}};
const MessageTable kKeyToPath{
    "KeyToPath", {{1, "key", Kind::kString}, {2, "path", Kind::kString}, {3, "mode", Kind::kInt}}};
const MessageTable kKeySelector{"KeySelector",
                                {{1, "", Kind::kInline, &kLocalObjectReference},
                                 {2, "key", Kind::kString},
                                 {3, "optional", Kind::kBool}}};
const MessageTable kObjectFieldSelector{
    "ObjectFieldSelector", {{1, "apiVersion", Kind::kString}, {2, "fieldPath", Kind::kString}}};
const MessageTable kEnvVarSource{"EnvVarSource",
                                 {{1, "fieldRef", Kind::kMessage, &kObjectFieldSelector},
                                  {3, "configMapKeyRef", Kind::kMessage, &kKeySelector},
                                  {4, "secretKeyRef", Kind::kMessage, &kKeySelector}}};
const MessageTable kEnvVar{"EnvVar",
                           {{1, "name", Kind::kString},
                            {2, "value", Kind::kString},
                            {3, "valueFrom", Kind::kMessage, &kEnvVarSource}}};
const MessageTable kEnvSource{
    "EnvSource", {{1, "", Kind::kInline, &kLocalObjectReference}, {2, "optional", Kind::kBool}}};
const MessageTable kEnvFromSource{"EnvFromSource",
                                  {{1, "prefix", Kind::kString},
                                   {2, "configMapRef", Kind::kMessage, &kEnvSource},
                                   {3, "secretRef", Kind::kMessage, &kEnvSource}}};
const MessageTable kResourceRequirements{
    "ResourceRequirements",
    {{1, "limits", Kind::kQuantityMap}, {2, "requests", Kind::kQuantityMap}}};
const MessageTable kVolumeMount{"VolumeMount",
                                {{1, "name", Kind::kString},
                                 {2, "readOnly", Kind::kBool},
                                 {3, "mountPath", Kind::kString},
                                 {4, "subPath", Kind::kString},
                                 {5, "mountPropagation", Kind::kString},
                                 {6, "subPathExpr", Kind::kString},
                                 {7, "recursiveReadOnly", Kind::kString}}};
const MessageTable kContainerPort{"ContainerPort",
                                  {{1, "name", Kind::kString},
                                   {2, "hostPort", Kind::kNonZeroInt},
                                   {3, "containerPort", Kind::kNonZeroInt},
                                   {4, "protocol", Kind::kString},
                                   {5, "hostIP", Kind::kString}}};
const MessageTable kContainer{"Container",
                              {{1, "name", Kind::kString},
                               {2, "image", Kind::kString},
                               {3, "command", Kind::kString, nullptr, true},
                               {4, "args", Kind::kString, nullptr, true},
                               {5, "workingDir", Kind::kString},
                               {6, "ports", Kind::kMessage, &kContainerPort, true},
                               {7, "env", Kind::kMessage, &kEnvVar, true},
                               {8, "resources", Kind::kMessage, &kResourceRequirements},
                               {9, "volumeMounts", Kind::kMessage, &kVolumeMount, true},
                               {13, "terminationMessagePath", Kind::kString},
                               {14, "imagePullPolicy", Kind::kString},
                               {16, "stdin", Kind::kBool},
                               {17, "stdinOnce", Kind::kBool},
                               {18, "tty", Kind::kBool},
                               {19, "envFrom", Kind::kMessage, &kEnvFromSource, true},
                               {20, "terminationMessagePolicy", Kind::kString}}};
const MessageTable kEmptyDir{"EmptyDirVolumeSource",
                             {{1, "medium", Kind::kString}, {2, "sizeLimit", Kind::kQuantity}}};
const MessageTable kSecretVolume{"SecretVolumeSource",
                                 {{1, "secretName", Kind::kString},
                                  {2, "items", Kind::kMessage, &kKeyToPath, true},
                                  {3, "defaultMode", Kind::kInt},
                                  {4, "optional", Kind::kBool}}};
const MessageTable kConfigMapVolume{"ConfigMapVolumeSource",
                                    {{1, "", Kind::kInline, &kLocalObjectReference},
                                     {2, "items", Kind::kMessage, &kKeyToPath, true},
                                     {3, "defaultMode", Kind::kInt},
                                     {4, "optional", Kind::kBool}}};
const MessageTable kVolumeSource{
    "VolumeSource",
    {{2, "emptyDir", Kind::kMessage, &kEmptyDir, false, true},
     {6, "secret", Kind::kMessage, &kSecretVolume, false, true},
     {19, "configMap", Kind::kMessage, &kConfigMapVolume, false, true}}};
const MessageTable kVolume{"Volume",
                           {{1, "name", Kind::kString}, {2, "", Kind::kInline, &kVolumeSource}}};
const MessageTable kToleration{"Toleration",
                               {{1, "key", Kind::kString},
                                {2, "operator", Kind::kString},
                                {3, "value", Kind::kString},
                                {4, "effect", Kind::kString},
                                {5, "tolerationSeconds", Kind::kInt}}};
const MessageTable kPodSpec{
    "PodSpec",
    {{1, "volumes", Kind::kMessage, &kVolume, true},
     {2, "containers", Kind::kMessage, &kContainer, true},
     {3, "restartPolicy", Kind::kString},
     {4, "terminationGracePeriodSeconds", Kind::kInt},
     {5, "activeDeadlineSeconds", Kind::kInt},
     {6, "dnsPolicy", Kind::kString},
     {7, "nodeSelector", Kind::kStringMap},
     {8, "serviceAccountName", Kind::kString},
     // serviceAccount (9) is the deprecated alias of serviceAccountName, which clients also set.
     {10, "nodeName", Kind::kString},
     {11, "hostNetwork", Kind::kBool},
     {12, "hostPID", Kind::kBool},
     {13, "hostIPC", Kind::kBool},
     {15, "imagePullSecrets", Kind::kMessage, &kLocalObjectReference, true},
     {16, "hostname", Kind::kString},
     {17, "subdomain", Kind::kString},
     {19, "schedulerName", Kind::kString},
     {20, "initContainers", Kind::kMessage, &kContainer, true},
     {21, "automountServiceAccountToken", Kind::kBool},
     {22, "tolerations", Kind::kMessage, &kToleration, true},
     {24, "priorityClassName", Kind::kString},
     {30, "enableServiceLinks", Kind::kBool}}};
const MessageTable kPodTemplateSpec{
    "PodTemplateSpec", {{1, "metadata", Kind::kMetadata}, {2, "spec", Kind::kMessage, &kPodSpec}}};
const MessageTable kSelectorRequirement{"LabelSelectorRequirement",
                                        {{1, "key", Kind::kString},
                                         {2, "operator", Kind::kString},
                                         {3, "values", Kind::kString, nullptr, true}}};
const MessageTable kLabelSelector{
    "LabelSelector",
    {{1, "matchLabels", Kind::kStringMap},
     {2, "matchExpressions", Kind::kMessage, &kSelectorRequirement, true}}};
const MessageTable kJobSpec{"JobSpec",
                            {{1, "parallelism", Kind::kInt},
                             {2, "completions", Kind::kInt},
                             {3, "activeDeadlineSeconds", Kind::kInt},
                             {4, "selector", Kind::kMessage, &kLabelSelector},
                             {5, "manualSelector", Kind::kBool},
                             {6, "template", Kind::kMessage, &kPodTemplateSpec},
                             {7, "backoffLimit", Kind::kInt},
                             {8, "ttlSecondsAfterFinished", Kind::kInt},
                             {9, "completionMode", Kind::kString},
                             {10, "suspend", Kind::kBool},
                             {14, "podReplacementPolicy", Kind::kString}}};

// Whether a field the tables do not name holds only its zero value (the wire sends those of
// every plain field): a 0 varint or an empty string or message.
bool unset(const Field& f) { return f.wire == 2 ? f.bytes.empty() : f.varint == 0; }

core::Result<json> messageOf(std::string_view bytes, const MessageTable& table,
                             const std::string& where);

// A resource.Quantity message: its field 1, the quantity as JSON writes it ("1", "16Gi").
core::Result<std::string> quantityOf(std::string_view message, const std::string& where) {
  TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(message, where));
  std::string value;
  for (const Field& e : fields) {
    if (e.number == 1) {
      TESSERA_ASSIGN_OR_RETURN(value, text(e, where));
    }
  }
  return value;
}

// One field's value, by its table entry, into `out` (the enclosing object).
core::Status readField(const Field& f, const FieldTable& t, json& out, const std::string& where) {
  const std::string path = where.empty() ? t.name : where + "." + t.name;
  auto expect = [&](uint32_t wire) {
    return f.wire == wire ? core::Status::ok()
                          : malformed(path, "wire type " + std::to_string(f.wire) + ", expected " +
                                                std::to_string(wire));
  };
  switch (t.kind) {
    case Kind::kString: {
      TESSERA_ASSIGN_OR_RETURN(std::string v, text(f, path));
      if (t.repeated) {
        out[t.name].push_back(std::move(v));  // A list keeps its empty strings.
      } else if (!v.empty()) {
        out[t.name] = std::move(v);
      }
      return core::Status::ok();
    }
    case Kind::kInt:
    case Kind::kNonZeroInt:
      TESSERA_RETURN_IF_ERROR(expect(0));
      if (t.kind == Kind::kInt || f.varint != 0) {
        out[t.name] = static_cast<int64_t>(f.varint);  // Negative int32s are sign-extended.
      }
      return core::Status::ok();
    case Kind::kBool:
      TESSERA_RETURN_IF_ERROR(expect(0));
      if (f.varint != 0) {
        out[t.name] = true;
      }
      return core::Status::ok();
    case Kind::kMetadata: {
      TESSERA_RETURN_IF_ERROR(expect(2));
      TESSERA_ASSIGN_OR_RETURN(json m, metadataOf(f.bytes));
      if (!m.empty()) {
        out[t.name] = std::move(m);
      }
      return core::Status::ok();
    }
    case Kind::kStringMap:
      return mapEntry(f, out[t.name], path);
    case Kind::kQuantity: {
      TESSERA_RETURN_IF_ERROR(expect(2));
      TESSERA_ASSIGN_OR_RETURN(out[t.name], quantityOf(f.bytes, path));
      return core::Status::ok();
    }
    case Kind::kQuantityMap: {
      TESSERA_RETURN_IF_ERROR(expect(2));
      TESSERA_ASSIGN_OR_RETURN(MapEntry entry, mapEntryOf(f, path));  // {1: key, 2: Quantity}.
      const std::string_view quantity = entry.value.wire == 2 ? entry.value.bytes : "";
      TESSERA_ASSIGN_OR_RETURN(out[t.name][entry.key], quantityOf(quantity, path));
      return core::Status::ok();
    }
    case Kind::kMessage:
    case Kind::kInline: {
      TESSERA_RETURN_IF_ERROR(expect(2));
      const std::string at =
          t.kind == Kind::kInline ? where
          : t.repeated ? path + "[" + std::to_string(out.value(t.name, json::array()).size()) + "]"
                       : path;
      TESSERA_ASSIGN_OR_RETURN(json m, messageOf(f.bytes, *t.message, at));
      if (t.kind == Kind::kInline) {
        out.update(m);
      } else if (t.repeated) {
        out[t.name].push_back(std::move(m));
      } else if (!m.empty() || t.presence) {
        out[t.name] = std::move(m);
      }
      return core::Status::ok();
    }
  }
  return core::Status::ok();
}

core::Result<json> messageOf(std::string_view bytes, const MessageTable& table,
                             const std::string& where) {
  TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(bytes, where.empty() ? table.name : where));
  json out = json::object();
  for (const Field& f : fields) {
    const auto t = std::find_if(table.fields.begin(), table.fields.end(),
                                [&](const FieldTable& e) { return e.number == f.number; });
    if (t == table.fields.end()) {
      if (unset(f)) {
        continue;
      }
      return core::invalidArgument(
          "protobuf body: " + (where.empty() ? std::string() : where + ": ") + "field " +
          std::to_string(f.number) + " of " + table.name +
          " is not read from protobuf here; send the object as JSON (kubectl create -f with "
          "its YAML)");
    }
    TESSERA_RETURN_IF_ERROR(readField(f, *t, out, where));
  }
  return out;
}

}  // namespace

core::Result<json> decodeProtobuf(std::string_view body) {
  if (!body.starts_with(kMagic)) {
    return core::invalidArgument(
        "protobuf body: it does not start with Kubernetes' magic bytes \"k8s\\0\"");
  }
  TESSERA_ASSIGN_OR_RETURN(auto unknown, fieldsOf(body.substr(kMagic.size()), "runtime.Unknown"));
  std::string api_version;
  std::string kind;
  std::string_view raw;
  for (const Field& f : unknown) {
    if (f.number == 1) {  // TypeMeta: apiVersion 1, kind 2.
      json type;
      TESSERA_RETURN_IF_ERROR(strings(f.bytes, "typeMeta", {{1, "apiVersion"}, {2, "kind"}}, type));
      api_version = type.value("apiVersion", "");
      kind = type.value("kind", "");
    } else if (f.number == 2 && f.wire == 2) {
      raw = f.bytes;
    }
  }
  const bool job = kind == "Job" && api_version == "batch/v1";
  const bool pod = kind == "Pod" && api_version == "v1";
  if (job || pod) {  // metadata 1, spec 2, status 3 (what a client sends there is not read).
    TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(raw, kind));
    json object = {{"apiVersion", api_version}, {"kind", kind}, {"metadata", json::object()}};
    for (const Field& f : fields) {
      if (f.number == 1 && f.wire == 2) {
        TESSERA_ASSIGN_OR_RETURN(object["metadata"], metadataOf(f.bytes));
      } else if (f.number == 2 && f.wire == 2) {
        TESSERA_ASSIGN_OR_RETURN(object["spec"],
                                 messageOf(f.bytes, job ? kJobSpec : kPodSpec, "spec"));
      }
    }
    return object;
  }
  const bool core_kind = kind == "Secret" || kind == "ConfigMap" || kind == "Namespace";
  if (!(core_kind && api_version == "v1") &&
      !(kind == "SelfSubjectAccessReview" && api_version == "authorization.k8s.io/v1")) {
    return core::invalidArgument("protobuf body: Tessera reads " + api_version + " " + kind +
                                 " only as JSON (application/json)");
  }
  TESSERA_ASSIGN_OR_RETURN(auto fields, fieldsOf(raw, kind));
  json object = {{"apiVersion", api_version}, {"kind", kind}, {"metadata", json::object()}};
  for (const Field& f : fields) {
    if (f.number == 1) {
      TESSERA_ASSIGN_OR_RETURN(object["metadata"], metadataOf(f.bytes));
      continue;
    }
    if (kind == "Secret") {
      // data 2 (bytes), type 3, stringData 4, immutable 5.
      if (f.number == 2) {
        TESSERA_RETURN_IF_ERROR(mapEntry(f, object["data"], "data", true));
      } else if (f.number == 3) {
        TESSERA_ASSIGN_OR_RETURN(std::string type, text(f, "type"));
        if (!type.empty()) {
          object["type"] = type;
        }
      } else if (f.number == 4) {
        TESSERA_RETURN_IF_ERROR(mapEntry(f, object["stringData"], "stringData"));
      } else if (f.number == 5) {
        object["immutable"] = f.varint != 0;
      }
    } else if (kind == "ConfigMap") {
      // data 2, binaryData 3 (bytes), immutable 4.
      if (f.number == 2) {
        TESSERA_RETURN_IF_ERROR(mapEntry(f, object["data"], "data"));
      } else if (f.number == 3) {
        TESSERA_RETURN_IF_ERROR(mapEntry(f, object["binaryData"], "binaryData", true));
      } else if (f.number == 4) {
        object["immutable"] = f.varint != 0;
      }
    } else if (kind == "SelfSubjectAccessReview" && f.number == 2) {
      // spec: resourceAttributes 1, nonResourceAttributes 2.
      TESSERA_ASSIGN_OR_RETURN(auto spec, fieldsOf(f.bytes, "spec"));
      json& out = object["spec"] = json::object();
      for (const Field& s : spec) {
        if (s.number == 1) {
          TESSERA_RETURN_IF_ERROR(strings(s.bytes, "spec.resourceAttributes",
                                          {{1, "namespace"},
                                           {2, "verb"},
                                           {3, "group"},
                                           {4, "version"},
                                           {5, "resource"},
                                           {6, "subresource"},
                                           {7, "name"}},
                                          out["resourceAttributes"]));
        } else if (s.number == 2) {
          TESSERA_RETURN_IF_ERROR(strings(s.bytes, "spec.nonResourceAttributes",
                                          {{1, "path"}, {2, "verb"}},
                                          out["nonResourceAttributes"]));
        }
      }
    }
  }
  return object;
}

}  // namespace tessera::server::kube
