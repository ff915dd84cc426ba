#include "sim/openb_trace.h"

#include <set>
#include <unordered_set>

#include "core/csv.h"
#include "core/strings.h"

namespace tessera::sim {

model::TaskRequest OpenbPod::toRequest() const {
  model::TaskRequest r;
  r.cpu = core::MilliCpu{cpu_milli};
  r.memory = core::MiB{memory_mib};
  r.gpu_count = num_gpu;
  r.gpu_milli = core::MilliGpu{num_gpu > 0 ? gpu_milli : 0};
  r.models = models;
  // Sharing pods in the trace run under GPU-share caps; whole GPUs are exclusive.
  r.isolation = r.isFractional() ? model::Isolation::kProcess : model::Isolation::kHardware;
  return r;
}

sched::PodShape OpenbPod::shape() const {
  if (num_gpu == 0) {
    return {cpu_milli, 0, 0, {}};
  }
  return {cpu_milli, gpu_milli, num_gpu, models};
}

core::Result<std::vector<model::Node>> readOpenbNodes(const std::string& path,
                                                      model::GpuCatalogue& catalogue) {
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(path));
  TESSERA_ASSIGN_OR_RETURN(size_t c_sn, t.requireColumn("sn"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_cpu, t.requireColumn("cpu_milli"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_mem, t.requireColumn("memory_mib"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_gpu, t.requireColumn("gpu"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_model, t.requireColumn("model"));
  if (t.rowCount() == 0) {
    return core::invalidArgument(path + ":2: no nodes (only a header)");
  }
  std::vector<model::Node> nodes;
  nodes.reserve(t.rowCount());
  std::unordered_set<std::string> names;
  for (size_t r = 0; r < t.rowCount(); ++r) {
    model::Node n;
    n.name = std::string(t.cell(r, c_sn));
    if (n.name.empty()) {
      return core::invalidArgument(t.where(r) + ": column 'sn' is empty");
    }
    if (!names.insert(n.name).second) {
      return core::invalidArgument(t.where(r) + ": node '" + n.name + "' appears twice");
    }
    TESSERA_ASSIGN_OR_RETURN(int64_t cpu, t.getInt(r, c_cpu, 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t mem, t.getInt(r, c_mem, 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t gpus, t.getInt(r, c_gpu, 0, model::kMaxGpusPerNode));
    n.cpu = core::MilliCpu{cpu};
    n.memory = core::MiB{mem};
    std::string_view model_name = t.cell(r, c_model);
    if (gpus > 0) {
      if (model_name.empty()) {
        return core::invalidArgument(t.where(r) + ": node '" + n.name + "' has " +
                                     std::to_string(gpus) + " GPUs but no model");
      }
      auto id = catalogue.intern(model_name);
      if (!id.isOk()) {
        return id.status().withContext(t.where(r));
      }
      n.gpus.assign(static_cast<size_t>(gpus),
                    model::GpuDevice{id.value(), catalogue.model(id.value()).memory});
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

core::Result<std::vector<OpenbPod>> readOpenbPods(const std::string& path,
                                                  const model::GpuCatalogue& catalogue,
                                                  const std::vector<model::Node>& nodes) {
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(path));
  TESSERA_ASSIGN_OR_RETURN(size_t c_name, t.requireColumn("name"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_cpu, t.requireColumn("cpu_milli"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_mem, t.requireColumn("memory_mib"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_num, t.requireColumn("num_gpu"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_milli, t.requireColumn("gpu_milli"));
  const int c_spec = t.findColumn("gpu_spec");
  if (t.rowCount() == 0) {
    return core::invalidArgument(path + ":2: no pods (only a header)");
  }
  std::set<uint16_t> node_models;
  for (const model::Node& n : nodes) {
    for (const model::GpuDevice& g : n.gpus) {
      node_models.insert(g.model.value());
    }
  }
  std::vector<OpenbPod> pods;
  pods.reserve(t.rowCount());
  for (size_t r = 0; r < t.rowCount(); ++r) {
    OpenbPod p;
    p.name = std::string(t.cell(r, c_name));
    if (p.name.empty()) {
      return core::invalidArgument(t.where(r) + ": column 'name' is empty");
    }
    TESSERA_ASSIGN_OR_RETURN(p.cpu_milli, t.getInt(r, c_cpu, 0));
    TESSERA_ASSIGN_OR_RETURN(p.memory_mib, t.getInt(r, c_mem, 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t num, t.getInt(r, c_num, 0, model::kMaxGpusPerNode));
    TESSERA_ASSIGN_OR_RETURN(int64_t milli, t.getInt(r, c_milli, 0, 1000));
    p.num_gpu = static_cast<int>(num);
    p.gpu_milli = static_cast<int32_t>(num > 0 ? milli : 0);  // CPU-only pods take no GPU share.
    if (p.num_gpu > 0 && p.gpu_milli == 0) {
      return core::invalidArgument(t.where(r) + ": pod '" + p.name + "' asks for " +
                                   std::to_string(num) + " GPUs with gpu_milli 0");
    }
    if (p.num_gpu > 1 && p.gpu_milli < 1000) {
      return core::invalidArgument(t.where(r) + ": pod '" + p.name + "' asks for " +
                                   std::to_string(num) + " GPUs of " + std::to_string(milli) +
                                   " milli; a GPU share below 1000 needs num_gpu 1");
    }
    if (c_spec >= 0 && p.num_gpu > 0) {
      for (const std::string& part : core::splitList(t.cell(r, static_cast<size_t>(c_spec)), '|')) {
        auto id = catalogue.find(part);
        if (!id || node_models.count(id->value()) == 0) {
          return core::invalidArgument(t.where(r) + ": pod '" + p.name + "' names GPU model '" +
                                       part + "' that no node has");
        }
        p.models.push_back(*id);
      }
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

}  // namespace tessera::sim
