// Internal to libtessera-cuda.so: holds kernel launches to the process's compute share.
//
// How kernel time is measured. Each launch the limiter lets through is bracketed by two events
// recorded on its stream (default flags, so with timing; pooled per context). When the end event
// has completed, cuEventElapsedTime(start, end) is the time the GPU spent from the start of the
// launch to its end, and it is charged to the ComputeBudget. Completed brackets are collected
// before every launch, oldest first.
//
// Why the bound holds. A launch is let through only while the budget's balance, less the
// estimated time of the brackets still in flight, is positive; otherwise the launching thread
// waits for the oldest in-flight end event (polling, for at most one period: that work may wait
// on something the application does after this launch), or, with nothing in flight, sleeps until
// the balance is positive again. So at most one estimate's error is ever in flight unaccounted for,
// every bracket is eventually charged, and the measured kernel time over T is share x T plus at
// most one period's share and the work in flight: the long-run share is exact in measured time.
//
// Limits (docs/agent.md says them to users):
//  - Time is what the events measure: on a GPU time-sliced between processes, a kernel that is
//    switched out between its start and end event is also charged the other contexts' slices,
//    so under contention with long kernels a process gets less than its share, never more.
//  - Work in a stream that is being captured into a graph is neither measured nor held (events
//    cannot be queried during capture); the graph is measured when cuGraphLaunch runs it.
//  - Work submitted by calls the interposer does not wrap (copies, memsets, cuLaunchHostFunc,
//    the legacy cuLaunch/cuLaunchGrid) is not charged.
//  - A launch whose events cannot be recorded (a stream of another context, say) runs unmeasured.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/compute_budget.h"
#include "cuda/internal/interposer.h"

namespace tessera::cuda::internal {

class LaunchLimiter {
 public:
  // driver must outlive the limiter (both live as long as the process).
  LaunchLimiter(const Driver& driver, int share_percent, std::int64_t period_ns);
  LaunchLimiter(const LaunchLimiter&) = delete;
  LaunchLimiter& operator=(const LaunchLimiter&) = delete;

  // Waits until the budget lets one more launch on stream start, runs launch() (which calls the
  // real driver and returns its CUresult), and brackets it with events. Thread-safe; the wait
  // holds no lock.
  // The share from now on (a caps file the agent rewrote: a burst that starts or ends).
  void setSharePercent(int share_percent);

  template <typename Launch>
  CUresult run(CUstream stream, Launch&& launch) {
    const Bracket bracket = admit(stream);
    const CUresult result = launch();
    finish(bracket, stream, result == kCudaSuccess);
    return result;
  }

 private:
  struct Bracket {
    CUcontext context = nullptr;
    CUevent start = nullptr;  // Null: the launch is not measured.
    CUevent end = nullptr;
  };

  // Blocks until a launch may start; returns the bracket with its start event recorded.
  Bracket admit(CUstream stream);
  // Records the end event and queues the bracket (launched), or gives its events back.
  void finish(const Bracket& bracket, CUstream stream, bool launched);

  bool capturing(CUstream stream) const;
  // Charges every completed bracket at the front of in_flight_. Needs mu_.
  void collectLocked();
  // A pair of pooled events of the current context, or none. Needs mu_.
  Bracket takeEventsLocked();
  void giveBackLocked(const Bracket& bracket);
  void destroyLocked(const Bracket& bracket);
  // Waits for event to complete, for at most one period; false if it did not.
  bool waitFor(CUevent event, std::int64_t estimate_ns) const;

  const Driver& driver_;
  const std::int64_t period_ns_;
  std::mutex mu_;
  ComputeBudget budget_;                                           // Guarded by mu_.
  std::deque<Bracket> in_flight_;                                  // Guarded by mu_; oldest first.
  std::vector<std::pair<CUcontext, std::vector<CUevent>>> pools_;  // Guarded by mu_.
};

}  // namespace tessera::cuda::internal
