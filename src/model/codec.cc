#include "model/codec.h"

#include <algorithm>

namespace tessera::model {

core::Status parseTaskRequest(const core::JsonNode& w, const GpuCatalogue& catalogue,
                              const std::function<bool(GpuModelId)>& available, TaskRequest& r) {
  if (w.has("cpuMilli")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t cpu, w.child("cpuMilli").integer(0, INT64_MAX / 4));
    r.cpu = core::MilliCpu{cpu};
  }
  if (w.has("memoryMiB")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t mem, w.child("memoryMiB").integer(0, INT64_MAX / 4));
    r.memory = core::MiB{mem};
  }
  if (w.has("gpu")) {
    core::JsonNode g = w.child("gpu");
    TESSERA_RETURN_IF_ERROR(
        g.checkKeys({"count", "milli", "milliLimit", "memoryMiB", "mig", "models", "isolation"}));
    r.gpu_count = 1;
    if (g.has("count")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t c, g.child("count").integer(0, kMaxGpusPerNode));
      r.gpu_count = static_cast<int>(c);
    }
    r.gpu_milli = core::kWholeGpu;
    r.isolation = Isolation::kHardware;
    if (g.has("milli")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t m, g.child("milli").integer(1, 1000));
      r.gpu_milli = core::MilliGpu{m};
      if (m < 1000) {
        r.isolation = Isolation::kProcess;
      }
    }
    if (g.has("memoryMiB")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t m, g.child("memoryMiB").integer(1, INT64_MAX / 4));
      r.gpu_memory = core::MiB{m};
      if (!g.has("milli")) {
        r.gpu_milli = core::MilliGpu{999};  // Memory-sized share; compute not capped.
        r.isolation = Isolation::kProcess;
      }
    }
    if (g.has("mig")) {
      TESSERA_ASSIGN_OR_RETURN(r.mig_profile, g.child("mig").str());
      r.isolation = Isolation::kHardware;
    }
    if (g.has("models")) {
      core::JsonNode ms = g.child("models");
      if (!ms.value().is_array()) {
        return ms.error("expected an array of model names");
      }
      for (size_t i = 0; i < ms.value().size(); ++i) {
        TESSERA_ASSIGN_OR_RETURN(std::string name, ms.at(i).str());
        auto m = catalogue.find(name);
        if (!m) {
          return ms.at(i).error("unknown GPU model '" + name + "'");
        }
        if (available && !available(*m)) {
          return ms.at(i).error("no node has GPU model '" + name + "'");
        }
        r.models.push_back(*m);
      }
    }
    if (r.gpu_count == 0 && !g.has("milli") && !g.has("memoryMiB") && !g.has("mig")) {
      r.gpu_milli = core::MilliGpu{0};  // "gpu": {"count": 0} (--gpus 0): no GPU at all.
    }
    if (g.has("isolation")) {
      TESSERA_ASSIGN_OR_RETURN(std::string iso, g.child("isolation").str());
      if (iso == "hardware") {
        r.isolation = Isolation::kHardware;
      } else if (iso == "process") {
        r.isolation = Isolation::kProcess;
      } else if (iso == "none") {
        r.isolation = Isolation::kNone;
      } else {
        return g.child("isolation").error("expected hardware, process or none");
      }
    }
    if (g.has("milliLimit")) {
      // Run:ai's dynamic fractions and KAI's NvFractions: a request, and a limit above it that
      // only idle capacity serves. Here for compute: MPS fixes a client's share when it starts.
      TESSERA_ASSIGN_OR_RETURN(int64_t limit, g.child("milliLimit").integer(1, 1000));
      if (!r.isFractional() || r.isolation != Isolation::kNone) {
        return g.child("milliLimit")
            .error(
                "a burst limit is for one time-sliced share of a GPU (\"milli\" under 1000 with "
                "\"isolation\": \"none\"): an MPS client's share is fixed when it starts");
      }
      if (limit < r.gpu_milli.value()) {
        return g.child("milliLimit")
            .error("must be at least milli (" + std::to_string(r.gpu_milli.value()) + ")");
      }
      r.gpu_milli_limit = core::MilliGpu{limit};
    }
  }
  if (w.has("nodeSelector")) {
    core::JsonNode sel = w.child("nodeSelector");
    if (!sel.value().is_object() || sel.value().size() > 32) {
      return sel.error("expected an object of labels, {\"pool\": \"team-1\"} (at most 32)");
    }
    r.node_selector.clear();
    for (const auto& [key, value] : sel.value().items()) {
      if (!value.is_string()) {
        return sel.child(key.c_str()).error("expected a string");
      }
      std::string v = value.get<std::string>();
      if (core::Status st = validateLabel(key, v); !st.isOk()) {
        return sel.error(st.message());
      }
      r.node_selector.emplace_back(key, std::move(v));
    }
    std::sort(r.node_selector.begin(), r.node_selector.end());
  }
  core::Status valid = validateTaskRequest(r);
  if (!valid.isOk()) {
    return w.error(valid.message());
  }
  return core::Status::ok();
}

}  // namespace tessera::model
