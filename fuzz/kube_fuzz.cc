// Fuzzes the Kubernetes API's decoders (server/kube): the bytes as a protobuf body (kubectl's
// typed clients), and as JSON read as each kind a client creates (Pod, Job, Secret, ConfigMap,
// SelfSubjectAccessReview) and as a label and field selector. What is accepted must read back:
// a Pod or Job has a workload spec and a name, a Secret's or ConfigMap's KV data reads back as
// the object with the same keys. Never a crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "server/kube/access.h"
#include "server/kube/objects.h"
#include "server/kube/protobuf.h"
#include "server/kube/selector.h"

namespace kube = tessera::server::kube;
using nlohmann::json;

namespace {

void checkObject(const json& body) {
  for (bool strict : {true, false}) {
    auto pod = kube::workloadFromPod(body, "default", strict);
    if (pod.isOk()) {
      FUZZ_CHECK(!pod->name.empty());
      FUZZ_CHECK(pod->spec.is_object());
    }
    auto job = kube::workloadFromJob(body, "default", strict);
    if (job.isOk()) {
      FUZZ_CHECK(job->spec.value("tasks", 0) >= 1);
      FUZZ_CHECK(job->spec.value("minAvailable", 0) <= job->spec.value("tasks", 0));
    }
    for (std::string_view kind : {"Secret", "ConfigMap"}) {
      auto kv = kube::kvFromObject(body, kind, "default", strict, {});
      if (kv.isOk()) {
        const json back = kube::objectFromKv(kind, "t", "default", kv->name, kv->data, 1);
        // Every key it keeps comes back (the object's own entry aside).
        FUZZ_CHECK(back.value("data", json::object()).size() + 1 == kv->data.size());
        (void)back.dump(-1, ' ', false, json::error_handler_t::strict);
      }
    }
  }
  (void)kube::accessReview(body,
                           [](const std::string&, tessera::server::Capability) { return true; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto decoded = kube::decodeProtobuf(bytes);
  if (decoded.isOk()) {
    // What it decodes to is JSON a client could have sent: valid UTF-8 throughout.
    (void)decoded->dump(-1, ' ', false, json::error_handler_t::strict);
    checkObject(*decoded);
  }
  const json body = json::parse(bytes, nullptr, false);
  if (!body.is_discarded()) {
    checkObject(body);
  }
  const std::string text(bytes.substr(0, 4096));
  (void)kube::PodFilter::parse("default", text, "");
  (void)kube::PodFilter::parse("", "", text);
  return 0;
}
