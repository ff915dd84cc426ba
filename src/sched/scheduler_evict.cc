// Eviction (docs/fairness.md): which running tasks a reclaim or a preemption stops, and the rules
// that keep it from cycling.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <unordered_map>

#include "sched/fair_share.h"
#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

namespace tessera::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): exact share ratios.

struct Scheduler::Unit {
  WorkloadId workload = 0;
  std::vector<TaskId> tasks;  // Running tasks to evict.
  bool elastic = false;
  core::TimePoint started{};  // Latest start among them.
};

const Amounts& Scheduler::reclaimBasis(const Queue& q) const {
  return options_.reclaim_to == ReclaimTo::kQuota ? q.deserved : q.fair_share;
}

core::Duration Scheduler::protectedFor(TaskId t) const {
  // Doubles with every eviction the task has had: it cannot be evicted more than about
  // log2(runtime / min_runtime) times, and the work all its evictions lose is less than
  // min_runtime * 2^k <= twice its own runtime (docs/fairness.md).
  const uint32_t evictions = tasks_[t].starts > 0 ? tasks_[t].starts - 1 : 0;
  return options_.min_runtime * (int64_t{1} << std::min<uint32_t>(evictions, 30));
}

std::vector<Scheduler::Unit> Scheduler::victimUnits(WorkloadId w) const {
  const WorkloadInfo& info = workloads_[w];
  std::vector<Unit> units;
  if (!info.spec.preemptible || info.running == 0) {
    return units;
  }
  const core::TimePoint now = clock_.now();
  auto young = [&](TaskId t) { return now - tasks_[t].started < protectedFor(t); };
  std::vector<TaskId> running;
  for (TaskId t : info.tasks) {
    if (tasks_[t].state == TaskState::kRunning) {
      running.push_back(t);
    }
  }
  // Latest started first: least work lost.
  std::sort(running.begin(), running.end(), [&](TaskId a, TaskId b) {
    return tasks_[a].started != tasks_[b].started ? tasks_[a].started > tasks_[b].started : a < b;
  });
  // Elastic units from the tasks old enough to go; the rest are the gang's core, which goes
  // whole or not at all.
  const int elastic = info.running - info.spec.min_available;
  int taken = 0;
  std::vector<TaskId> core;
  for (TaskId t : running) {
    if (taken < elastic && !young(t)) {
      units.push_back({w, {t}, true, tasks_[t].started});
      ++taken;
    } else {
      core.push_back(t);
    }
  }
  if (!core.empty() && std::none_of(core.begin(), core.end(), young)) {
    units.push_back({w, core, false, tasks_[core.front()].started});
  }
  return units;
}

