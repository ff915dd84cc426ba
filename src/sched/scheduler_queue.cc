// The scheduler's pending index and queue order (sched/scheduler.h): which workload a pass tries
// next (the fair-share walk down the queue tree), what a failed try blocks, and why a workload
// waits.
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

Scheduler::OrderKey Scheduler::orderOf(WorkloadId w) const {
  return {-static_cast<int64_t>(workloads_[w].spec.priority), workloads_[w].seq};
}

int32_t Scheduler::needOf(WorkloadId w) const {
  const WorkloadInfo& info = workloads_[w];
  return std::max(1, info.spec.min_available - info.running);
}

void Scheduler::refile(WorkloadId w) {
  WorkloadInfo& info = workloads_[w];
  std::vector<Bucket>& buckets = buckets_[info.spec.queue];
  const bool wanted = info.pending > 0;
  const BucketKey key{info.shape, needOf(w), info.spec.preemptible,
                      info.spec.max_runtime.count() > 0};
  if (info.bucket >= 0) {
    Bucket& b = buckets[static_cast<size_t>(info.bucket)];
    if (wanted && b.key == key) {
      return;
    }
    b.members.erase(orderOf(w));
    info.bucket = -1;
  }
  if (!wanted) {
    return;
  }
  auto it =
      std::find_if(buckets.begin(), buckets.end(), [&](const Bucket& b) { return b.key == key; });
  if (it == buckets.end()) {
    it = buckets.insert(buckets.end(), Bucket{});
    it->key = key;
  }
  it->members.emplace(orderOf(w), w);
  info.bucket = static_cast<int32_t>(it - buckets.begin());
  if (info.why.reason == WaitReason::kNotReached && it->last.reason != WaitReason::kNotReached) {
    info.why = it->last;  // Like its peers, until it is tried itself.
  }
}

const QueueOrderKey& Scheduler::orderKey(QueueId q) const {
  if (order_key_.size() < tree_.size()) {
    order_key_.resize(tree_.size());
    order_epoch_.resize(tree_.size(), 0);
  }
  QueueOrderKey& k = order_key_[q];
  if (order_epoch_[q] == pass_) {
    return k;
  }
  order_epoch_[q] = pass_;
  const Queue& queue = tree_.queue(q);
  const Amounts& job = head_job_[q];
  k.without = dominantShare(queue.allocated, queue.fair_share);
  k.over = greaterThanOne(k.without);
  // Within quota: GPU dimensions always; CPU and memory where the queue sets a quota, as for
  // non-preemptible work.
  k.within_quota = true;
  k.no_share = false;
  for (size_t d = 0; d < job.size(); ++d) {
    if (job[d] <= 0) {
      continue;
    }
    const bool gpu_dim = d == kGpuDim || d >= kFixedDims;
    if ((gpu_dim || queue.quota[d] > 0) && queue.allocated[d] + job[d] > queue.quota[d]) {
      k.within_quota = false;
    }
    if (queue.fair_share[d] <= 0) {
      k.no_share = true;
    }
  }
  k.priority = queue.priority;
  k.with_job = dominantShareWith(queue.allocated, job, queue.fair_share);
  return k;
}

bool Scheduler::servedBefore(QueueId x, QueueId y) const {
  const QueueOrderKey& kx = orderKey(x);
  const QueueOrderKey& ky = orderKey(y);
  if (kx.over != ky.over) {
    return !kx.over;  // 1. At or under its fair share first.
  }
  if (kx.within_quota != ky.within_quota) {
    return kx.within_quota;  // 2. Within its quota with the job.
  }
  if (kx.priority != ky.priority) {
    return kx.priority > ky.priority;  // 3. Higher priority.
  }
  if (kx.no_share != ky.no_share) {
    return !kx.no_share;  // 4. Not asking for what it has no share of.
  }
  if (lessThan(kx.with_job, ky.with_job) || lessThan(ky.with_job, kx.with_job)) {
    return lessThan(kx.with_job, ky.with_job);  // 5. Smaller share with the job.
  }
  return lessThan(kx.without, ky.without);  // 6. Without; 7. ties: the caller's scan order.
}

