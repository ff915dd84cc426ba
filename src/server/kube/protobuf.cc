#include "server/kube/protobuf.h"

#include <google/protobuf/io/coded_stream.h>

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

// A map field's entry ({1: key, 2: value}) into `out`; `bytes`: the value is bytes, kept as
// base64 (as JSON carries them).
core::Status mapEntry(const Field& f, json& out, const std::string& where, bool bytes = false) {
  if (f.wire != 2) {
    return malformed(where, "expected a map entry");
  }
  TESSERA_ASSIGN_OR_RETURN(auto entry, fieldsOf(f.bytes, where));
  std::string key;
  std::string value;
  for (const Field& e : entry) {
    if (e.number == 1) {
      TESSERA_ASSIGN_OR_RETURN(key, text(e, where + " key"));
    } else if (e.number == 2) {
      if (bytes) {
        value = audit::base64Encode(e.bytes);
      } else {
        TESSERA_ASSIGN_OR_RETURN(value, text(e, where + "[" + key + "]"));
      }
    }
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
