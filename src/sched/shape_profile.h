// The workload profile a live scheduler learns from what tenants submit: how often each task
// shape (CPU, per-GPU share, GPU count, accepted models) was asked for, counted per task and
// decayed with a half-life, so the typical pods (sched/frag.h) follow the mix as it changes.
//
//   ShapeProfile p({.half_life = std::chrono::hours(24), .max_shapes = 256});
//   p.add(shape, tasks, clock.now());
//   if (p.seen(clock.now()) >= 100) scheduler.setTypical(p.typical());
//
// Memory is bounded: at most `max_shapes` distinct shapes are kept; a new shape beyond that
// takes the place of the least weighty one. Only shapes and counts are kept, no tenant or
// workload: the profile is the cluster's, and showing it reveals no one's work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "core/clock.h"
#include "sched/frag.h"

namespace tessera::sched {

class ShapeProfile {
 public:
  struct Options {
    core::Duration half_life = std::chrono::hours(24);  // Zero: no decay.
    size_t max_shapes = 256;
  };
  // A shape and its weight: tasks counted, decayed to the time the entries were taken.
  struct Entry {
    PodShape shape;
    double weight = 0;
  };

  explicit ShapeProfile(Options options);

  // `tasks` tasks of `shape` were submitted at `now` (times never go back).
  void add(const PodShape& shape, double tasks, core::TimePoint now);
  // The decayed number of tasks counted, at `now`.
  double seen(core::TimePoint now) const;
  // The typical pods of the profile (FGD's rule: most weighty first until `coverage`).
  std::vector<TypicalPod> typical(double coverage = 0.95) const;
  // Every shape with its weight at `now`, weightiest first; and back (a restart). `restore`
  // replaces what the profile holds, keeping the weightiest `max_shapes` of `entries`.
  std::vector<Entry> entries(core::TimePoint now) const;
  void restore(const std::vector<Entry>& entries, core::TimePoint now);
  size_t size() const { return weights_.size(); }
  // Raised by every add and restore.
  uint64_t version() const { return version_; }

 private:
  // Weights are kept scaled by 2^((t - base_) / half_life) for the time t they were added, so
  // adding never touches the other shapes; `rebase` brings them back near 1 now and then.
  double scale(core::TimePoint t) const;
  void rebase(core::TimePoint now);

  Options options_;
  std::map<PodShape, double> weights_;
  core::TimePoint base_{};
  bool based_ = false;
  uint64_t version_ = 0;
};

}  // namespace tessera::sched