const Amounts& Scheduler::computeHeadJob(QueueId q, const std::vector<int>& untried) {
  Amounts& job = head_job_[q];
  job = tree_.space().zeros();
  const Queue& queue = tree_.queue(q);
  if (queue.isLeaf()) {
    WorkloadId head = kNoWorkload;
    OrderKey key;
    for (const Bucket& b : buckets_[q]) {
      if (!b.members.empty() && (head == kNoWorkload || b.members.begin()->first < key)) {
        key = b.members.begin()->first;
        head = b.members.begin()->second;
      }
    }
    if (head != kNoWorkload) {
      job = pendingAmounts(head);
    }
    return job;
  }
  QueueId first = kNoQueue;
  for (QueueId c : queue.children) {
    if (untried[c] == 0) {
      continue;
    }
    computeHeadJob(c, untried);
    if (first == kNoQueue || servedBefore(c, first)) {
      first = c;
    }
  }
  if (first != kNoQueue) {
    job = head_job_[first];
  }
  return job;
}

QueueId Scheduler::pickQueue(const std::vector<int>& untried) const {
  const std::vector<QueueId>* level = &tree_.roots();
  QueueId chosen = kNoQueue;
  while (true) {
    QueueId best = kNoQueue;
    for (QueueId q : *level) {
      if (untried[q] == 0) {
        continue;
      }
      if (best == kNoQueue || servedBefore(q, best)) {
        best = q;
      }
    }
    if (best == kNoQueue) {
      return chosen;
    }
    chosen = best;
    if (tree_.queue(best).isLeaf()) {
      return best;
    }
    level = &tree_.queue(best).children;
  }
}

bool Scheduler::restricted(WorkloadId w) const {
  if (reserved_for_ == kNoWorkload || w == reserved_for_ || mayBackfill(w)) {
    return false;
  }
  return !openToReserved(workloads_[w].spec.queue);
}

bool Scheduler::openToReserved(QueueId leaf) const {
  const QueueId holder = workloads_[reserved_for_].spec.queue;
  if (leaf == holder) {
    return false;  // Its mates wait behind the workload the nodes are held for.
  }
  // The nodes drain for the queue furthest below its share: another queue may use them while it
  // is below its own share and further below it than the holder (a larger debt comes first).
  const Queue& q = tree_.queue(leaf);
  const Queue& h = tree_.queue(holder);
  const Ratio mine = dominantShare(q.allocated, q.fair_share);
  return lessThan(mine, Ratio{1, 1}) && lessThan(mine, dominantShare(h.allocated, h.fair_share));
}

const Scheduler::Blocked* Scheduler::findBlocked(uint32_t shape, int32_t need,
                                                 bool restricted) const {
  // No room for fewer tasks of the class means no room for more; no room with every node open
  // means no room without the reserved ones.
  for (const bool r : {false, true}) {
    if (r && !restricted) {
      break;
    }
    auto it = blocked_.lower_bound(BlockKey{shape, r, 0});
    if (it != blocked_.end() && it->first.shape == shape && it->first.restricted == r &&
        it->first.need <= need) {
      return &it->second;
    }
  }
  return nullptr;
}

Explanation Scheduler::explain(WorkloadId w) const {
  Explanation e = waitOf(w);
  if (e.reason == WaitReason::kNoCapacity && w == reserved_for_) {
    e.message += reservationNote();
  }
  if (e.reason != WaitReason::kNoCapacity || !options_.fair_share) {
    return e;
  }
  const WorkloadInfo& info = workloads_[w];
  const Queue& q = tree_.queue(info.spec.queue);
  const char* basis = options_.reclaim_to == ReclaimTo::kQuota ? "quota" : "share";
  if (over_share_[info.spec.queue] != 0) {
    e.message +=
        fmt::format("; reclaim not considered: queue '{}' holds more than its {}", q.name, basis);
  } else if (!info.reclaim_refused.empty()) {
    e.message += "; reclaim considered: " + info.reclaim_refused;
  }
  return e;
}

