// Workloads as the scheduler sees them: a gang of identical tasks in a leaf queue.
#pragma once

#include <cstdint>
#include <string>

#include "core/clock.h"
#include "model/task.h"
#include "sched/queue_tree.h"

namespace tessera::sched {

using WorkloadId = uint32_t;
using TaskId = uint32_t;
inline constexpr TaskId kNoTask = UINT32_MAX;

struct WorkloadSpec {
  std::string name;
  QueueId queue = kNoQueue;  // A leaf queue.
  int tasks = 1;             // Identical tasks.
  int min_available = 1;     // Gang minimum: these many start together or none does.
  // At most this many tasks placed at once (0: all): the others wait, held, until one finishes
  // (a Kubernetes Job's parallelism below its completions). Submitted, 0 reads as `tasks`.
  int parallelism = 0;
  model::TaskRequest request;     // Per task.
  int32_t priority = 0;           // Inside the queue; higher first.
  bool preemptible = true;        // May be reclaimed or preempted.
  core::Duration max_runtime{0};  // Declared upper bound on a task's run; 0 = unknown.
  // A task saves its progress this often from its start (0: never); an eviction loses only the
  // time since its last checkpoint, which is what reclaim counts as its cost.
  core::Duration checkpoint_every{0};
};

// Whether its tasks run together, as one job with a rendezvous (MASTER_ADDR, WORLD_SIZE):
// several, all at once.
inline bool runsTogether(const WorkloadSpec& s) {
  return s.tasks > 1 && (s.parallelism == 0 || s.parallelism >= s.tasks);
}

enum class TaskState : uint8_t {
  kPending,
  kRunning,
  kTerminating,  // Evicted; holds its resources until the driver reports it stopped.
  kFinished,
};

std::string_view taskStateName(TaskState s);

}  // namespace tessera::sched
