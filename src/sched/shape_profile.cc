#include "sched/shape_profile.h"

#include <algorithm>
#include <cmath>

namespace tessera::sched {

namespace {
constexpr double kRebaseExponent = 64;  // 2^64: far from double's range, rebased well before.
}

ShapeProfile::ShapeProfile(Options options) : options_(options) {}

double ShapeProfile::scale(core::TimePoint t) const {
  if (options_.half_life.count() <= 0 || !based_) {
    return 1;
  }
  return std::exp2(std::chrono::duration<double>(t - base_).count() /
                   std::chrono::duration<double>(options_.half_life).count());
}

void ShapeProfile::rebase(core::TimePoint now) {
  if (!based_) {
    base_ = now;
    based_ = true;
    return;
  }
  const double s = scale(now);
  if (std::log2(s) < kRebaseExponent) {
    return;
  }
  for (auto it = weights_.begin(); it != weights_.end();) {
    it->second /= s;
    // A shape not asked for in 1,000 half-lives weighs nothing any more.
    it = it->second < 1e-300 ? weights_.erase(it) : std::next(it);
  }
  base_ = now;
}

void ShapeProfile::add(const PodShape& shape, double tasks, core::TimePoint now) {
  if (tasks <= 0) {
    return;
  }
  rebase(now);
  ++version_;
  const double w = tasks * scale(now);
  if (auto it = weights_.find(shape); it != weights_.end()) {
    it->second += w;
    return;
  }
  if (weights_.size() >= std::max<size_t>(options_.max_shapes, 1)) {
    auto least = std::min_element(weights_.begin(), weights_.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
    weights_.erase(least);
  }
  weights_.emplace(shape, w);
}

double ShapeProfile::seen(core::TimePoint now) const {
  double total = 0;
  for (const auto& [shape, w] : weights_) {
    total += w;
  }
  return total / scale(now);
}

std::vector<TypicalPod> ShapeProfile::typical(double coverage) const {
  // Frequencies do not depend on the common scale.
  return typicalPods(std::vector<std::pair<PodShape, double>>(weights_.begin(), weights_.end()),
                     coverage);
}

std::vector<ShapeProfile::Entry> ShapeProfile::entries(core::TimePoint now) const {
  const double s = scale(now);
  std::vector<Entry> out;
  out.reserve(weights_.size());
  for (const auto& [shape, w] : weights_) {
    out.push_back({shape, w / s});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Entry& a, const Entry& b) { return a.weight > b.weight; });
  return out;
}

void ShapeProfile::restore(const std::vector<Entry>& entries, core::TimePoint now) {
  weights_.clear();
  base_ = now;
  based_ = true;
  ++version_;
  std::vector<Entry> sorted = entries;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Entry& a, const Entry& b) { return a.weight > b.weight; });
  for (const Entry& e : sorted) {
    if (weights_.size() >= options_.max_shapes) {
      break;
    }
    if (e.weight > 0 && std::isfinite(e.weight)) {
      weights_[e.shape] += e.weight;
    }
  }
}

}  // namespace tessera::sched
