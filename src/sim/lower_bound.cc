#include "sim/lower_bound.h"

#include <fmt/format.h>
#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>

#include "core/rng.h"
#include "sim/openb_experiment.h"

namespace tessera::sim {
namespace {

struct NodeType {
  int64_t cpu = 0;
  int64_t mem = 0;
  int gpus = 0;
  int model = -1;  // GpuModelId value; -1 without GPUs.
  int64_t count = 0;
};

struct Shape {
  int64_t cpu = 0;
  int64_t mem = 0;
  int num_gpu = 0;
  int64_t milli = 0;  // Per GPU.
  std::vector<model::GpuModelId> models;
  int64_t count = 0;
};

// A dual-feasible function f on [0, 1] (any items of sizes summing to at most 1 have f-values
// summing to at most 1), evaluated at the rational a / b without rounding error.
struct Dff {
  enum Kind { kThreshold, kFeketeSchepers } kind;
  // kThreshold (U^eps, eps = param / 1000, 0 < eps <= 1/2): 1 above 1 - eps, 0 below eps, x
  // between. Valid: a bin holding an item above 1 - eps has less than eps left, so every other
  // item in it counts 0.
  // kFeketeSchepers (u^(k), k = param): x when (k + 1) x is integral, floor((k + 1) x) / k
  // otherwise (Fekete and Schepers, 2001).
  int64_t param = 0;