Explanation Scheduler::waitOf(WorkloadId w) const {
  const WorkloadInfo& info = workloads_[w];
  if (info.pending == 0) {
    return {WaitReason::kNone, ""};
  }
  if (info.terminating > 0) {
    return {WaitReason::kTerminating,
            fmt::format("{} of its tasks are stopping", info.terminating)};
  }
  if (info.awaited_victims > 0) {
    return {WaitReason::kWaitingForEvictions,
            fmt::format("waiting for {} evicted task(s) to stop", info.awaited_victims)};
  }
  if (info.why.reason == WaitReason::kNotReached || info.why.reason == WaitReason::kNoCapacity) {
    if (const Blocked* b = findBlocked(info.shape, needOf(w), restricted(w))) {
      return {WaitReason::kNoCapacity, b->message};
    }
  }
  if (info.why.reason == WaitReason::kNotReached && info.bucket >= 0) {
    // Passed over with its bucket: its peers' reason is its own.
    const Bucket& b = buckets_[info.spec.queue][static_cast<size_t>(info.bucket)];
    if (b.last.reason != WaitReason::kNotReached) {
      return b.last;
    }
  }
  return info.why;
}

void Scheduler::unblock() {
  if (state_.cpuPerFreeGpu() > 0) {
    // With CPU held for free GPUs, a GPU task that starts frees held CPU: room for tasks with no
    // GPU may grow where nothing was released, so their verdicts last one pass.
    std::erase_if(blocked_, [](const auto& entry) { return entry.second.resolved.gpu_count == 0; });
  }
  if (released_nodes_.empty()) {
    return;
  }
  std::sort(released_nodes_.begin(), released_nodes_.end());
  released_nodes_.erase(std::unique(released_nodes_.begin(), released_nodes_.end()),
                        released_nodes_.end());
  // A verdict stands while no node that could hold one task of the class gained resources. A
  // node that gained room the class may not use for want of trust (a free share beside another
  // tenant) ends it too: the class still waits, but for another reason, and its workloads must
  // say so (they are tried again, and the verdict they leave names the trust rule).
  std::erase_if(blocked_, [&](const auto& entry) {
    for (NodeIndex n : released_nodes_) {
      if (entry.first.restricted && reserved_mask_[n] != 0) {
        continue;
      }
      const NodeFit fit = checkNode(state_, n, entry.second.resolved);
      if (fit.fits() || (fit.reason == FilterReason::kTrustBoundary &&
                         entry.second.message.find("untrusted") == std::string::npos)) {
        return true;
      }
    }
    return false;
  });
  released_nodes_.clear();
}

void Scheduler::noteFailure(WorkloadId w, bool capacity, bool restricted, int32_t need) {
  WorkloadInfo& info = workloads_[w];
  if (capacity) {
    blocked_.try_emplace(BlockKey{info.shape, restricted, need},
                         Blocked{resolveRequest(state_, info.spec.request), info.why.message});
  }
  if (info.bucket < 0) {
    return;
  }
  Bucket& b = buckets_[info.spec.queue][static_cast<size_t>(info.bucket)];
  b.last = info.why;
  if (info.why.reason == WaitReason::kQueueLimit || info.why.reason == WaitReason::kOverQuota) {
    // Its peers ask the same of the same queue: none of them fits this pass either.
    b.pass = pass_;
    b.next = {INT64_MAX, UINT64_MAX};
  }
}

