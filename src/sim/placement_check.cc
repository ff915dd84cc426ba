#include "sim/placement_check.h"

#include <unordered_map>
#include <vector>

#include "core/csv.h"

namespace tessera::sim {
namespace {

struct NodeLeft {
  int64_t cpu = 0;
  int64_t mem = 0;
  std::vector<int64_t> gpu;  // Free milli per GPU.
};

}  // namespace

core::Result<PlacementCheckStats> checkPlacements(const std::string& nodes_csv,
                                                  const std::string& placements_csv) {
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable nodes, core::CsvTable::readFile(nodes_csv));
  TESSERA_ASSIGN_OR_RETURN(size_t n_sn, nodes.requireColumn("sn"));
  TESSERA_ASSIGN_OR_RETURN(size_t n_cpu, nodes.requireColumn("cpu_milli"));
  TESSERA_ASSIGN_OR_RETURN(size_t n_mem, nodes.requireColumn("memory_mib"));
  TESSERA_ASSIGN_OR_RETURN(size_t n_gpu, nodes.requireColumn("gpu"));
  std::unordered_map<std::string, NodeLeft> left;
  for (size_t r = 0; r < nodes.rowCount(); ++r) {
    NodeLeft n;
    TESSERA_ASSIGN_OR_RETURN(n.cpu, nodes.getInt(r, n_cpu, 0));
    TESSERA_ASSIGN_OR_RETURN(n.mem, nodes.getInt(r, n_mem, 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t g, nodes.getInt(r, n_gpu, 0, 1024));
    n.gpu.assign(static_cast<size_t>(g), 1000);
    left[std::string(nodes.cell(r, n_sn))] = std::move(n);
  }

  TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(placements_csv));
  size_t col[9];
  const char* names[9] = {"seq",       "pod",  "cpu_milli", "memory_mib", "num_gpu",
                          "gpu_milli", "node", "gpus",      "status"};
  for (int i = 0; i < 9; ++i) {
    TESSERA_ASSIGN_OR_RETURN(col[i], t.requireColumn(names[i]));
  }
  PlacementCheckStats stats;
  for (size_t r = 0; r < t.rowCount(); ++r) {
    const std::string status(t.cell(r, col[8]));
    if (status == "failed") {
      if (!t.cell(r, col[6]).empty() || !t.cell(r, col[7]).empty()) {
        return core::invalidArgument(t.where(r) + ": a failed pod has a node or GPUs");
      }
      ++stats.failed;
      continue;
    }
    if (status != "placed") {
      return core::invalidArgument(t.where(r) + ": status '" + status +
                                   "' is neither placed nor failed");
    }
    TESSERA_ASSIGN_OR_RETURN(int64_t cpu, t.getInt(r, col[2], 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t mem, t.getInt(r, col[3], 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t num, t.getInt(r, col[4], 0));
    TESSERA_ASSIGN_OR_RETURN(int64_t milli, t.getInt(r, col[5], 0, 1000));
    const std::string node(t.cell(r, col[6]));
    auto it = left.find(node);
    if (it == left.end()) {
      return core::invalidArgument(t.where(r) + ": node '" + node + "' is not in " + nodes_csv);
    }
    NodeLeft& n = it->second;
    n.cpu -= cpu;
    n.mem -= mem;
    if (n.cpu < 0) {
      return core::failedPrecondition(t.where(r) + ": node '" + node + "' CPU over-committed by " +
                                      std::to_string(-n.cpu) + " milli");
    }
    if (n.mem < 0) {
      return core::failedPrecondition(t.where(r) + ": node '" + node +
                                      "' memory over-committed by " + std::to_string(-n.mem) +
                                      " MiB");
    }
    std::string_view gpus = t.cell(r, col[7]);
    int64_t count = 0;
    size_t start = 0;
    while (start < gpus.size()) {
      size_t semi = gpus.find(';', start);
      if (semi == std::string_view::npos) {
        semi = gpus.size();
      }
      const std::string idx_text(gpus.substr(start, semi - start));
      size_t idx = 0;
      try {
        idx = static_cast<size_t>(std::stoul(idx_text));
      } catch (...) {
        return core::invalidArgument(t.where(r) + ": GPU index '" + idx_text + "' is not a number");
      }
      if (idx >= n.gpu.size()) {
        return core::invalidArgument(t.where(r) + ": node '" + node + "' has no GPU " + idx_text);
      }
      n.gpu[idx] -= milli;
      if (n.gpu[idx] < 0) {
        return core::failedPrecondition(t.where(r) + ": GPU " + idx_text + " of node '" + node +
                                        "' over-committed by " + std::to_string(-n.gpu[idx]) +
                                        " milli");
      }
      ++count;
      start = semi + 1;
    }
    if (count != num) {
      return core::invalidArgument(t.where(r) + ": pod asked for " + std::to_string(num) +
                                   " GPUs and got " + std::to_string(count));
    }
    ++stats.placed;
  }
  return stats;
}

}  // namespace tessera::sim