  double operator()(int64_t a, int64_t b) const {
    if (kind == kThreshold) {
      if (a * 1000 < param * b) {
        return 0;
      }
      if (a * 1000 > (1000 - param) * b) {
        return 1;
      }
      return static_cast<double>(a) / static_cast<double>(b);
    }
    const int64_t k = param;
    if (((k + 1) * a) % b == 0) {
      return static_cast<double>(a) / static_cast<double>(b);
    }
    const int64_t floor_k1x = (k + 1) * a / b;  // Integer division: the floor is intended.
    return static_cast<double>(floor_k1x) / static_cast<double>(k);
  }
};

std::vector<Dff> genericDffs() {
  std::vector<Dff> f;
  for (int64_t k = 1; k <= 4; ++k) {
    f.push_back({Dff::kFeketeSchepers, k});
  }
  for (int64_t e : {100, 150, 200, 250, 300, 350, 400, 450, 500}) {
    f.push_back({Dff::kThreshold, e});
  }
  return f;
}

bool allows(const Shape& s, const NodeType& t) {
  if (s.num_gpu > t.gpus || s.cpu > t.cpu || s.mem > t.mem) {
    return false;
  }
  return s.models.empty() || std::any_of(s.models.begin(), s.models.end(), [&](auto m) {
           return static_cast<int>(m.value()) == t.model;
         });
}

// The most pods of shape s one node of type t can hold.
int64_t perNode(const Shape& s, const NodeType& t) {
  int64_t n = INT64_MAX / 4;  // CPU-only pods: CPU and memory limit them.
  if (s.num_gpu > 0) {
    n = s.num_gpu == 1 && s.milli < 1000 ? t.gpus * (1000 / s.milli) : t.gpus / s.num_gpu;
  }
  if (s.cpu > 0) {
    n = std::min(n, t.cpu / s.cpu);
  }
  if (s.mem > 0) {
    n = std::min(n, t.mem / s.mem);
  }
  return n;
}

// The maximal patterns of `sizes` (ascending, distinct, each in (0, 1000]): the multisets
// summing to at most 1000 to which no size can be added. Every GPU's set of shares is contained
// in one. Empty when more than `kMaxPatterns` patterns or a million steps would be needed.
std::vector<std::vector<int>> maximalPatterns(const std::vector<int64_t>& sizes) {
  std::vector<std::vector<int>> out;
  if (sizes.empty()) {
    return out;
  }
  std::vector<int> counts(sizes.size(), 0);
  size_t steps = 0;
  bool overflow = false;
  std::function<void(size_t, int64_t)> go = [&](size_t i, int64_t left) {
    if (overflow || ++steps > 1000000 || out.size() > kMaxPatterns) {
      overflow = true;
      return;
    }
    if (i == sizes.size()) {
      if (left < sizes[0]) {
        out.push_back(counts);
      }
      return;
    }
    for (int64_t k = left / sizes[i]; k >= 0; --k) {
      counts[i] = static_cast<int>(k);
      go(i + 1, left - k * sizes[i]);
    }
    counts[i] = 0;
  };
  go(0, 1000);
  if (overflow) {
    out.clear();
  }
  return out;
}

}  // namespace

core::Result<AllocationBound> allocationBound(const std::vector<model::Node>& nodes,
                                              std::span<const OpenbPod> pods,
                                              const BoundOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  AllocationBound out;
  std::map<std::tuple<int64_t, int64_t, int, int>, NodeType> type_map;
  for (const model::Node& n : nodes) {
    const int gpus = static_cast<int>(n.gpus.size());
    const int model = gpus > 0 ? n.gpus[0].model.value() : -1;
    for (const model::GpuDevice& g : n.gpus) {
      if (static_cast<int>(g.model.value()) != model) {
        return core::invalidArgument("node '" + n.name +
                                     "' has GPUs of several models; the bound needs one per node");
      }
    }
    out.capacity_milli += int64_t{gpus} * 1000;
    if (gpus == 0) {
      continue;  // Holds no GPU request; CPU-only pods are left out below.
    }
    NodeType& t = type_map[{n.cpu.value(), n.memory.value(), gpus, model}];
    t = {n.cpu.value(), n.memory.value(), gpus, model, t.count + 1};
  }
  std::vector<NodeType> types;
  types.reserve(type_map.size());
  for (const auto& [key, t] : type_map) {
    types.push_back(t);
  }
  // CPU-only pods add nothing to the objective and only take capacity, so dropping them keeps
  // every bound valid (a scheduler may be assumed to reject them), unless they must be placed.
  std::map<std::tuple<int64_t, int64_t, int, int64_t, std::vector<uint16_t>>, Shape> shape_map;
  for (const OpenbPod& p : pods) {
    out.arrived_milli += p.totalGpuMilli();
    if (p.num_gpu == 0 && !options.place_cpu_only) {
      continue;
    }
    out.gpu_pods += p.num_gpu > 0 ? 1 : 0;
    std::vector<uint16_t> models;
    for (auto m : p.models) {
      models.push_back(m.value());
    }
    std::sort(models.begin(), models.end());
    Shape& s = shape_map[{p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, models}];
    if (s.count == 0) {
      s = {p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.models, 0};
    }
    ++s.count;
  }
  std::vector<Shape> shapes;
  shapes.reserve(shape_map.size());
  for (const auto& [key, s] : shape_map) {
    shapes.push_back(s);
  }
  out.shapes = shapes.size();
  out.node_types = types.size();

  // Per-GPU functions: the generic ones plus thresholds just above each sharing size and its
  // complement, so a pod of 1000 - g or more is seen to block its GPU for all but pods of g or
  // less.
  std::vector<Dff> gpu_dffs = genericDffs();
  for (const Shape& s : shapes) {
    if (s.num_gpu != 1 || s.milli >= 1000) {
      continue;
    }
    // eps = g + 1: pods of g or less count 0, pods of 1000 - g or more count 1 (and the mirror).
    for (const int64_t e : {s.milli + 1, 1000 - s.milli + 1}) {
      const bool have = std::any_of(gpu_dffs.begin(), gpu_dffs.end(), [&](const Dff& f) {
        return f.kind == Dff::kThreshold && f.param == e;
      });
      if (e <= 500 && !have) {
        gpu_dffs.push_back({Dff::kThreshold, e});
      }
    }
  }
  const std::vector<Dff> node_dffs = genericDffs();

  // Columns: x[s][t] = pods of shape s on nodes of type t, for each allowed pair.
  struct Col {
    size_t s;
    size_t t;
    double ub;
  };
  std::vector<Col> cols;
  for (size_t s = 0; s < shapes.size(); ++s) {
    for (size_t t = 0; t < types.size(); ++t) {
      if (allows(shapes[s], types[t])) {
        const int64_t cap = perNode(shapes[s], types[t]) * types[t].count;
        if (cap > 0) {
          cols.push_back({s, t, static_cast<double>(std::min(cap, shapes[s].count))});
        }
      }
    }
  }
  std::vector<std::vector<size_t>> cols_of_type(types.size());
  std::vector<std::vector<size_t>> cols_of_shape(shapes.size());
  for (size_t j = 0; j < cols.size(); ++j) {
    cols_of_type[cols[j].t].push_back(j);
    cols_of_shape[cols[j].s].push_back(j);
  }

  // Rows as sparse lists; a row is sum(coef x) <= rhs, or = rhs when `equal`.
  struct Row {
    std::vector<int> idx;  // 1-based column indices.
    std::vector<double> val;
    double rhs;
    bool equal = false;
  };
  std::vector<Row> rows;
  auto add_row = [&](const std::vector<size_t>& js, auto coef, double rhs, bool equal = false) {
    Row r{{0}, {0.0}, rhs, equal};
    for (size_t j : js) {
      const double c = coef(cols[j]);
      if (c != 0) {
        r.idx.push_back(static_cast<int>(j) + 1);
        r.val.push_back(c);
      }
    }
    if (r.idx.size() > 1) {
      rows.push_back(std::move(r));
    }
  };
  for (size_t s = 0; s < shapes.size(); ++s) {
    const bool must_place = shapes[s].num_gpu == 0;  // Present only with place_cpu_only.
    if (must_place && cols_of_shape[s].empty()) {
      out.feasible = false;  // A CPU-only pod that must be placed fits no node.
    }
    add_row(
        cols_of_shape[s], [](const Col&) { return 1.0; }, static_cast<double>(shapes[s].count),
        must_place);
  }
  for (size_t t = 0; t < types.size(); ++t) {
    const NodeType& ty = types[t];
    const auto n = static_cast<double>(ty.count);
    const std::vector<size_t>& js = cols_of_type[t];
    // Capacity sums: CPU, memory, GPU milli.
    add_row(
        js, [&](const Col& c) { return static_cast<double>(shapes[c.s].cpu); },
        n * static_cast<double>(ty.cpu));
    add_row(
        js, [&](const Col& c) { return static_cast<double>(shapes[c.s].mem); },
        n * static_cast<double>(ty.mem));
    add_row(
        js,
        [&](const Col& c) { return static_cast<double>(shapes[c.s].num_gpu * shapes[c.s].milli); },
        n * ty.gpus * 1000.0);
    // Per GPU: each GPU holds one whole-GPU pod's GPU, or sharing pods summing to <= 1000.
    for (const Dff& f : options.per_gpu ? gpu_dffs : std::vector<Dff>{}) {
      add_row(
          js,
          [&](const Col& c) {
            const Shape& s = shapes[c.s];
            return s.milli < 1000 ? f(s.milli, 1000) : static_cast<double>(s.num_gpu);
          },
          n * ty.gpus);
    }
    // Per node: CPU, memory, and the GPU count of whole-GPU pods (sharing pods left out).
    for (const Dff& f : options.per_node ? node_dffs : std::vector<Dff>{}) {
      add_row(
          js, [&](const Col& c) { return ty.cpu > 0 ? f(shapes[c.s].cpu, ty.cpu) : 0.0; }, n);
      add_row(
          js, [&](const Col& c) { return ty.mem > 0 ? f(shapes[c.s].mem, ty.mem) : 0.0; }, n);
      if (ty.gpus > 1) {
        add_row(
            js,
            [&](const Col& c) {
              const Shape& s = shapes[c.s];
              return s.milli == 1000 ? f(s.num_gpu, ty.gpus) : 0.0;
            },
            n);
      }
    }
  }
  // Column bounds and objective; pattern columns (GPUs of a type packed with a pattern) follow
  // the pod columns.
  std::vector<double> col_ub;
  std::vector<double> obj;
  for (const Col& c : cols) {
    col_ub.push_back(c.ub);
    obj.push_back(static_cast<double>(shapes[c.s].num_gpu * shapes[c.s].milli));
  }
  if (options.per_gpu && options.gpu_patterns) {
    std::vector<int64_t> sizes;
    for (const Shape& s : shapes) {
      if (s.num_gpu == 1 && s.milli < 1000) {
        sizes.push_back(s.milli);
      }
    }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    const std::vector<std::vector<int>> patterns = maximalPatterns(sizes);
    out.patterns = patterns.size();
    for (size_t t = 0; t < types.size() && !patterns.empty(); ++t) {
      const double gpus = static_cast<double>(types[t].count) * types[t].gpus;
      const int first = static_cast<int>(col_ub.size()) + 1;  // 1-based.
      for (size_t p = 0; p < patterns.size(); ++p) {
        col_ub.push_back(gpus);
        obj.push_back(0);
      }
      // Sharing pods of each size <= that size's count over the patterns' GPUs.
      for (size_t g = 0; g < sizes.size(); ++g) {
        Row r{{0}, {0.0}, 0.0};
        for (size_t j : cols_of_type[t]) {
          if (shapes[cols[j].s].num_gpu == 1 && shapes[cols[j].s].milli == sizes[g]) {
            r.idx.push_back(static_cast<int>(j) + 1);
            r.val.push_back(1);
          }
        }
        if (r.idx.size() == 1) {
          continue;
        }
        for (size_t p = 0; p < patterns.size(); ++p) {
          if (patterns[p][g] > 0) {
            r.idx.push_back(first + static_cast<int>(p));
            r.val.push_back(-patterns[p][g]);
          }
        }
        rows.push_back(std::move(r));
      }
      // Whole GPUs plus patterned GPUs <= the type's GPUs.
      Row r{{0}, {0.0}, gpus};
      for (size_t j : cols_of_type[t]) {
        if (shapes[cols[j].s].milli == 1000) {
          r.idx.push_back(static_cast<int>(j) + 1);
          r.val.push_back(shapes[cols[j].s].num_gpu);
        }
      }
      for (size_t p = 0; p < patterns.size(); ++p) {
        r.idx.push_back(first + static_cast<int>(p));
        r.val.push_back(1);
      }
      rows.push_back(std::move(r));
    }
  }
  out.rows = rows.size();
  out.columns = col_ub.size();
  if (!out.feasible) {
    out.unalloc_pct = std::nan("");
    return out;
  }
  if (cols.empty()) {
    out.unalloc_pct = 100;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MAX);
  glp_add_cols(lp, static_cast<int>(col_ub.size()));
  for (size_t j = 0; j < col_ub.size(); ++j) {
    glp_set_col_bnds(lp, static_cast<int>(j) + 1, GLP_DB, 0.0, col_ub[j]);
    glp_set_obj_coef(lp, static_cast<int>(j) + 1, obj[j]);
  }
  glp_add_rows(lp, static_cast<int>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    glp_set_row_bnds(lp, static_cast<int>(i) + 1, rows[i].equal ? GLP_FX : GLP_UP, rows[i].rhs,
                     rows[i].rhs);
    glp_set_mat_row(lp, static_cast<int>(i) + 1, static_cast<int>(rows[i].idx.size()) - 1,
                    rows[i].idx.data(), rows[i].val.data());
  }
  glp_smcp params;
  glp_init_smcp(&params);
  params.msg_lev = GLP_MSG_OFF;
  // Scaling matters (coefficients span 0.1 to 10^6); GLPK reports it unless terminal output is
  // off, which is per thread.
  const int term = glp_term_out(GLP_OFF);
  glp_scale_prob(lp, GLP_SF_AUTO);
  const int solved = glp_simplex(lp, &params);
  glp_term_out(term);
  if (solved == 0 && glp_get_status(lp) == GLP_NOFEAS) {
    glp_delete_prob(lp);
    out.feasible = false;
    out.unalloc_pct = std::nan("");
    return out;
  }
  if (solved != 0 || glp_get_status(lp) != GLP_OPT) {
    glp_delete_prob(lp);
    return core::internalError("GLPK found no optimum for the allocation bound LP");
  }
  out.lp_milli = glp_get_obj_val(lp);
  // Certify by weak duality, whatever the solver's tolerances: with row prices y (>= 0 on the
  // <= rows, any sign on the = rows), sum(rhs y) + sum_j ub_j max(0, obj_j - a_j y) bounds
  // every feasible x from above.
  std::vector<double> y(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const double dual = glp_get_row_dual(lp, static_cast<int>(i) + 1);
    y[i] = rows[i].equal ? dual : std::max(0.0, dual);
  }
  glp_delete_prob(lp);
  std::vector<double> reduced = obj;
  double bound = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    bound += rows[i].rhs * y[i];
    for (size_t k = 1; k < rows[i].idx.size(); ++k) {
      reduced[static_cast<size_t>(rows[i].idx[k]) - 1] -= rows[i].val[k] * y[i];
    }
  }
  for (size_t j = 0; j < col_ub.size(); ++j) {
    bound += col_ub[j] * std::max(0.0, reduced[j]);
  }
  out.max_alloc_milli = std::max(bound, out.lp_milli);
  out.unalloc_pct =
      std::max(0.0, 100.0 * (1.0 - out.max_alloc_milli / static_cast<double>(out.capacity_milli)));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

size_t arrivedPrefix(const std::vector<OpenbPod>& pods, int64_t total_gpus, int pct) {
  if (total_gpus <= 0) {
    return 0;
  }
  auto bin_of = [&](int64_t arrived) {
    return std::nearbyint(static_cast<double>(arrived) / static_cast<double>(total_gpus) / 10);
  };
  int64_t arrived = 0;
  size_t last_in_bin = 0;
  size_t last_in_next = 0;
  bool in_bin = false;
  for (size_t i = 0; i < pods.size(); ++i) {
    arrived += pods[i].totalGpuMilli();
    const double bin = bin_of(arrived);
    if (bin <= pct) {
      last_in_bin = i + 1;
      in_bin |= bin == pct;
    }
    if (bin <= pct + 1) {
      last_in_next = i + 1;
    }
  }
  return in_bin ? last_in_bin : last_in_next;
}

core::Result<std::string> openbBoundReport(const std::string& nodes_path,
                                           const std::vector<std::string>& pods_paths,
                                           const std::vector<uint64_t>& seeds, double tune,
                                           int pct) {
  if (seeds.empty()) {
    return core::invalidArgument("no seeds given");
  }
  if (pct < 0 || pct > kMaxArrivedBin) {
    return core::invalidArgument(
        fmt::format("arrived % {} is outside [0, {}]", pct, kMaxArrivedBin));
  }
  std::string out = fmt::format(
      "Lower bound on unallocated GPU % at arrived = {} % (LP relaxation, docs/placement.md)\n"
      "(sums%: capacity sums only; +dff%: and per-GPU dual-feasible functions; +pat%: and "
      "per-GPU patterns; bound%: all, with per-node functions; cpu%: all, with every arrived "
      "CPU-only pod placed, valid only for runs where none failed)\n"
      "{:<14} {:>5} {:>7} {:>7} {:>6} {:>5} {:>8} {:>6} {:>7} {:>9} {:>6} {:>6} {:>6} {:>7} "
      "{:>6} {:>6}\n",
      pct, "trace", "seed", "arrived", "gpupods", "shapes", "types", "patterns", "rows", "columns",
      "arrived%", "sums%", "+dff%", "+pat%", "bound%", "cpu%", "lp_s");
  for (const std::string& pods_path : pods_paths) {
    TESSERA_ASSIGN_OR_RETURN(auto exp, OpenbExperiment::load(nodes_path, pods_path));
    std::string trace = std::filesystem::path(pods_path).stem().string();
    if (trace.rfind("openb_pod_list_", 0) == 0) {
      trace = trace.substr(15);
    }
    double sum = 0;
    double cpu_sum = 0;  // NaN when some seed's CPU-only pods cannot all be placed.
    for (uint64_t seed : seeds) {
      core::Rng rng(seed);
      const std::vector<OpenbPod> tuned = exp->tunedPods(rng, tune);
      const size_t n = arrivedPrefix(tuned, exp->totalGpus(), pct);
      const std::span<const OpenbPod> arrived = std::span(tuned).first(n);
      TESSERA_ASSIGN_OR_RETURN(AllocationBound sums,
                               allocationBound(exp->nodes(), arrived, {false, false}));
      TESSERA_ASSIGN_OR_RETURN(AllocationBound dff,
                               allocationBound(exp->nodes(), arrived, {true, false, false, false}));
      TESSERA_ASSIGN_OR_RETURN(AllocationBound gpu,
                               allocationBound(exp->nodes(), arrived, {true, false}));
      TESSERA_ASSIGN_OR_RETURN(AllocationBound b, allocationBound(exp->nodes(), arrived));
      TESSERA_ASSIGN_OR_RETURN(AllocationBound cpu,
                               allocationBound(exp->nodes(), arrived, {true, true, true}));
      sum += b.unalloc_pct;
      cpu_sum += cpu.unalloc_pct;
      out += fmt::format(
          "{:<14} {:>5} {:>7} {:>7} {:>6} {:>5} {:>8} {:>6} {:>7} {:>9.2f} {:>6.2f} {:>6.2f} "
          "{:>6.2f} {:>7.2f} {:>6.2f} {:>6.2f}\n",
          trace, seed, n, b.gpu_pods, b.shapes, b.node_types, b.patterns, b.rows, b.columns,
          100.0 * static_cast<double>(b.arrived_milli) / static_cast<double>(b.capacity_milli),
          sums.unalloc_pct, dff.unalloc_pct, gpu.unalloc_pct, b.unalloc_pct, cpu.unalloc_pct,
          b.seconds);
    }
    const auto k = static_cast<double>(seeds.size());
    out += fmt::format(
        "{:<14} mean lower bound over {} seeds: {:.2f} % (with CPU-only pods placed: {:.2f} %)\n",
        trace, seeds.size(), sum / k, cpu_sum / k);
  }
  return out;
}

}  // namespace tessera::sim
