// Eviction (docs/fairness.md): which running tasks a reclaim or a preemption stops, and the rules
// that keep it cheap and from cycling.
//
// For a blocked workload the search chooses target nodes one at a time: on each candidate node it
// releases eligible victims (least unsaved work first) until tasks of the workload fit there,
// drops the victims that turn out not to be needed, and takes the node whose room costs the
// least unsaved GPU-time per task. Everything is tried on the cluster state and rolled back;
// only a plan that the real placement confirms is committed.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>

#include "sched/fair_share.h"
#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

namespace tessera::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): exact share ratios.

namespace {

// Nodes whose room is evaluated exactly per round of the search, after a cheap estimate.
constexpr size_t kNodesPerRound = 8;
constexpr NodeIndex kNoNode = UINT32_MAX;
// Consolidation looks for units to move on this many nodes, those with the most free room.
constexpr size_t kConsolidationNodes = 32;

int64_t seconds(core::Duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace

struct Scheduler::Unit {
  WorkloadId workload = 0;
  std::vector<TaskId> tasks;  // Running tasks to evict.
  bool elastic = false;
  core::TimePoint started{};  // Latest start among them.
  int64_t unsaved = 0;        // Milli-GPU-seconds the eviction destroys.
  int64_t gpu_milli = 0;      // The GPUs it holds.
  // What it holds, in queue accounting: computed when first needed (Scheduler::unitAmounts),
  // as most units a search reads are judged by their GPUs alone.
  mutable Amounts amounts;
};

const Amounts& Scheduler::unitAmounts(const Unit& u) const {
  if (u.amounts.empty()) {
    u.amounts = tree_.space().zeros();
    for (TaskId t : u.tasks) {
      addTo(u.amounts, taskAmounts(u.workload, &tasks_[t].assignment.placement));
    }
  }
  return u.amounts;
}

struct Scheduler::EvictionPlan {
  struct Victim {
    Unit unit;
    QueueId split_victim = kNoQueue;  // The victim's side where the two paths split.
  };
  std::vector<Victim> victims;
  std::unordered_map<QueueId, Amounts> freed;  // Per split side of the victims.
  int victim_tasks = 0;
  int placed = 0;       // Tasks of the workload the plan makes room for.
  std::string refused;  // For reclaim: why no plan will do (WorkloadInfo::reclaim_refused).
};

const Amounts& Scheduler::reclaimBasis(const Queue& q) const {
  return options_.reclaim_to == ReclaimTo::kQuota ? q.deserved : q.fair_share;
}

core::Duration Scheduler::protectedFor(TaskId t) const {
  // Doubles with every eviction the task has had: it cannot be evicted more than about
  // log2(runtime / min_runtime) times (docs/fairness.md).
  const uint32_t evictions = tasks_[t].starts > 0 ? tasks_[t].starts - 1 : 0;
  return options_.min_runtime * (int64_t{1} << std::min<uint32_t>(evictions, 30));
}

int64_t Scheduler::unsavedOf(TaskId t, int64_t milli) const {
  const TaskInfo& task = tasks_[t];
  const WorkloadSpec& spec = workloads_[task.workload].spec;
  core::Duration ran = clock_.now() - task.started;
  if (spec.checkpoint_every.count() > 0) {
    ran %= spec.checkpoint_every;
  }
  if (milli <= 0) {
    milli = 1000;  // A task without GPUs counts as one: a long CPU job is no free victim.
  }
  return milli * std::max<int64_t>(0, seconds(ran));
}

Amounts Scheduler::settled(QueueId q) const {
  Amounts a = tree_.queue(q).allocated;
  addTo(a, moving_[q]);
  return a;
}

void Scheduler::addMoving(QueueId leaf, const Amounts& a, int sign) {
  for (QueueId p = leaf; p != kNoQueue; p = tree_.queue(p).parent) {
    for (size_t d = 0; d < a.size(); ++d) {
      moving_[p][d] += sign * a[d];
    }
  }
}

void Scheduler::endHold(WorkloadId w) {
  WorkloadInfo& info = workloads_[w];
  if (std::any_of(info.promised.begin(), info.promised.end(), [](int64_t v) { return v != 0; })) {
    addMoving(info.spec.queue, info.promised, -1);
    info.promised = tree_.space().zeros();
  }
  for (const auto& [victim, a] : info.held) {
    placer_->release(workloads_[victim].spec.request, a);
    released_nodes_.push_back(a.placement.node);  // Verdicts are tested there again.
    reindexDrain(a.placement.node);
  }
  info.held.clear();
}

std::vector<Scheduler::Unit> Scheduler::victimUnits(WorkloadId w, int64_t bound,
                                                    core::TimePoint* quiet_until) const {
  const WorkloadInfo& info = workloads_[w];
  std::vector<Unit> units;
  core::TimePoint quiet = core::TimePoint::max();
  if (quiet_until != nullptr) {
    *quiet_until = quiet;
  }
  if (!info.spec.preemptible || info.running == 0) {
    return units;
  }
  const core::TimePoint now = clock_.now();
  auto young = [&](TaskId t) { return now - tasks_[t].started < protectedFor(t); };
  // The GPUs a running task holds, in milli-GPU: from the request, or for a MIG slice from the
  // profile on its GPU.
  const model::TaskRequest& req = info.spec.request;
  auto milli_of = [&](TaskId t) {
    return req.isMig() ? taskAmounts(w, &tasks_[t].assignment.placement)[kGpuDim]
                       : int64_t{req.gpu_count} * req.gpu_milli.value();
  };
  // Least unsaved work first. Scratch space kept between calls: this runs for every running
  // workload a reclaim reads.
  std::vector<std::pair<int64_t, TaskId>>& order = victim_order_;
  order.clear();
  // The answer stays the same while unsaved work only grows, no task comes of age and every
  // task holds as much (so the order cannot change): until the next checkpoint or coming of age.
  const core::Duration every = info.spec.checkpoint_every;
  if (req.isMig()) {
    quiet = now;  // GPUs of different models hold different shares: the order may change.
  }
  for (TaskId t : info.tasks) {
    const TaskInfo& task = tasks_[t];
    if (task.state == TaskState::kRunning) {
      order.emplace_back(unsavedOf(t, milli_of(t)), t);
      if (young(t)) {
        quiet = std::min(quiet, task.started + protectedFor(t));
      }
      if (every.count() > 0) {
        quiet = std::min(quiet, task.started + ((now - task.started) / every + 1) * every);
      }
    }
  }
  if (quiet_until != nullptr) {
    *quiet_until = quiet;
  }
  std::sort(order.begin(), order.end());
  // Elastic units from the tasks old enough to go; the rest are the gang's core, which goes
  // whole or not at all. Only units under `bound` are kept: above it, an eviction destroys too
  // much and the unit is no victim.
  const int elastic = info.running - info.spec.min_available;
  int taken = 0;
  Unit core;
  core.workload = w;
  bool core_young = false;
  for (const auto& [unsaved, t] : order) {
    if (taken < elastic && !young(t)) {
      ++taken;
      if (unsaved < bound) {
        units.push_back({w, {t}, true, tasks_[t].started, unsaved, milli_of(t), {}});
      }
    } else {
      core.tasks.push_back(t);
      core.unsaved += unsaved;
      core.gpu_milli += milli_of(t);
      core.started = std::max(core.started, tasks_[t].started);
      core_young = core_young || young(t);
    }
  }
  if (!core.tasks.empty() && !core_young && core.unsaved < bound) {
    units.push_back(std::move(core));
  }
  return units;
}

int64_t Scheduler::unsavedBound(QueueId leaf) const {
  // The nearest queue on the path that sets one (a tenant's bound covers its teams), else the
  // scheduler's.
  for (QueueId q = leaf; q != kNoQueue; q = tree_.queue(q).parent) {
    if (tree_.queue(q).max_unsaved_gpu_s >= 0) {
      return 1000 * tree_.queue(q).max_unsaved_gpu_s;
    }
  }
  return 1000 * seconds(options_.max_unsaved_gpu_time);
}

const std::vector<const Scheduler::Unit*>& Scheduler::leafUnits(QueueId leaf, bool bounded,
                                                                UnitCache& units) {
  auto [slot, added] = units.of_leaf.try_emplace(leaf);
  std::vector<const Unit*>& out = slot->second;
  if (!added) {
    return out;
  }
  // Above the bound, an eviction destroys too much.
  const int64_t bound = bounded ? unsavedBound(leaf) : INT64_MAX;
  const core::TimePoint now = clock_.now();
  for (RunningWorkload& entry : running_workloads_[leaf]) {
    if (entry.no_victims_bound == bound && now < entry.no_victims_until) {
      continue;  // Known to hold no victim until then: most long unsaved work, pass after pass.
    }
    const WorkloadId vw = entry.workload;
    auto it = units.of_workload.find(vw);
    if (it == units.of_workload.end()) {
      core::TimePoint quiet;
      std::vector<Unit> found = victimUnits(vw, bound, &quiet);
      if (found.empty()) {
        entry.no_victims_bound = bound;
        entry.no_victims_until = quiet;
        continue;
      }
      it = units.of_workload.emplace(vw, std::move(found)).first;
    }
    for (const Unit& u : it->second) {
      out.push_back(&u);
    }
  }
  return out;
}

bool Scheduler::planEvictions(WorkloadId w, Eviction kind, int needed, int evictions,
                              UnitCache& units, EvictionPlan& plan) {
  const bool reclaim = kind == Eviction::kReclaim;
  const bool move = kind == Eviction::kConsolidate;
  const WorkloadInfo& info = workloads_[w];
  const model::TaskRequest& req = info.spec.request;
  const QueueId r_leaf = info.spec.queue;
  const int core_needed = std::max(0, info.spec.min_available - info.running);
  const Amounts one = pendingAmounts(w);
  Amounts need = one;
  for (int64_t& v : need) {
    v *= needed;
  }

  // Where victims may come from: for reclaim, leaves whose side (where the paths split) is over
  // its share and stays above the reclaimer's side after the move (rule b); for preemption, the
  // workload's own leaf; for consolidation, the nodes with the most free room (below).
  struct Source {
    QueueId leaf;
    QueueId split_victim;
    Ratio victim_share;
    bool reclaimer_within_quota;  // Then the victim side's floor is its deserved quota.
    // The reclaimer's side's distance from its share (|s - 1|), now and with N added.
    double reclaimer_before = 0;
    double reclaimer_after = 0;
  };
  std::vector<Source> sources;
  // The reclaimer's side at each level where paths split: its share with N added, and whether it
  // stays within its deserved quota.
  std::unordered_map<QueueId, std::pair<Ratio, bool>> reclaimer_sides;
  // For the reason a reclaim made no room: a side over its share that giving back would not
  // make fairer, and a side that the no-overshoot rule kept whole.
  QueueId not_fairer = kNoQueue;
  QueueId kept_whole = kNoQueue;
  bool kept_at_quota = false;
  sources.reserve(tree_.size());  // Candidates point into it.
  for (QueueId v = 0; v < tree_.size() && !move; ++v) {
    if (running_priorities_[v].empty() || (reclaim ? v == r_leaf : v != r_leaf)) {
      continue;
    }
    if (!reclaim) {
      sources.push_back(Source{v, v, Ratio{}, false});
      continue;
    }
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
    const Ratio s_v = dominantShareWith(av.allocated, moving_[a_v], reclaimBasis(av));
    if (!greaterThanOne(s_v)) {
      continue;  // Only a side above its share gives back.
    }
    auto side = reclaimer_sides.find(a_r);
    if (side == reclaimer_sides.end()) {
      const Queue& ar = tree_.queue(a_r);
      Amounts ar_after = settled(a_r);
      addTo(ar_after, need);
      side =
          reclaimer_sides
              .emplace(a_r, std::make_pair(dominantShare(ar_after, reclaimBasis(ar)),
                                           !greaterThanOne(dominantShare(ar_after, ar.deserved))))
              .first;
    }
    if (!lessThan(side->second.first, s_v)) {
      not_fairer = a_v;
      continue;  // The move would not lower unfairness.
    }
    const Queue& ar = tree_.queue(a_r);
    sources.push_back(Source{v, a_v, s_v, side->second.second,
                             distanceFromOne(dominantShare(settled(a_r), reclaimBasis(ar))),
                             distanceFromOne(side->second.first)});
  }
  if (sources.empty() && !move) {
    if (reclaim) {
      plan.refused = not_fairer == kNoQueue
                         ? std::string("no other queue holds more than its share")
                         : fmt::format(
                               "'{}' holds more than its share, but taking from it would leave the "
                               "shares no fairer",
                               tree_.queue(not_fairer).name);
    }
    return false;
  }
  // Most over first: the search widens to the next level of victim share only when the levels
  // above cannot make the room, so it reads few queues' work when the most over can give.
  std::stable_sort(sources.begin(), sources.end(), [](const Source& a, const Source& b) {
    return lessThan(b.victim_share, a.victim_share);
  });

  // Candidate units, and the nodes each one is on.
  struct Cand {
    const Unit* unit;  // In `units`, which does not change while the plan is made.
    const Source* source;
    bool taken = false;
  };
  std::vector<Cand> cands;
  // Candidates by node (plan_slot_, plan_lists_), emptied for this plan.
  for (size_t k = 0; k < plan_lists_used_; ++k) {
    plan_slot_[plan_lists_[k].first] = UINT32_MAX;
    plan_lists_[k].second.clear();
  }
  plan_lists_used_ = 0;
  plan_slot_.resize(state_.nodeCount(), UINT32_MAX);
  auto on_node = [&](NodeIndex n) -> std::vector<size_t>& {
    uint32_t& slot = plan_slot_[n];
    if (slot == UINT32_MAX) {
      slot = static_cast<uint32_t>(plan_lists_used_++);
      if (slot == plan_lists_.size()) {
        plan_lists_.emplace_back();
      }
      plan_lists_[slot].first = n;
    }
    return plan_lists_[slot].second;
  };
  auto node_lists = [&]() { return std::span(plan_lists_.data(), plan_lists_used_); };
  auto cheaper = [&](size_t a, size_t b) {
    const Unit& ua = *cands[a].unit;
    const Unit& ub = *cands[b].unit;
    if (ua.unsaved != ub.unsaved) {
      return ua.unsaved < ub.unsaved;
    }
    const int pa = workloads_[ua.workload].spec.priority;
    const int pb = workloads_[ub.workload].spec.priority;
    if (pa != pb) {
      return pa < pb;
    }
    if (ua.elastic != ub.elastic) {
      return ua.elastic;
    }
    if (ua.started != ub.started) {
      return ua.started > ub.started;
    }
    return ua.tasks.front() < ub.tasks.front();
  };
  // A candidate, filed under every node it holds tasks on.
  auto add_cand = [&](const Unit* u, const Source* src) {
    const size_t i = cands.size();
    cands.push_back({u, src});
    for (TaskId t : u->tasks) {
      std::vector<size_t>& v = on_node(tasks_[t].assignment.placement.node);
      if (v.empty() || v.back() != i) {
        v.push_back(i);
      }
    }
  };
  // Each node's units in victim order.
  auto sort_nodes = [&]() {
    for (auto& [n, list] : node_lists()) {
      std::sort(list.begin(), list.end(), cheaper);
    }
  };
  size_t next_source = 0;
  // Adds the units of the next level of sources (equal victim share); false when none is left.
  auto expand = [&]() {
    if (next_source == sources.size()) {
      return false;
    }
    const Ratio level = sources[next_source].victim_share;
    for (; next_source < sources.size() && !lessThan(sources[next_source].victim_share, level);
         ++next_source) {
      const Source& src = sources[next_source];
      for (const Unit* u : leafUnits(src.leaf, reclaim, units)) {
        if (!reclaim &&
            (u->workload == w || workloads_[u->workload].spec.priority >= info.spec.priority)) {
          continue;
        }
        add_cand(u, &src);
      }
    }
    sort_nodes();
    return true;
  };
  if (reclaim) {
    expand();
  } else if (!move) {
    while (expand()) {
    }
  } else {
    // Consolidation: the units on the nodes with the most free room, of any queue (a move takes
    // nothing from anyone's share), each under its queue's bound on unsaved work.
    if (roomiest_pass_ != pass_) {
      // Once per pass: a plan committed since leaves its victims where they were until they
      // stop, so the free room it reads does not change within the pass.
      roomiest_pass_ = pass_;
      std::vector<std::pair<int64_t, NodeIndex>> by_room;
      for (NodeIndex n = 0; n < state_.nodeCount(); ++n) {
        if (state_.up(n) && state_.nodeState(n).free_gpu_milli > 0 && !node_tasks_[n].empty()) {
          by_room.emplace_back(-state_.nodeState(n).free_gpu_milli, n);
        }
      }
      const size_t look = std::min<size_t>(kConsolidationNodes, by_room.size());
      std::partial_sort(by_room.begin(), by_room.begin() + static_cast<ptrdiff_t>(look),
                        by_room.end());
      roomiest_.clear();
      for (size_t k = 0; k < look; ++k) {
        roomiest_.push_back(by_room[k].second);
      }
    }
    std::unordered_map<QueueId, size_t> source_of;
    std::set<std::pair<WorkloadId, TaskId>> seen;
    for (NodeIndex roomy : roomiest_) {
      for (TaskId t : node_tasks_[roomy]) {
        const WorkloadId vw = tasks_[t].workload;
        const WorkloadInfo& victim = workloads_[vw];
        if (vw == w || !victim.spec.preemptible || tasks_[t].state != TaskState::kRunning) {
          continue;
        }
        const int64_t bound = unsavedBound(victim.spec.queue);
        auto [src, added] = source_of.try_emplace(victim.spec.queue, sources.size());
        if (added) {
          sources.push_back(Source{victim.spec.queue, victim.spec.queue, Ratio{}, false});
        }
        auto it = units.of_workload.find(vw);
        if (it == units.of_workload.end()) {
          it = units.of_workload.emplace(vw, victimUnits(vw, bound)).first;
        }
        for (const Unit& u : it->second) {
          if (u.unsaved >= bound || std::find(u.tasks.begin(), u.tasks.end(), t) == u.tasks.end() ||
              !seen.emplace(vw, u.tasks.front()).second) {
            continue;
          }
          add_cand(&u, &sources[src->second]);
        }
      }
    }
    sort_nodes();
    next_source = sources.size();
  }

  // No overshoot: in every dimension where the victim's side is above its floor (its share, or
  // its deserved quota when the reclaimer is within its own quota), it stays at or above it with
  // everything chosen so far gone, unless going past it makes the two sides fairer (below).
  // Dimensions where it is not above (CPU nobody lacks, say) do not hold the move back: rule
  // (b) alone speaks for them.
  auto may_take = [&](const Cand& c, const std::unordered_map<QueueId, Amounts>& freed) {
    if (!reclaim) {
      return true;
    }
    const QueueId side = c.source->split_victim;
    const Queue& av = tree_.queue(side);
    const Amounts& floor = c.source->reclaimer_within_quota ? av.deserved : reclaimBasis(av);
    const Amounts& held = unitAmounts(*c.unit);
    Amounts before = settled(side);
    if (auto it = freed.find(side); it != freed.end()) {
      subtractFrom(before, it->second);
    }
    for (size_t d = 0; d < floor.size(); ++d) {
      if (held[d] > 0 && before[d] > floor[d] && before[d] - held[d] < floor[d]) {
        // An indivisible unit (a multi-GPU task, a gang's core) takes the side below its floor.
        // It may still go when that lowers the larger of the two sides' distance from their
        // shares: a queue within its share does not wait days for a unit that frees more than
        // the victim side owes (docs/fairness.md, "Past the floor").
        Amounts after = before;
        subtractFrom(after, held);
        const double before_max = std::max(
            c.source->reclaimer_before, distanceFromOne(dominantShare(before, reclaimBasis(av))));
        const double after_max = std::max(c.source->reclaimer_after,
                                          distanceFromOne(dominantShare(after, reclaimBasis(av))));
        if (after_max < before_max) {
          return true;
        }
        kept_whole = side;
        kept_at_quota = &floor == &av.deserved;
        return false;
      }
    }
    return true;
  };

  // Victims are released on the cluster state as the search goes, and restored at the end.
  std::vector<std::pair<TaskId, Assignment>> released;
  auto release = [&](const Unit& u) {
    for (TaskId t : u.tasks) {
      released.emplace_back(t, tasks_[t].assignment);
      placer_->release(workloads_[u.workload].spec.request, tasks_[t].assignment);
    }
  };
  auto restore_to = [&](size_t mark) {
    while (released.size() > mark) {
      const auto& [t, a] = released.back();
      tasks_[t].assignment =
          placer_->applyAt(workloads_[tasks_[t].workload].spec.request, a.placement);
      released.pop_back();
    }
  };
  // Tasks of `w` placed in the search, rolled back before the real placement checks the plan.
  std::vector<Assignment> placed;
  auto unplace_to = [&](size_t mark) {
    while (placed.size() > mark) {
      placer_->release(req, placed.back());
      placed.pop_back();
    }
  };
  // Nodes closed to `w`: reserved and not open to it.
  std::vector<NodeIndex> marks;
  if (reserved_for_ != kNoWorkload && restricted(w)) {
    for (NodeIndex n : reserved_nodes_) {
      preference_[n] = Placer::kForbidden;
      marks.push_back(n);
    }
  }
  auto closed = [&](NodeIndex n) { return preference_[n] == Placer::kForbidden; };
  // Places up to `want` tasks of `w` on node `n` (or anywhere open when n == kNoNode).
  auto fit_on = [&](NodeIndex n, int want) {
    if (n != kNoNode) {
      preference_[n] = 1;
      marks.push_back(n);
    }
    int k = 0;
    for (; k < want; ++k) {
      Placer::Decision d =
          marks.empty() ? placer_->decide(req) : placer_->decide(req, preference_, marks);
      if (!d.placed || (n != kNoNode && d.placement.node != n)) {
        break;
      }
      placed.push_back(placer_->applyAt(req, d.placement));
    }
    if (n != kNoNode) {
      preference_[n] = 0;
      marks.pop_back();
    }
    return k;
  };

  // Preemption past the queue's own limit: the swap must first free what the limit needs.
  if (kind == Eviction::kPreempt && !withinLimits(r_leaf, need, nullptr)) {
    std::vector<size_t> order(cands.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), cheaper);
    for (size_t i : order) {
      if (withinLimits(r_leaf, need, nullptr)) {
        break;
      }
      cands[i].taken = true;
      release(*cands[i].unit);
      addTo(trial_credit_, unitAmounts(*cands[i].unit));
      plan.victims.push_back({*cands[i].unit, r_leaf});
      plan.victim_tasks += static_cast<int>(cands[i].unit->tasks.size());
    }
  }

  int remaining = needed;
  std::vector<NodeIndex> targets;           // Nodes where room is made.
  remaining -= fit_on(kNoNode, remaining);  // Idle room first: it costs nothing.
  while (remaining > 0) {
    // Estimate each node's cost of one task's room from GPUs alone, then look closely at the
    // cheapest few.
    const int64_t task_milli =
        int64_t{req.gpu_count} * (req.isMig() ? 1000 : req.gpu_milli.value());
    std::vector<std::pair<int64_t, NodeIndex>> estimates;
    for (const auto& [n, list] : node_lists()) {
      if (closed(n)) {
        continue;
      }
      int64_t room = state_.nodeState(n).free_gpu_milli;
      int64_t cost = 0;
      bool any = false;
      for (size_t i : list) {
        if (cands[i].taken) {
          continue;
        }
        any = true;
        if (room >= task_milli) {
          break;
        }
        room += cands[i].unit->gpu_milli;
        cost += cands[i].unit->unsaved;
      }
      if (room >= task_milli && any) {
        estimates.emplace_back(cost, n);
      }
    }
    const size_t look = std::min(kNodesPerRound, estimates.size());
    std::partial_sort(estimates.begin(), estimates.begin() + static_cast<ptrdiff_t>(look),
                      estimates.end());
    struct Option {
      NodeIndex node = kNoNode;
      std::vector<size_t> units;
      int tasks = 0;
      int64_t cost = 0;
    };
    Option best;
    for (size_t e = 0; e < look; ++e) {
      // The estimate is what one task's room costs at the least on that node; once a node makes
      // room for all that is left at no more per task than the next estimate, none can beat it.
      if (best.node != kNoNode && best.tasks == remaining &&
          static_cast<Int128>(best.cost) <= static_cast<Int128>(estimates[e].first) * best.tasks) {
        break;
      }
      const NodeIndex n = estimates[e].second;
      const std::vector<size_t>& open = on_node(n);
      const size_t mark = released.size();
      std::unordered_map<QueueId, Amounts> freed = plan.freed;
      std::vector<size_t> used;
      int fits = 0;
      for (size_t i : open) {
        if (fits == remaining) {
          break;
        }
        if (cands[i].taken || !may_take(cands[i], freed)) {
          continue;
        }
        release(*cands[i].unit);
        used.push_back(i);
        auto [slot, inserted] = freed.emplace(cands[i].source->split_victim, tree_.space().zeros());
        addTo(slot->second, unitAmounts(*cands[i].unit));
        const size_t pmark = placed.size();
        fits = fit_on(n, remaining);
        unplace_to(pmark);
      }
      if (fits > 0) {
        // Keep only the victims the room needs: give each back, most expensive first, and see
        // whether as many tasks still fit.
        for (size_t j = used.size(); j-- > 0;) {
          const Unit& u = *cands[used[j]].unit;
          for (TaskId t : u.tasks) {
            auto it = std::find_if(released.begin() + static_cast<ptrdiff_t>(mark), released.end(),
                                   [&](const auto& r) { return r.first == t; });
            tasks_[t].assignment =
                placer_->applyAt(workloads_[u.workload].spec.request, it->second.placement);
            released.erase(it);
          }
          const size_t pmark = placed.size();
          const int still = fit_on(n, remaining);
          unplace_to(pmark);
          if (still >= fits) {
            used.erase(used.begin() + static_cast<ptrdiff_t>(j));
          } else {
            release(u);
          }
        }
        Option o{n, used, fits, 0};
        for (size_t i : used) {
          o.cost += cands[i].unit->unsaved + 1;  // + 1: fewer evictions win a tie.
        }
        // Least unsaved work per task made room for; then the lower node index.
        const Int128 lhs = static_cast<Int128>(o.cost) * std::max(1, best.tasks);
        const Int128 rhs = static_cast<Int128>(best.cost) * o.tasks;
        if (best.node == kNoNode || lhs < rhs || (lhs == rhs && n < best.node)) {
          best = std::move(o);
        }
      }
      restore_to(mark);
    }
    if (best.node == kNoNode) {
      if (!move && expand()) {
        continue;  // Nothing at this level of victim share: look one level further.
      }
      break;
    }
    for (size_t i : best.units) {
      cands[i].taken = true;
      release(*cands[i].unit);
      auto [slot, inserted] =
          plan.freed.emplace(cands[i].source->split_victim, tree_.space().zeros());
      addTo(slot->second, unitAmounts(*cands[i].unit));
      plan.victims.push_back({*cands[i].unit, cands[i].source->split_victim});
      plan.victim_tasks += static_cast<int>(cands[i].unit->tasks.size());
    }
    targets.push_back(best.node);
    remaining -= fit_on(best.node, std::min(remaining, best.tasks));
    remaining -= fit_on(kNoNode, remaining);  // A gang victim may have freed room elsewhere.
  }
  plan.placed = needed - remaining;
  bool movable = true;
  if (move && remaining == 0) {
    // Every task moved must have room elsewhere at once, with the workload placed and the
    // target nodes closed to it.
    for (NodeIndex n : targets) {
      preference_[n] = Placer::kForbidden;
      marks.push_back(n);
    }
    std::vector<std::pair<const model::TaskRequest*, Assignment>> replaced;
    for (const EvictionPlan::Victim& v : plan.victims) {
      const model::TaskRequest& vreq = workloads_[v.unit.workload].spec.request;
      for (size_t k = 0; k < v.unit.tasks.size() && movable; ++k) {
        Placer::Decision d = placer_->decide(vreq, preference_, marks);
        movable = d.placed;
        if (d.placed) {
          replaced.emplace_back(&vreq, placer_->applyAt(vreq, d.placement));
        }
      }
    }
    for (auto it = replaced.rbegin(); it != replaced.rend(); ++it) {
      placer_->release(*it->first, it->second);
    }
  }
  unplace_to(0);
  for (NodeIndex n : marks) {
    preference_[n] = 0;
  }
  // The cap stops new evictions once reached; the first of a pass may exceed it, or a gang
  // needing more victims than the cap could never be served.
  bool ok =
      !plan.victims.empty() && plan.placed >= std::max(1, core_needed) && movable &&
      (move ? remaining == 0 && evictions + plan.victim_tasks <= options_.max_moves_per_pass
            : evictions == 0 || evictions + plan.victim_tasks <= options_.max_evictions_per_pass);
  if (ok) {
    // The real placement (gang preferences, limits, the quota rule) must agree.
    ok = placeTasks(w, plan.placed, /*trial=*/true, nullptr, nullptr);
  }
  trial_credit_ = tree_.space().zeros();
  restore_to(0);
  if (!ok && reclaim) {
    const int wanted = std::max(1, core_needed);
    if (cands.empty()) {
      std::string over;
      for (size_t k = 0; k < sources.size() && k < 3; ++k) {
        over += fmt::format("{}'{}'", k == 0 ? "" : ", ", tree_.queue(sources[k].leaf).name);
      }
      plan.refused = fmt::format(
          "no running work of the queues over their share ({}{}) may be taken: it is not "
          "preemptible, still within its minimum runtime, or holds more unsaved work than allowed",
          over, sources.size() > 3 ? ", ..." : "");
    } else if (plan.placed < wanted && kept_whole != kNoQueue) {
      plan.refused = fmt::format("the only victims would take '{}' below its {}",
                                 tree_.queue(kept_whole).name, kept_at_quota ? "quota" : "share");
    } else if (plan.placed < wanted) {
      plan.refused = fmt::format(
          "evicting all the work it may take would not make room for {} task(s)", wanted);
    } else if (plan.victims.empty()) {
      // It fits without victims: the next pass places it, and no reclaim was refused.
    } else if (evictions > 0 && evictions + plan.victim_tasks > options_.max_evictions_per_pass) {
      plan.refused = fmt::format(
          "it needs {} evictions, more than this pass has left (at most {} "
          "per pass)",
          plan.victim_tasks, options_.max_evictions_per_pass);
    } else {
      plan.refused = "with its victims gone, a limit on its queue's path would still hold it back";
    }
  }
  return ok;
}

void Scheduler::evictFor(Eviction kind, PassResult& out, int& all_evictions) {
  const bool reclaim = kind == Eviction::kReclaim;
  const bool move = kind == Eviction::kConsolidate;
  if (move && options_.max_moves_per_pass == 0) {
    return;
  }
  // Moves are capped on their own (max_moves_per_pass) and count as evictions too.
  int moves = 0;
  int& evictions = move ? moves : all_evictions;
  // Blocked workloads that could evict: for reclaim those of queues within their share (that
  // have waited `reclaim_patience` so), for preemption those above the lowest priority running in
  // their queue; a bounded number per queue and per pass, most deprived queue first. Only the most
  // deprived queues are looked at.
  constexpr size_t kPerQueue = 16;
  constexpr size_t kPerPass = 16;
  const core::TimePoint now = clock_.now();
  std::vector<std::pair<Ratio, QueueId>> leaves;
  for (QueueId q = 0; q < tree_.size(); ++q) {
    const Queue& queue = tree_.queue(q);
    if (!queue.isLeaf()) {
      continue;
    }
    const bool pending =
        !queue_workloads_[q].empty() &&
        queue.pending[kGpuDim] + queue.pending[kCpuDim] + queue.pending[kMemoryDim] > 0;
    const Ratio share = dominantShareWith(queue.allocated, moving_[q],
                                          reclaim ? reclaimBasis(queue) : queue.fair_share);
    if (reclaim) {
      over_share_[q] = pending && greaterThanOne(share) ? 1 : 0;
      // The patience clock runs while the queue waits at or below its share.
      if (!pending || greaterThanOne(share)) {
        below_since_[q] = core::TimePoint::max();
        continue;
      }
      if (below_since_[q] == core::TimePoint::max()) {
        below_since_[q] = now;
      }
    } else if (!pending || (!move && running_priorities_[q].empty())) {
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
    const int32_t lowest = reclaim || move ? INT32_MIN : running_priorities_[q].begin()->first;
    size_t taken = 0;
    for (WorkloadId w : queue_workloads_[q]) {
      const WorkloadInfo& info = workloads_[w];
      if (kind == Eviction::kPreempt && info.spec.priority <= lowest) {
        break;  // The rest of the queue is of no higher priority.
      }
      if (info.pending == 0 || info.awaited_victims > 0 || info.terminating > 0) {
        continue;
      }
      if (reclaim && now - std::max(below_since_[q], info.submitted) < options_.reclaim_patience) {
        continue;
      }
      const WaitReason why = waitOf(w).reason;
      // A swap inside the queue leaves its totals as they were, so preemption may also serve
      // work that waits on its queue's limit.
      if (why == WaitReason::kNoCapacity ||
          (kind == Eviction::kPreempt && why == WaitReason::kQueueLimit)) {
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
  UnitCache units;
  // (queue, request class, tasks to place, target) of searches that found nothing in this call:
  // the same search for a peer would find nothing either, as long as nothing was evicted since;
  // with the reason a reclaim gives.
  std::map<std::tuple<QueueId, uint32_t, int, int>, std::string> failed;
  const int64_t free_milli = 1000 * state_.totalGpus() - state_.usedGpuMilli();
  for (const auto& entry : blocked) {
    const WorkloadId w = entry.second;
    if (evictions >= (move ? options_.max_moves_per_pass : options_.max_evictions_per_pass)) {
      return;
    }
    WorkloadInfo& info = workloads_[w];
    const QueueId r_leaf = info.spec.queue;
    // What to make room for: the rest of the gang minimum, or for elastic tasks as many as the
    // queue's share has room for (all at once, so a borrower gives back in one pass). Shares
    // count the evictions already under way (settled), this pass's included.
    const Amounts one = pendingAmounts(w);
    const int core_needed = std::max(0, info.spec.min_available - info.running);
    int64_t room = info.pending;
    if (reclaim) {
      const Queue& rq = tree_.queue(r_leaf);
      const Amounts now_settled = settled(r_leaf);
      for (size_t d = 0; d < one.size(); ++d) {
        if (one[d] > 0) {
          room =
              std::min(room, std::max<int64_t>(0, reclaimBasis(rq)[d] - now_settled[d]) / one[d]);
        }
      }
    }
    room = std::min<int64_t>(room, options_.max_evictions_per_pass + core_needed);
    int target = static_cast<int>(std::max<int64_t>(core_needed, room));
    if (move) {
      // Moving work helps only where the cluster's free room would hold the work in one piece.
      target = std::max(1, core_needed);
      if (one[kGpuDim] * target > free_milli) {
        continue;
      }
    }
    const char* basis = options_.reclaim_to == ReclaimTo::kQuota ? "quota" : "share";
    if (target == 0) {
      if (reclaim) {
        info.reclaim_refused = fmt::format("queue '{}' has no room under its {} for another task",
                                           tree_.queue(r_leaf).name, basis);
      }
      continue;
    }
    if (reclaim) {
      // The reclaimer must stay within its share with the work added.
      Amounts after = settled(r_leaf);
      Amounts need = one;
      for (int64_t& v : need) {
        v *= target;
      }
      addTo(after, need);
      if (greaterThanOne(dominantShare(after, reclaimBasis(tree_.queue(r_leaf))))) {
        info.reclaim_refused =
            fmt::format("with its {} task(s), queue '{}' would hold more than its {}", target,
                        tree_.queue(r_leaf).name, basis);
        continue;
      }
    }
    EvictionPlan plan;
    const auto search = std::make_tuple(r_leaf, info.shape, needOf(w), target);
    if (auto known = failed.find(search); known != failed.end()) {
      if (reclaim) {
        info.reclaim_refused = known->second;
      }
      continue;
    }
    if (!planEvictions(w, kind, target, evictions, units, plan)) {
      if (reclaim) {
        info.reclaim_refused = plan.refused;
      }
      failed.emplace(search, std::move(plan.refused));
      continue;
    }
    if (reclaim) {
      info.reclaim_refused.clear();
    }
    failed.clear();  // Shares moved: what failed may now succeed.
    // Commit: victims terminate and keep their resources until they stop, and then for `w`; the
    // move counts as made for every later decision (settled).
    std::string before_after;
    if (reclaim) {
      const Queue& rq = tree_.queue(r_leaf);
      Amounts r_after = settled(r_leaf);
      for (size_t d = 0; d < one.size(); ++d) {
        r_after[d] += one[d] * plan.placed;
      }
      before_after = fmt::format("{} -> {}", shareText(rq, settled(r_leaf)), r_after[kGpuDim]);
      for (const auto& [split, amounts] : plan.freed) {
        const Queue& vq = tree_.queue(split);
        Amounts v_after = settled(split);
        subtractFrom(v_after, amounts);
        before_after += fmt::format("; {} -> {}", shareText(vq, settled(split)), v_after[kGpuDim]);
      }
    }
    for (const EvictionPlan::Victim& v : plan.victims) {
      units.of_workload.erase(v.unit.workload);
      units.of_leaf.erase(workloads_[v.unit.workload].spec.queue);
      WorkloadInfo& victim = workloads_[v.unit.workload];
      for (TaskId t : v.unit.tasks) {
        addMoving(victim.spec.queue, taskAmounts(v.unit.workload, &tasks_[t].assignment.placement),
                  -1);
        tasks_[t].state = TaskState::kTerminating;
        tasks_[t].evicted_for = w;
        addRunning(v.unit.workload, -1);
        ++victim.terminating;
        refile(v.unit.workload);
        out.evicted.push_back(
            {t, v.unit.workload, w, reclaim, move,
             move ? fmt::format("moved for '{}' (queue '{}'): {}unsaved {:.2f} GPU-h; it "
                                "restarts on another node",
                                info.spec.name, tree_.queue(r_leaf).name,
                                v.unit.elastic ? "elastic task; " : "gang; ",
                                static_cast<double>(v.unit.unsaved) / 3.6e6)
                  : fmt::format("{} by '{}' (queue '{}'): {}unsaved {:.2f} GPU-h; {} "
                                "(allocated/fair share, milli-GPU)",
                                reclaim ? "reclaimed" : "preempted", info.spec.name,
                                tree_.queue(r_leaf).name,
                                v.unit.elastic ? "elastic task; " : "gang; ",
                                static_cast<double>(v.unit.unsaved) / 3.6e6, before_after)});
        ++evictions;
        if (move) {
          ++all_evictions;
        }
      }
    }
    info.promised = one;
    for (int64_t& v : info.promised) {
      v *= plan.placed;
    }
    addMoving(r_leaf, info.promised, +1);
    info.awaited_victims += plan.victim_tasks;
    if (std::find(awaiting_.begin(), awaiting_.end(), w) == awaiting_.end()) {
      awaiting_.push_back(w);
    }
    info.why = {WaitReason::kWaitingForEvictions,
                fmt::format("waiting for {} evicted task(s) to stop", plan.victim_tasks)};
  }
}

}  // namespace tessera::sched