void Scheduler::tryWorkload(WorkloadId w, PassResult& out) {
  WorkloadInfo& info = workloads_[w];
  info.tried_pass = pass_;
  const int core_needed = std::max(0, info.spec.min_available - info.running);
  // Victims stopping for it may have made room that no verdict knows of yet.
  if (info.awaited_victims == 0 && isBlocked(info.shape, std::max(1, core_needed), restricted(w))) {
    info.why = waitOf(w);
    return;
  }
  ++out.tried;
  info.why = {WaitReason::kNone, ""};
  if (core_needed > 0) {
    const bool closed = restricted(w);
    if (!placeTasks(w, core_needed, false, &out, &info.why)) {
      if (info.awaited_victims > 0) {
        info.why = {WaitReason::kWaitingForEvictions,
                    fmt::format("waiting for {} evicted task(s) to stop", info.awaited_victims)};
        return;
      }
      const bool capacity = info.why.reason == WaitReason::kNoCapacity;
      if (!capacity && w == reserved_for_) {
        // It waits on its queue's quota or limit now, not on room: nodes held for it would
        // close its queue to its mates for nothing.
        setReservation(kNoWorkload, {});
      }
      // Reservations are for large work: a gang, or tasks of several GPUs each. Small tasks find
      // room as the cluster turns over. Not for a queue that is borrowing: it would hold nodes
      // others deserve.
      if (capacity && reserved_for_ == kNoWorkload &&
          (core_needed > 1 || info.spec.request.gpu_count > 1)) {
        const Queue& q = tree_.queue(info.spec.queue);
        if (!options_.fair_share || !greaterThanOne(dominantShare(q.allocated, q.fair_share))) {
          reserveFor(w);
        }
      }
      noteFailure(w, capacity, closed, core_needed);
      return;
    }
  }
  // Elastic tasks beyond the gang minimum, one at a time.
  while (info.pending > 0) {
    const bool closed = restricted(w);
    if (isBlocked(info.shape, 1, closed)) {
      if (info.why.reason != WaitReason::kNoCapacity) {
        info.why = {WaitReason::kNoCapacity, "no room for one more task of this shape"};
      }
      break;
    }
    Explanation why;
    if (!placeTasks(w, 1, false, &out, &why)) {
      info.why = why;  // Elastic tasks wait too, and may reclaim.
      noteFailure(w, why.reason == WaitReason::kNoCapacity, closed, 1);
      break;
    }
  }
}

WorkloadId Scheduler::nextInQueue(QueueId q) {
  // Non-timed members share the queue's access to reserved nodes; timed ones may backfill.
  const bool queue_closed = reserved_for_ != kNoWorkload && !openToReserved(q);
  WorkloadId best = kNoWorkload;
  OrderKey best_key;
  Bucket* best_bucket = nullptr;
  for (Bucket& b : buckets_[q]) {
    if (b.members.empty()) {
      continue;
    }
    if (b.pass != pass_) {
      b.pass = pass_;
      b.next = {INT64_MIN, 0};
    }
    if (!b.key.timed && isBlocked(b.key.shape, b.key.need, queue_closed)) {
      continue;  // A whole bucket of work with no room: not touched.
    }
    for (auto it = b.members.lower_bound(b.next); it != b.members.end(); ++it) {
      const WorkloadId w = it->second;
      WorkloadInfo& info = workloads_[w];
      bool skip = info.tried_pass == pass_ ||
                  (b.key.timed && isBlocked(b.key.shape, b.key.need, restricted(w)));
      if (info.terminating > 0) {
        info.why = {WaitReason::kTerminating,
                    fmt::format("{} of its tasks are stopping", info.terminating)};
        skip = true;
      }
      if (skip) {
        b.next = {it->first.first, it->first.second + 1};
        continue;
      }
      if (best == kNoWorkload || it->first < best_key) {
        best = w;
        best_key = it->first;
        best_bucket = &b;
      }
      break;
    }
  }
  if (best_bucket != nullptr) {
    best_bucket->next = {best_key.first, best_key.second + 1};
  }
  return best;
}

