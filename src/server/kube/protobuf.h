// Kubernetes' protobuf request bodies (docs/kubernetes.md, "Protobuf bodies"): kubectl's typed
// clients (`create secret`, `create configmap`, `create namespace`, `create job`, `auth can-i`)
// send them and have no fallback to JSON. A body is the magic "k8s\0" then a runtime.Unknown
// whose raw bytes are the object's message; it is decoded here to the JSON object a JSON client
// would have sent, for Secret, ConfigMap, Namespace, SelfSubjectAccessReview, Job and Pod, with
// the public field numbers of k8s.io/api's generated.proto. A Job's or Pod's spec is read by
// tables of the fields Tessera reads (and those it refuses by name); any other field that is set
// is refused, naming it, so nothing is dropped unseen.
//
//   auto object = kube::decodeProtobuf(body);  // {"kind": "Secret", "data": {"k": "<base64>"}}
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/status.h"

namespace tessera::server::kube {

inline constexpr std::string_view kProtobufType = "application/vnd.kubernetes.protobuf";

// An error says what is wrong and where (a truncated field, a kind not decoded here, ...).
core::Result<nlohmann::json> decodeProtobuf(std::string_view body);

}  // namespace tessera::server::kube
