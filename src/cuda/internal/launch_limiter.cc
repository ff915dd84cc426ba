#include "cuda/internal/launch_limiter.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <new>

namespace tessera::cuda::internal {
namespace {

using CtxGetCurrentFn = CUresult (*)(CUcontext*);
using EventCreateFn = CUresult (*)(CUevent*, unsigned);
using EventFn = CUresult (*)(CUevent);
using EventRecordFn = CUresult (*)(CUevent, CUstream);
using EventElapsedFn = CUresult (*)(float*, CUevent, CUevent);
using StreamIsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
using ExchangeCaptureModeFn = CUresult (*)(CUstreamCaptureMode*);

std::int64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void sleepNs(std::int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

template <typename Fn>
Fn helper(const Driver& driver, Helper h) {
  return reinterpret_cast<Fn>(driver.helper[static_cast<int>(h)]);
}

// Event queries and waits are "potentially unsafe" calls while another thread captures a graph
// in the global mode, and would invalidate that capture; in the relaxed mode this thread may
// make them. The mode is the calling thread's, so it is set around our calls and put back.
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const Driver& driver)
      : exchange_(
            helper<ExchangeCaptureModeFn>(driver, Helper::kCuThreadExchangeStreamCaptureMode)) {
    if (exchange_ != nullptr && exchange_(&mode_) != kCudaSuccess) {
      exchange_ = nullptr;
    }
  }
  ~RelaxedCaptureMode() {
    if (exchange_ != nullptr) {
      exchange_(&mode_);
    }
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  ExchangeCaptureModeFn exchange_;
  CUstreamCaptureMode mode_ = kCuStreamCaptureModeRelaxed;
};

}  // namespace

LaunchLimiter::LaunchLimiter(const Driver& driver, int share_percent, std::int64_t period_ns)
    : driver_(driver), period_ns_(period_ns), budget_(share_percent, period_ns, monotonicNs()) {}

void LaunchLimiter::setSharePercent(int share_percent) {
  const std::lock_guard<std::mutex> lock(mu_);
  budget_.setShare(share_percent, monotonicNs());
}

bool LaunchLimiter::capturing(CUstream stream) const {
  const auto is_capturing = helper<StreamIsCapturingFn>(driver_, Helper::kCuStreamIsCapturing);
  CUstreamCaptureStatus status = kCuStreamCaptureStatusNone;
  return is_capturing != nullptr && is_capturing(stream, &status) == kCudaSuccess &&
         status != kCuStreamCaptureStatusNone;
}

LaunchLimiter::Bracket LaunchLimiter::admit(CUstream stream) {
  if (capturing(stream)) {
    return {};
  }
  bool gave_up_waiting = false;
  for (;;) {
    std::unique_lock lock(mu_);
    budget_.refill(monotonicNs());
    collectLocked();
    if (budget_.mayLaunch(in_flight_.size()) || (gave_up_waiting && budget_.balanceNs() > 0)) {
      Bracket bracket = takeEventsLocked();
      lock.unlock();
      const auto record = helper<EventRecordFn>(driver_, Helper::kCuEventRecord);
      if (bracket.start != nullptr && record(bracket.start, stream) != kCudaSuccess) {
        lock.lock();
        destroyLocked(bracket);
        return {};
      }
      return bracket;
    }
    if (!in_flight_.empty() && !gave_up_waiting) {
      const CUevent oldest_end = in_flight_.front().end;
      const std::int64_t estimate_ns = budget_.estimateNs();
      lock.unlock();
      // Bounded: see waitFor. Past the bound the launch goes ahead, and is charged when measured.
      gave_up_waiting = !waitFor(oldest_end, estimate_ns);
      continue;
    }
    // Nothing in flight and the balance spent: sleep it back (at least 20 us, so that a thread
    // never spins; at most a period, so that a changed picture is seen).
    const std::int64_t wait_ns = std::clamp<std::int64_t>(budget_.waitNs(), 20'000, period_ns_);
    lock.unlock();
    sleepNs(wait_ns);
  }
}

void LaunchLimiter::finish(const Bracket& bracket, CUstream stream, bool launched) {
  if (bracket.start == nullptr) {
    return;
  }
  const auto record = helper<EventRecordFn>(driver_, Helper::kCuEventRecord);
  const bool measured = launched && record(bracket.end, stream) == kCudaSuccess;
  std::lock_guard lock(mu_);
  if (!measured) {
    giveBackLocked(bracket);
    return;
  }
  try {
    in_flight_.push_back(bracket);
  } catch (const std::bad_alloc&) {
    giveBackLocked(bracket);
  }
}

void LaunchLimiter::collectLocked() {
  if (in_flight_.empty()) {
    return;
  }
  const auto query = helper<EventFn>(driver_, Helper::kCuEventQuery);
  const auto elapsed = helper<EventElapsedFn>(driver_, Helper::kCuEventElapsedTime);
  RelaxedCaptureMode relaxed(driver_);
  while (!in_flight_.empty()) {
    const Bracket bracket = in_flight_.front();
    const CUresult done = query(bracket.end);
    if (done == kCudaErrorNotReady) {
      return;
    }
    in_flight_.pop_front();
    float ms = 0;
    if (done == kCudaSuccess && elapsed(&ms, bracket.start, bracket.end) == kCudaSuccess) {
      budget_.charge(std::llround(static_cast<double>(ms) * 1e6));
      giveBackLocked(bracket);
    } else {
      destroyLocked(bracket);  // Its context is gone, or the events are broken: drop them.
    }
  }
}

LaunchLimiter::Bracket LaunchLimiter::takeEventsLocked() {
  CUcontext context = nullptr;
  const auto get_current = helper<CtxGetCurrentFn>(driver_, Helper::kCuCtxGetCurrent);
  if (get_current(&context) != kCudaSuccess || context == nullptr) {
    return {};  // No context: the launch fails by itself; nothing to measure.
  }
  Bracket bracket{context, nullptr, nullptr};
  for (auto& [pool_context, events] : pools_) {
    if (pool_context == context && events.size() >= 2) {
      bracket.start = events.back();
      events.pop_back();
      bracket.end = events.back();
      events.pop_back();
      return bracket;
    }
  }
  const auto create = helper<EventCreateFn>(driver_, Helper::kCuEventCreate);
  if (create(&bracket.start, 0) != kCudaSuccess) {
    return {};
  }
  if (create(&bracket.end, 0) != kCudaSuccess) {
    helper<EventFn>(driver_, Helper::kCuEventDestroyV2)(bracket.start);
    return {};
  }
  return bracket;
}

void LaunchLimiter::giveBackLocked(const Bracket& bracket) {
  try {
    for (auto& [pool_context, events] : pools_) {
      if (pool_context == bracket.context) {
        events.reserve(events.size() + 2);  // Both or neither.
        events.push_back(bracket.start);
        events.push_back(bracket.end);
        return;
      }
    }
    pools_.push_back({bracket.context, {bracket.start, bracket.end}});
  } catch (const std::bad_alloc&) {
    destroyLocked(bracket);
  }
}

void LaunchLimiter::destroyLocked(const Bracket& bracket) {
  const auto destroy = helper<EventFn>(driver_, Helper::kCuEventDestroyV2);
  destroy(bracket.start);
  destroy(bracket.end);
}

bool LaunchLimiter::waitFor(CUevent event, std::int64_t estimate_ns) const {
  // Polled, not cuEventSynchronize: work queued before this launch may wait on something the
  // application does only after the launch returns (a cuStreamWaitValue32 on a flag the host
  // sets later, say), and an unbounded wait would then never end. A quarter of the estimated
  // kernel time between polls (20 us to 1 ms) keeps the lateness, and the wake-ups, small.
  const auto query = helper<EventFn>(driver_, Helper::kCuEventQuery);
  const std::int64_t step = std::clamp<std::int64_t>(estimate_ns / 4, 20'000, 1'000'000);
  const std::int64_t give_up_at = monotonicNs() + period_ns_;
  RelaxedCaptureMode relaxed(driver_);
  for (;;) {
    if (query(event) != kCudaErrorNotReady) {
      return true;  // Complete, or broken: collectLocked sorts it out either way.
    }
    if (monotonicNs() >= give_up_at) {
      return false;
    }
    sleepNs(step);
  }
}

}  // namespace tessera::cuda::internal