void Scheduler::allocate(PassResult& out) {
  ++pass_;
  // A reservation ends when its workload runs (or is gone); while it lasts its nodes are chosen
  // again as the cluster drains.
  if (reserved_for_ != kNoWorkload) {
    const WorkloadInfo& r = workloads_[reserved_for_];
    if (r.running >= r.spec.min_available || r.pending == 0) {
      setReservation(kNoWorkload, {});
    } else {
      reserveFor(reserved_for_);
    }
  }
  // Room held for work whose victims have all stopped is given back now, just before that work
  // is tried first: it is the one to take it.
  for (WorkloadId w : awaiting_) {
    if (workloads_[w].awaited_victims == 0) {
      endHold(w);
    }
  }
  unblock();
  // First the work whose victims are stopping (the room was made for it), and the reserved one.
  std::vector<WorkloadId> first;
  first.swap(awaiting_);
  if (reserved_for_ != kNoWorkload) {
    first.push_back(reserved_for_);
  }
  for (WorkloadId w : first) {
    WorkloadInfo& info = workloads_[w];
    if (info.tried_pass != pass_ && info.pending > 0 && info.terminating == 0) {
      tryWorkload(w, out);
    }
  }
  for (WorkloadId w : first) {
    if (workloads_[w].awaited_victims > 0 &&
        std::find(awaiting_.begin(), awaiting_.end(), w) == awaiting_.end()) {
      awaiting_.push_back(w);
    }
  }
  if (!options_.fair_share) {
    // FIFO: every unfinished workload in submission order (the baseline; not incremental).
    std::erase_if(unfinished_,
                  [&](WorkloadId w) { return workloads_[w].finished == workloads_[w].spec.tasks; });
    for (WorkloadId w : unfinished_) {
      WorkloadInfo& info = workloads_[w];
      if (info.pending == 0 || info.tried_pass == pass_) {
        continue;
      }
      if (info.terminating > 0) {
        info.why = {WaitReason::kTerminating,
                    fmt::format("{} of its tasks are stopping", info.terminating)};
        continue;
      }
      tryWorkload(w, out);
    }
    return;
  }
  // Leaf queues with pending work; the count of such leaves per subtree.
  std::vector<int> open(tree_.size(), 0);
  for (QueueId q = 0; q < tree_.size(); ++q) {
    if (size_t{finished_in_queue_[q]} * 2 > queue_workloads_[q].size()) {
      std::erase_if(queue_workloads_[q], [&](WorkloadId w) {
        return workloads_[w].finished == workloads_[w].spec.tasks;
      });
      finished_in_queue_[q] = 0;
    }
    const bool pending = std::any_of(buckets_[q].begin(), buckets_[q].end(),
                                     [](const Bucket& b) { return !b.members.empty(); });
    if (pending) {
      for (QueueId p = q; p != kNoQueue; p = tree_.queue(p).parent) {
        ++open[p];
      }
    }
  }
  head_job_.resize(tree_.size());
  for (QueueId root : tree_.roots()) {
    if (open[root] > 0) {
      computeHeadJob(root, open);
    }
  }
  // The queue to serve is re-chosen only after a placement: a failure changes no share.
  QueueId current = kNoQueue;
  while (true) {
    if (current == kNoQueue || open[current] == 0) {
      current = pickQueue(open);
    }
    if (current == kNoQueue) {
      break;
    }
    const WorkloadId w = nextInQueue(current);
    if (w == kNoWorkload) {
      for (QueueId p = current; p != kNoQueue; p = tree_.queue(p).parent) {
        --open[p];
      }
      continue;
    }
    const size_t started_before = out.started.size();
    tryWorkload(w, out);
    if (out.started.size() != started_before) {
      current = kNoQueue;  // A placement changes shares: choose the queue again.
    }
  }
}

}  // namespace tessera::sched
