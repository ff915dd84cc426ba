// What a GPU's free share is worth for future shares, from the cutting-stock LP.
//
// Packing fractional GPU tasks onto GPUs is bin packing with a known size distribution (the
// typical shares of the workload, as in FGD). The LP relaxation of cutting stock,
//   minimise  sum_p x_p  (GPUs used by packing pattern p)
//   s.t.      sum_p a_sp x_p >= d_s  for each share size s (d_s = its frequency),
// has dual prices y_s >= 0: how much of a GPU an item of size s is "worth" in an optimal packing.
// The value of a free share h is then the best a GPU gap of h can still hold at those prices,
//   V(h) = max { sum_s n_s y_s : sum_s n_s s <= h },
// and putting an item of size s into a gap h has reduced cost V(h) - V(h - s) - y_s >= 0: zero
// when the placement is consistent with an optimal packing, positive by the value it destroys
// (a 470 that leaves a dead 60 costs less than one that leaves 210 no typical share can fill).
// Everything is derived from the typical shares; there are no tuning constants.
//
//   ShareValues v = ShareValues::fromShares({{810, 0.3}, {470, 0.2}, ...});
//   double rc = v.reducedCost(gap, size);
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tessera::sched {

class ShareValues {
 public:
  // `shares`: distinct share sizes in milli (1..999) with their frequencies (any scale).
  static core::Result<ShareValues> fromShares(
      const std::vector<std::pair<int32_t, double>>& shares);

  // Values that make every placement cost 0 (for workloads without shares).
  ShareValues();

  double price(int32_t milli) const;  // y_s; V(s) for a size not in the LP.
  double gapValue(int32_t milli) const { return value_[clamp(milli)]; }
  double reducedCost(int32_t gap, int32_t size) const {
    return gapValue(gap) - gapValue(gap - size) - price(size);
  }
  // GPUs per unit of demand in the LP optimum: the packing density the prices support.
  double lpObjective() const { return objective_; }

 private:
  static int32_t clamp(int32_t m) { return m < 0 ? 0 : (m > 1000 ? 1000 : m); }

  std::vector<double> price_;  // By milli, -1 where the size is not in the LP.
  std::vector<double> value_;  // V(h), h = 0..1000.
  double objective_ = 0;
};

}  // namespace tessera::sched
