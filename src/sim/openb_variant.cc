#include "sim/openb_variant.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "model/node.h"
#include "sim/report.h"

namespace tessera::sim {
namespace {

struct Row {
  std::vector<std::string> fields;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t num_gpu = 0;
  int64_t gpu_milli = 0;  // Per GPU; 0 for CPU-only pods.
  int64_t creation = 0;

  bool cpuOnly() const { return num_gpu == 0; }
  bool sharing() const { return num_gpu == 1 && gpu_milli < 1000; }
  int64_t totalGpuMilli() const { return num_gpu * gpu_milli; }
};

struct Parsed {
  std::vector<Row> rows;
  size_t c_name = 0;
  int c_creation = -1;
  int c_spec = -1;
};

core::Result<Parsed> parse(const core::CsvTable& t);

// The kind of GPU pod a spec is drawn for: 0 for sharing pods, else the GPU count.
int64_t specKind(const Row& r) { return r.sharing() ? 0 : r.num_gpu; }

// Sets `gpu_spec` on `pct` % of `gpu` (by count) from the specs of `from`'s pods (see the header).
core::Status assignSpecs(std::vector<Row>& gpu, size_t c_spec, const core::CsvTable& from,
                         double pct, core::Rng& rng) {
  TESSERA_ASSIGN_OR_RETURN(Parsed src, parse(from));
  if (src.c_spec < 0) {
    return core::invalidArgument(from.source() + ": has no gpu_spec column to draw specs from");
  }
  std::map<int64_t, std::vector<std::string>> by_kind;
  std::vector<std::string> all;
  for (const Row& r : src.rows) {
    const std::string& s = r.fields[static_cast<size_t>(src.c_spec)];
    if (!r.cpuOnly() && !s.empty()) {
      by_kind[specKind(r)].push_back(s);
      all.push_back(s);
    }
  }
  if (all.empty() && pct > 0) {
    return core::invalidArgument(from.source() + ": no GPU pod has a gpu_spec to draw from");
  }
  std::vector<size_t> idx(gpu.size());
  std::iota(idx.begin(), idx.end(), 0);
  rng.shuffle(std::span<size_t>(idx));
  const auto want = static_cast<size_t>(std::llround(pct / 100 * static_cast<double>(gpu.size())));
  for (size_t k = 0; k < idx.size(); ++k) {
    Row& r = gpu[idx[k]];
    if (k >= want) {
      r.fields[c_spec].clear();
      continue;
    }
    auto it = by_kind.find(specKind(r));
    const std::vector<std::string>& pool = it != by_kind.end() ? it->second : all;
    r.fields[c_spec] = pool[rng.uniform(pool.size())];
  }
  return core::Status::ok();
}

core::Result<Parsed> parse(const core::CsvTable& t) {
  Parsed p;
  TESSERA_ASSIGN_OR_RETURN(p.c_name, t.requireColumn("name"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_cpu, t.requireColumn("cpu_milli"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_mem, t.requireColumn("memory_mib"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_num, t.requireColumn("num_gpu"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_milli, t.requireColumn("gpu_milli"));
  p.c_creation = t.findColumn("creation_time");
  p.c_spec = t.findColumn("gpu_spec");
  if (t.rowCount() == 0) {
    return core::invalidArgument(t.source() + ":2: no pods (only a header)");
  }
  p.rows.reserve(t.rowCount());
  for (size_t r = 0; r < t.rowCount(); ++r) {
    Row row;
    TESSERA_ASSIGN_OR_RETURN(row.cpu_milli, t.getInt(r, c_cpu, 0));
    TESSERA_ASSIGN_OR_RETURN(row.memory_mib, t.getInt(r, c_mem, 0));
    TESSERA_ASSIGN_OR_RETURN(row.num_gpu, t.getInt(r, c_num, 0, model::kMaxGpusPerNode));
    TESSERA_ASSIGN_OR_RETURN(int64_t milli, t.getInt(r, c_milli, 0, 1000));
    row.gpu_milli = row.num_gpu > 0 ? milli : 0;
    if (row.num_gpu > 0 && milli == 0) {
      return core::invalidArgument(t.where(r) + ": column 'gpu_milli' is 0 for a pod with " +
                                   std::to_string(row.num_gpu) + " GPUs");
    }
    if (row.num_gpu > 1 && milli < 1000) {
      return core::invalidArgument(
          t.where(r) + ": column 'gpu_milli' value " + std::to_string(milli) +
          " is below 1000 for a pod with num_gpu " + std::to_string(row.num_gpu));
    }
    if (p.c_creation >= 0) {
      TESSERA_ASSIGN_OR_RETURN(row.creation,
                               t.getInt(r, static_cast<size_t>(p.c_creation), INT64_MIN));
    }
    row.fields.reserve(t.header().size());
    for (size_t c = 0; c < t.header().size(); ++c) {
      row.fields.emplace_back(t.cell(r, c));
    }
    p.rows.push_back(std::move(row));
  }
  return p;
}

PodListStats statsOf(const std::vector<Row>& rows, int c_spec) {
  PodListStats s;
  for (const Row& r : rows) {
    ++s.pods;
    s.cpu_only_pods += r.cpuOnly() ? 1 : 0;
    s.share_pods += r.sharing() ? 1 : 0;
    s.whole_gpu_pods += !r.cpuOnly() && !r.sharing() ? 1 : 0;
    s.cpu_milli += r.cpu_milli;
    s.memory_mib += r.memory_mib;
    s.gpu_milli += r.totalGpuMilli();
    s.share_gpu_milli += r.sharing() ? r.gpu_milli : 0;
  }
  if (c_spec >= 0) {
    for (const Row& r : rows) {
      s.spec_pods += !r.cpuOnly() && !r.fields[static_cast<size_t>(c_spec)].empty() ? 1 : 0;
    }
  }
  return s;
}

double shareFraction(int64_t share, int64_t total) {
  return total > 0 ? static_cast<double>(share) / static_cast<double>(total) : 0.0;
}

// Replaces pods of `gpu` (at random positions) that are not of the wanted kind by pods of that
// kind drawn from `pool` until the sharing pods' fraction of GPU request crosses `target`.
void adjustShare(std::vector<Row>& gpu, const std::vector<Row>& pool, bool want_sharing,
                 double target, core::Rng& rng) {
  int64_t share = 0;
  int64_t total = 0;
  for (const Row& r : gpu) {
    share += r.sharing() ? r.gpu_milli : 0;
    total += r.totalGpuMilli();
  }
  auto reached = [&] {
    const double f = shareFraction(share, total);
    return want_sharing ? f >= target : f <= target;
  };
  std::vector<size_t> positions;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (gpu[i].sharing() != want_sharing) {
      positions.push_back(i);
    }
  }
  rng.shuffle(std::span<size_t>(positions));
  for (size_t i : positions) {
    if (reached()) {
      break;
    }
    const Row& drawn = pool[rng.uniform(pool.size())];
    share += (drawn.sharing() ? drawn.gpu_milli : 0) - (gpu[i].sharing() ? gpu[i].gpu_milli : 0);
    total += drawn.totalGpuMilli() - gpu[i].totalGpuMilli();
    gpu[i] = drawn;
  }
}

std::string csvField(const std::string& f) {
  if (f.find_first_of(",\"\r\n") == std::string::npos) {
    return f;
  }
  std::string out = "\"";
  for (char c : f) {
    out += c == '"' ? "\"\"" : std::string(1, c);
  }
  return out + "\"";
}

}  // namespace

double PodListStats::cpuOnlyPct() const {
  return pods > 0 ? 100.0 * static_cast<double>(cpu_only_pods) / static_cast<double>(pods) : 0.0;
}

double PodListStats::sharePct() const { return 100.0 * shareFraction(share_gpu_milli, gpu_milli); }

core::Result<PodListStats> podListStats(const core::CsvTable& pods) {
  TESSERA_ASSIGN_OR_RETURN(Parsed p, parse(pods));
  return statsOf(p.rows, p.c_spec);
}

core::Result<OpenbVariant> makeOpenbVariant(const core::CsvTable& base, const VariantSpec& spec) {
  if (spec.cpu_pct && !(*spec.cpu_pct >= 0 && *spec.cpu_pct < 100)) {
    return core::invalidArgument(
        fmt::format("CPU-only share {} % is outside [0, 100)", *spec.cpu_pct));
  }
  if (spec.gpushare_pct && !(*spec.gpushare_pct >= 0 && *spec.gpushare_pct <= 100)) {
    return core::invalidArgument(
        fmt::format("GPU-sharing share {} % is outside [0, 100]", *spec.gpushare_pct));
  }
  if (spec.gpuspec_pct && !(*spec.gpuspec_pct >= 0 && *spec.gpuspec_pct <= 100)) {
    return core::invalidArgument(
        fmt::format("GPU-spec share {} % is outside [0, 100]", *spec.gpuspec_pct));
  }
  if (spec.gpuspec_pct && spec.gpuspec_from == nullptr) {
    return core::invalidArgument(
        "a GPU-spec share needs a pod list with specs to draw them from (--gpuspec-from)");
  }
  TESSERA_ASSIGN_OR_RETURN(Parsed p, parse(base));
  if (spec.gpuspec_pct && p.c_spec < 0) {
    return core::invalidArgument(base.source() + ": has no gpu_spec column to set");
  }
  std::vector<Row> gpu;
  std::vector<Row> cpu;
  std::vector<Row> sharing_pool;
  std::vector<Row> whole_pool;
  for (const Row& r : p.rows) {
    (r.cpuOnly() ? cpu : gpu).push_back(r);
    if (!r.cpuOnly()) {
      (r.sharing() ? sharing_pool : whole_pool).push_back(r);
    }
  }
  core::Rng rng(spec.seed);

  if (spec.gpushare_pct) {
    const double target = *spec.gpushare_pct / 100;
    const PodListStats now = statsOf(gpu, -1);
    const bool up = shareFraction(now.share_gpu_milli, now.gpu_milli) < target;
    const std::vector<Row>& pool = up ? sharing_pool : whole_pool;
    if (pool.empty()) {
      return core::invalidArgument(fmt::format(
          "{}: has no {} GPU pods to draw from for a GPU-sharing share of {} %", base.source(),
          up ? "sharing (num_gpu 1, gpu_milli < 1000)" : "non-sharing", *spec.gpushare_pct));
    }
    adjustShare(gpu, pool, up, target, rng);
  }

  if (spec.gpuspec_pct) {
    TESSERA_RETURN_IF_ERROR(assignSpecs(gpu, static_cast<size_t>(p.c_spec), *spec.gpuspec_from,
                                        *spec.gpuspec_pct, rng));
  }

  if (spec.cpu_pct) {
    if (gpu.empty() && *spec.cpu_pct > 0) {
      return core::invalidArgument(base.source() +
                                   ": has no GPU pods, so no CPU-only share below 100 % exists");
    }
    const double p_cpu = *spec.cpu_pct / 100;
    const auto want =
        static_cast<size_t>(std::llround(p_cpu * static_cast<double>(gpu.size()) / (1 - p_cpu)));
    if (want > 0 && cpu.empty()) {
      return core::invalidArgument(base.source() +
                                   ": has no CPU-only pods (num_gpu 0) to draw from");
    }
    std::vector<Row> chosen;
    if (want <= cpu.size()) {
      // Without replacement, keeping the base order (partial Fisher-Yates over indices).
      std::vector<size_t> idx(cpu.size());
      std::iota(idx.begin(), idx.end(), 0);
      for (size_t i = 0; i < want; ++i) {
        std::swap(idx[i], idx[i + rng.uniform(idx.size() - i)]);
      }
      idx.resize(want);
      std::sort(idx.begin(), idx.end());
      for (size_t i : idx) {
        chosen.push_back(cpu[i]);
      }
    } else {
      chosen = cpu;
      while (chosen.size() < want) {
        chosen.push_back(cpu[rng.uniform(cpu.size())]);
      }
    }
    cpu = std::move(chosen);
  }

  std::vector<Row> out = std::move(gpu);
  out.insert(out.end(), cpu.begin(), cpu.end());
  if (p.c_creation >= 0) {
    std::stable_sort(out.begin(), out.end(),
                     [](const Row& a, const Row& b) { return a.creation < b.creation; });
  }
  OpenbVariant v;
  v.stats = statsOf(out, p.c_spec);
  for (size_t c = 0; c < base.header().size(); ++c) {
    v.csv += c > 0 ? "," : "";
    v.csv += csvField(base.header()[c]);
  }
  v.csv += "\n";
  const int width = std::max<int>(4, static_cast<int>(std::to_string(out.size() - 1).size()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].fields[p.c_name] = fmt::format("openb-pod-{:0{}}", i, width);
    for (size_t c = 0; c < out[i].fields.size(); ++c) {
      v.csv += c > 0 ? "," : "";
      v.csv += csvField(out[i].fields[c]);
    }
    v.csv += "\n";
  }
  return v;
}

std::string formatPodListStats(const PodListStats& s) {
  return fmt::format(
      "{} pods: {} CPU-only ({:.2f} %), {} sharing, {} whole-GPU, {} with a GPU spec; CPU {} "
      "milli, memory {} MiB, GPU {} milli ({:.2f} % by sharing pods)",
      s.pods, s.cpu_only_pods, s.cpuOnlyPct(), s.share_pods, s.whole_gpu_pods, s.spec_pods,
      s.cpu_milli, s.memory_mib, s.gpu_milli, s.sharePct());
}

core::Result<std::string> writeOpenbVariant(const std::string& base_path, VariantSpec spec,
                                            const std::string& out_path,
                                            const std::string& gpuspec_from_path) {
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable base, core::CsvTable::readFile(base_path));
  std::optional<core::CsvTable> from;
  if (!gpuspec_from_path.empty()) {
    TESSERA_ASSIGN_OR_RETURN(from, core::CsvTable::readFile(gpuspec_from_path));
    spec.gpuspec_from = &*from;
  }
  TESSERA_ASSIGN_OR_RETURN(PodListStats before, podListStats(base));
  TESSERA_ASSIGN_OR_RETURN(OpenbVariant v, makeOpenbVariant(base, spec));
  TESSERA_RETURN_IF_ERROR(writeFileAtomically(out_path, v.csv));
  return fmt::format("base    {}\nvariant {}\nWrote {}.\n", formatPodListStats(before),
                     formatPodListStats(v.stats), out_path);
}

}  // namespace tessera::sim
