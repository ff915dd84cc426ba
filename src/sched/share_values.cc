#include "sched/share_values.h"

#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace tessera::sched {
namespace {

constexpr int32_t kCapacity = 1000;
constexpr int kMaxRounds = 500;
constexpr double kEps = 1e-9;

// Unbounded knapsack over capacities 0..1000: best[c] = max value with total size <= c.
// Also returns the multiplicities reaching best[kCapacity].
std::vector<double> knapsack(const std::vector<int32_t>& sizes, const std::vector<double>& values,
                             std::vector<int>* pattern) {
  std::vector<double> best(kCapacity + 1, 0.0);
  std::vector<int> choice(kCapacity + 1, -1);
  for (int32_t c = 1; c <= kCapacity; ++c) {
    best[c] = best[c - 1];
    choice[c] = -2;  // "Same as c - 1".
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] <= c && best[c - sizes[i]] + values[i] > best[c] + kEps) {
        best[c] = best[c - sizes[i]] + values[i];
        choice[c] = static_cast<int>(i);
      }
    }
  }
  if (pattern != nullptr) {
    pattern->assign(sizes.size(), 0);
    for (int32_t c = kCapacity; c > 0;) {
      if (choice[c] == -2) {
        --c;
      } else if (choice[c] >= 0) {
        ++(*pattern)[choice[c]];
        c -= sizes[choice[c]];
      } else {
        break;
      }
    }
  }
  return best;
}

}  // namespace

ShareValues::ShareValues() : price_(kCapacity + 1, -1.0), value_(kCapacity + 1, 0.0) {}

core::Result<ShareValues> ShareValues::fromShares(
    const std::vector<std::pair<int32_t, double>>& shares) {
  std::map<int32_t, double> demand;
  for (const auto& [size, freq] : shares) {
    if (size <= 0 || size >= kCapacity) {
      return core::invalidArgument("share size " + std::to_string(size) + " is outside 1..999");
    }
    if (freq > 0) {
      demand[size] += freq;
    }
  }
  ShareValues v;
  if (demand.empty()) {
    return v;
  }
  std::vector<int32_t> sizes;
  std::vector<double> d;
  for (const auto& [s, f] : demand) {
    sizes.push_back(s);
    d.push_back(f);
  }
  const int n = static_cast<int>(sizes.size());

  // The dual LP: maximise sum d_s y_s s.t. sum_s a_sp y_s <= 1 for every pattern p, y >= 0.
  // Patterns are added lazily (column generation on the primal is row generation here).
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MAX);
  glp_add_cols(lp, n);
  for (int j = 0; j < n; ++j) {
    glp_set_col_bnds(lp, j + 1, GLP_LO, 0.0, 0.0);
    glp_set_obj_coef(lp, j + 1, d[j]);
  }
  auto add_pattern = [&](const std::vector<int>& a) {
    const int row = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, row, GLP_UP, 0.0, 1.0);
    std::vector<int> idx(1);
    std::vector<double> val(1);
    for (int j = 0; j < n; ++j) {
      if (a[j] > 0) {
        idx.push_back(j + 1);
        val.push_back(a[j]);
      }
    }
    glp_set_mat_row(lp, row, static_cast<int>(idx.size()) - 1, idx.data(), val.data());
  };
  for (int j = 0; j < n; ++j) {
    std::vector<int> a(n, 0);
    a[j] = kCapacity / sizes[j];
    add_pattern(a);
  }
  glp_smcp params;
  glp_init_smcp(&params);
  params.msg_lev = GLP_MSG_OFF;
  std::vector<double> y(n, 0.0);
  bool converged = false;
  for (int round = 0; round < kMaxRounds; ++round) {
    if (glp_simplex(lp, &params) != 0 || glp_get_status(lp) != GLP_OPT) {
      glp_delete_prob(lp);
      return core::internalError("the share-packing LP did not solve");
    }
    for (int j = 0; j < n; ++j) {
      y[j] = glp_get_col_prim(lp, j + 1);
    }
    std::vector<int> pattern;
    std::vector<double> best = knapsack(sizes, y, &pattern);
    if (best[kCapacity] <= 1.0 + 1e-7) {
      converged = true;
      break;
    }
    add_pattern(pattern);
  }
  v.objective_ = glp_get_obj_val(lp);
  glp_delete_prob(lp);
  if (!converged) {
    return core::internalError("the share-packing LP did not converge");
  }
  v.value_ = knapsack(sizes, y, nullptr);
  for (int j = 0; j < n; ++j) {
    v.price_[sizes[j]] = y[j];
  }
  return v;
}

double ShareValues::price(int32_t milli) const {
  const int32_t m = clamp(milli);
  return price_[m] >= 0 ? price_[m] : value_[m];
}

}  // namespace tessera::sched