void Scheduler::evictFor(bool reclaim, PassResult& out, int& evictions) {
  // Blocked workloads that could evict: for reclaim those of queues below their fair share, for
  // preemption those above the lowest priority running in their queue; a bounded number per
  // queue and per pass, most deprived queue first. Only the most deprived queues are looked at.
  constexpr size_t kPerQueue = 16;
  constexpr size_t kPerPass = 16;
  std::vector<std::pair<Ratio, QueueId>> leaves;
  for (QueueId q = 0; q < tree_.size(); ++q) {
    const Queue& queue = tree_.queue(q);
    if (!queue.isLeaf() || queue_workloads_[q].empty() ||
        queue.pending[kGpuDim] + queue.pending[kCpuDim] + queue.pending[kMemoryDim] == 0) {
      continue;
    }
    const Ratio share =
        dominantShare(queue.allocated, (reclaim ? reclaimBasis(queue) : queue.fair_share));
    if (reclaim ? !lessThan(share, Ratio{1, 1}) : running_priorities_[q].empty()) {
      continue;
    }
    leaves.emplace_back(share, q);
  }
  std::stable_sort(leaves.begin(), leaves.end(),
                   [](const auto& a, const auto& b) { return lessThan(a.first, b.first); });
  std::vector<std::pair<Ratio, WorkloadId>> blocked;
  for (size_t i = 0; i < leaves.size(); ++i) {
    // Past the first kPerPass, only queues as deprived as the last one taken can still rank.
    if (blocked.size() >= kPerPass && lessThan(leaves[i - 1].first, leaves[i].first)) {
      break;
    }
    const QueueId q = leaves[i].second;
    const int32_t lowest = reclaim ? INT32_MIN : running_priorities_[q].begin()->first;
    size_t taken = 0;
    for (WorkloadId w : queue_workloads_[q]) {
      const WorkloadInfo& info = workloads_[w];
      if (!reclaim && info.spec.priority <= lowest) {
        break;  // The rest of the queue is of no higher priority.
      }
      if (info.pending > 0 && info.awaited_victims == 0 && info.terminating == 0 &&
          explain(w).reason == WaitReason::kNoCapacity) {
        blocked.emplace_back(leaves[i].first, w);
        if (++taken == kPerQueue) {
          break;
        }
      }
    }
  }
  std::stable_sort(blocked.begin(), blocked.end(), [&](const auto& a, const auto& b) {
    if (lessThan(a.first, b.first) || lessThan(b.first, a.first)) {
      return lessThan(a.first, b.first);
    }
    const WorkloadInfo& wa = workloads_[a.second];
    const WorkloadInfo& wb = workloads_[b.second];
    if (wa.spec.priority != wb.spec.priority) {
      return wa.spec.priority > wb.spec.priority;
    }
    return wa.seq < wb.seq;
  });
  if (blocked.size() > kPerPass) {
    blocked.resize(kPerPass);
  }
  // Victim units per workload, computed once per call (and again after its tasks were evicted).
  std::unordered_map<WorkloadId, std::vector<Unit>> units_of;
  auto units = [&](WorkloadId v) -> const std::vector<Unit>& {
    auto it = units_of.find(v);
    if (it == units_of.end()) {
      it = units_of.emplace(v, victimUnits(v)).first;
    }
    return it->second;
  };
  for (const auto& entry : blocked) {
    const WorkloadId w = entry.second;
    if (evictions >= options_.max_evictions_per_pass) {
      return;
    }
    WorkloadInfo& info = workloads_[w];
    const QueueId r_leaf = info.spec.queue;
    // What to make room for: the rest of the gang minimum, or for elastic tasks as many as the
    // queue's fair share has room for (all at once, so a borrower gives back in one pass).
    const Amounts one = pendingAmounts(w);
    const int core_needed = std::max(0, info.spec.min_available - info.running);
    int64_t room = info.pending;
    if (reclaim) {
      const Queue& rq = tree_.queue(r_leaf);
      for (size_t d = 0; d < one.size(); ++d) {
        if (one[d] > 0) {
          room =
              std::min(room, std::max<int64_t>(0, reclaimBasis(rq)[d] - rq.allocated[d]) / one[d]);
        }
      }
    }
    room = std::min<int64_t>(room, options_.max_evictions_per_pass + core_needed);
    const int target = static_cast<int>(std::max<int64_t>(core_needed, room));
    if (target == 0) {
      continue;
    }
    // Try the whole target first; if it cannot be made to fit, fall back to fewer tasks (never
    // fewer than the gang minimum).
    for (int needed = target; needed >= std::max(1, core_needed);
         needed = needed > std::max(1, core_needed) ? std::max(std::max(1, core_needed), needed / 2)
                                                    : 0) {
      Amounts need = one;
      for (size_t d = 0; d < need.size(); ++d) {
        need[d] *= needed;
      }
      struct Candidate {
        Unit unit;
        Ratio victim_share;  // Of the victim's ancestor where the two paths split.
        QueueId split_victim = kNoQueue;
        QueueId split_reclaimer = kNoQueue;
      };
      // Victim leaves grouped in levels of equal victim share, most over first: candidates are
      // drawn level by level, and a level is expanded into units only when reached.
      struct Source {
        Ratio victim_share;
        QueueId leaf;
        QueueId split_victim;
        QueueId split_reclaimer;
      };
      std::vector<Source> sources;
      if (reclaim) {
        // The reclaimer must stay within its fair share with the work added.
        Amounts after = tree_.queue(r_leaf).allocated;
        addTo(after, need);
        if (greaterThanOne(dominantShare(after, reclaimBasis(tree_.queue(r_leaf))))) {
          continue;
        }
        for (QueueId v = 0; v < tree_.size(); ++v) {
          if (v == r_leaf || running_priorities_[v].empty()) {
            continue;
          }
          // Where the paths split: the children of the lowest common ancestor.
          QueueId a_v = v;
          QueueId a_r = r_leaf;
          while (tree_.queue(a_v).depth > tree_.queue(a_r).depth) {
            a_v = tree_.queue(a_v).parent;
          }
          while (tree_.queue(a_r).depth > tree_.queue(a_v).depth) {
            a_r = tree_.queue(a_r).parent;
          }
          while (tree_.queue(a_v).parent != tree_.queue(a_r).parent) {
            a_v = tree_.queue(a_v).parent;
            a_r = tree_.queue(a_r).parent;
          }
          const Queue& av = tree_.queue(a_v);
          const Ratio s_v = dominantShare(av.allocated, reclaimBasis(av));
          if (!greaterThanOne(s_v)) {
            continue;  // Only queues above their fair share give back.
          }
          // The move must leave the reclaimer's side strictly below where the victim's is:
          // if it cannot for this pair of sides, none of these victims qualifies.
          const Queue& ar = tree_.queue(a_r);
          Amounts ar_after = ar.allocated;
          addTo(ar_after, need);
          if (!lessThan(dominantShare(ar_after, reclaimBasis(ar)), s_v)) {
            continue;
          }
          sources.push_back({s_v, v, a_v, a_r});
        }
        std::stable_sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) {
          return lessThan(b.victim_share, a.victim_share);
        });
      } else if (!running_priorities_[r_leaf].empty()) {
        sources.push_back({Ratio{}, r_leaf, r_leaf, r_leaf});
      }
      if (sources.empty()) {
        continue;
      }
      // Candidates in eviction order, drawn lazily from a heap: usually only a few are needed.
      auto first = [&](const Candidate& a, const Candidate& b) {
        if (lessThan(a.victim_share, b.victim_share) || lessThan(b.victim_share, a.victim_share)) {
          return lessThan(b.victim_share, a.victim_share);  // Most over first.
        }
        const int pa = workloads_[a.unit.workload].spec.priority;
        const int pb = workloads_[b.unit.workload].spec.priority;
        if (pa != pb) {
          return pa < pb;
        }
        // Victims node by node, nodes closest to empty first, so a gang that
        // needs whole nodes frees them with as few evictions as possible.
        const NodeIndex na = tasks_[a.unit.tasks.front()].assignment.placement.node;
        const NodeIndex nb = tasks_[b.unit.tasks.front()].assignment.placement.node;
        if (na != nb) {
          const int64_t fa = state_.nodeState(na).free_gpu_milli;
          const int64_t fb = state_.nodeState(nb).free_gpu_milli;
          return fa != fb ? fa > fb : na < nb;
        }
        if (a.unit.elastic != b.unit.elastic) {
          return a.unit.elastic;
        }
        if (a.unit.started != b.unit.started) {
          return a.unit.started > b.unit.started;
        }
        return a.unit.tasks.front() < b.unit.tasks.front();
      };
      auto later = [&](const Candidate& a, const Candidate& b) { return first(b, a); };
      std::vector<Candidate> candidates;
      size_t next_source = 0;
      // Refills the heap with the next level of sources; false when none is left.
      auto next_level = [&]() {
        while (candidates.empty() && next_source < sources.size()) {
          const Ratio level = sources[next_source].victim_share;
          while (next_source < sources.size() &&
                 !lessThan(sources[next_source].victim_share, level) &&
                 !lessThan(level, sources[next_source].victim_share)) {
            const Source& src = sources[next_source++];
            for (WorkloadId vw : queue_workloads_[src.leaf]) {
              if (!reclaim && (vw == w || workloads_[vw].spec.priority >= info.spec.priority)) {
                continue;
              }
              for (const Unit& u : units(vw)) {
                candidates.push_back({u, src.victim_share, src.split_victim, src.split_reclaimer});
              }
            }
          }
          std::make_heap(candidates.begin(), candidates.end(), later);
        }
        return !candidates.empty();
      };
      // Release victims one unit at a time (virtually: on the cluster state, restored below) until
      // the blocked work fits.
      std::vector<Candidate> chosen;
      std::vector<std::pair<TaskId, Assignment>> released;
      std::unordered_map<QueueId, Amounts> freed;  // Per split ancestor of the victims.
      bool fits = false;
      int chosen_tasks = 0;
      while (next_level()) {
        std::pop_heap(candidates.begin(), candidates.end(), later);
        const Candidate c = std::move(candidates.back());
        candidates.pop_back();
        // The cap stops new reclaims once reached; the first of a pass may exceed it, or a gang
        // needing more victims than the cap could never be served.
        if (evictions > 0 && evictions + chosen_tasks + static_cast<int>(c.unit.tasks.size()) >
                                 options_.max_evictions_per_pass) {
          continue;
        }
        Amounts unit_amounts = tree_.space().zeros();
        for (TaskId t : c.unit.tasks) {
          addTo(unit_amounts, taskAmounts(c.unit.workload, &tasks_[t].assignment.placement));
        }
        if (reclaim) {
          // The victim side gives back only while it is still above its fair share, and the
          // move must leave the reclaimer's side strictly below where the victim's was.
          const Queue& av = tree_.queue(c.split_victim);
          Amounts av_alloc = av.allocated;
          auto it = freed.find(c.split_victim);
          if (it != freed.end()) {
            subtractFrom(av_alloc, it->second);
          }
          if (!greaterThanOne(dominantShare(av_alloc, reclaimBasis(av)))) {
            continue;
          }
          const Queue& ar = tree_.queue(c.split_reclaimer);
          Amounts ar_after = ar.allocated;
          addTo(ar_after, need);
          if (!lessThan(dominantShare(ar_after, reclaimBasis(ar)), c.victim_share)) {
            continue;
          }
          auto [slot, inserted] = freed.emplace(c.split_victim, tree_.space().zeros());
          addTo(slot->second, unit_amounts);
        }
        chosen.push_back(c);
        chosen_tasks += static_cast<int>(c.unit.tasks.size());
        for (TaskId t : c.unit.tasks) {
          released.emplace_back(t, tasks_[t].assignment);
          placer_->release(workloads_[c.unit.workload].spec.request, tasks_[t].assignment);
        }
        // Only try placing once the cluster has at least the GPU share the work needs.
        const int64_t free_milli = 1000 * state_.totalGpus() - state_.usedGpuMilli();
        if (free_milli < need[kGpuDim]) {
          continue;
        }
        if (placeTasks(w, needed, /*trial=*/true, nullptr, nullptr)) {
          fits = true;
          break;
        }
      }
      // Restore the victims exactly where they were.
      for (auto it = released.rbegin(); it != released.rend(); ++it) {
        const model::TaskRequest& req = workloads_[tasks_[it->first].workload].spec.request;
        tasks_[it->first].assignment = placer_->applyAt(req, it->second.placement);
      }
      if (!fits) {
        continue;
      }
      // Commit: victims terminate and keep their resources until they stop.
      std::string before_after;
      if (reclaim) {
        const Queue& rq = tree_.queue(r_leaf);
        Amounts r_after = rq.allocated;
        addTo(r_after, need);
        before_after = fmt::format("{} -> {}", shareText(rq, rq.allocated),
                                   fmt::format("{}", r_after[kGpuDim]));
        for (const auto& [split, amounts] : freed) {
          const Queue& vq = tree_.queue(split);
          Amounts v_after = vq.allocated;
          subtractFrom(v_after, amounts);
          before_after += fmt::format("; {} -> {}", shareText(vq, vq.allocated), v_after[kGpuDim]);
        }
      }
      for (const Candidate& c : chosen) {
        units_of.erase(c.unit.workload);
        WorkloadInfo& victim = workloads_[c.unit.workload];
        for (TaskId t : c.unit.tasks) {
          tasks_[t].state = TaskState::kTerminating;
          tasks_[t].evicted_for = w;
          addRunning(c.unit.workload, -1);
          ++victim.terminating;
          refile(c.unit.workload);
          out.evicted.push_back(
              {t, c.unit.workload, w, reclaim,
               fmt::format("{} by '{}' (queue '{}'): {}{} (allocated/fair share, milli-GPU)",
                           reclaim ? "reclaimed" : "preempted", info.spec.name,
                           tree_.queue(r_leaf).name, c.unit.elastic ? "elastic task; " : "gang; ",
                           before_after)});
          ++evictions;
        }
      }
      info.awaited_victims += chosen_tasks;
      if (std::find(awaiting_.begin(), awaiting_.end(), w) == awaiting_.end()) {
        awaiting_.push_back(w);
      }
      info.why = {WaitReason::kWaitingForEvictions,
                  fmt::format("waiting for {} evicted task(s) to stop", chosen_tasks)};
      break;
    }
  }
}

}  // namespace tessera::sched
