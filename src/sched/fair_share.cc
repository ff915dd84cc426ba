#include "sched/fair_share.h"

#include <algorithm>
#include <numeric>

namespace tessera::sched {
namespace {

__extension__ typedef __int128 Int128;  // NOLINT(modernize-use-using)

// Splits `amount` in proportion to `parts` (all >= 0, sum > 0): floor of each exact share, then
// one more unit to the largest remainders, ties to the lower index.
std::vector<int64_t> apportion(int64_t amount, const std::vector<Int128>& parts, Int128 sum) {
  std::vector<int64_t> out(parts.size(), 0);
  std::vector<Int128> rem(parts.size(), 0);
  int64_t given = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Int128 exact = static_cast<Int128>(amount) * parts[i];
    out[i] = static_cast<int64_t>(exact / sum);
    rem[i] = exact % sum;
    given += out[i];
  }
  std::vector<size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rem[a] > rem[b]; });
  for (size_t k = 0; given < amount && k < order.size(); ++k) {
    if (parts[order[k]] > 0) {
      ++out[order[k]];
      ++given;
    }
  }
  return out;
}

// Water-fills `amount` over `members` (indices into need/weight) by weight; each gets at most
// its need. Adds to `share`, returns what was given.
int64_t waterFill(int64_t amount, std::vector<size_t> members, std::vector<int64_t>& need,
                  const std::vector<int64_t>& weight, std::vector<int64_t>& share) {
  int64_t given_total = 0;
  while (amount > 0 && !members.empty()) {
    Int128 wsum = 0;
    for (size_t i : members) {
      wsum += weight[i];
    }
    if (wsum == 0) {
      break;
    }
    // Anyone whose need is within its exact portion is satisfied in full; the rest share
    // again what they leave.
    std::vector<size_t> unsatisfied;
    int64_t satisfied_sum = 0;
    for (size_t i : members) {
      if (static_cast<Int128>(need[i]) * wsum <= static_cast<Int128>(amount) * weight[i]) {
        share[i] += need[i];
        satisfied_sum += need[i];
        need[i] = 0;
      } else {
        unsatisfied.push_back(i);
      }
    }
    if (satisfied_sum > 0) {
      amount -= satisfied_sum;
      given_total += satisfied_sum;
      members = std::move(unsatisfied);
      continue;
    }
    // Nobody is satisfied: everyone gets its weighted portion, rounded by largest remainder.
    std::vector<Int128> parts;
    parts.reserve(members.size());
    for (size_t i : members) {
      parts.push_back(weight[i]);
    }
    std::vector<int64_t> portions = apportion(amount, parts, wsum);
    for (size_t k = 0; k < members.size(); ++k) {
      const int64_t g = std::min(portions[k], need[members[k]]);
      share[members[k]] += g;
      need[members[k]] -= g;
      given_total += g;
    }
    break;
  }
  return given_total;
}

}  // namespace

std::vector<int64_t> divide(int64_t total, std::span<const Claimant> claimants) {
  const size_t n = claimants.size();
  std::vector<int64_t> share(n, 0);
  if (total <= 0 || n == 0) {
    return share;
  }
  std::vector<int64_t> base(n);
  Int128 base_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    base[i] = std::max<int64_t>(0, std::min(claimants[i].quota, claimants[i].demand));
    base_sum += base[i];
  }
  if (base_sum >= total) {
    // Guarantees exceed what there is: scale every guarantee down in proportion.
    std::vector<Int128> parts(base.begin(), base.end());
    return base_sum == 0 ? share : apportion(total, parts, base_sum);
  }
  int64_t remaining = total - static_cast<int64_t>(base_sum);
  std::vector<int64_t> need(n);
  std::vector<int64_t> weight(n);
  for (size_t i = 0; i < n; ++i) {
    share[i] = base[i];
    need[i] = std::max<int64_t>(0, claimants[i].demand - base[i]);
    weight[i] = std::max<int64_t>(0, claimants[i].weight);
  }
  // Priority groups, highest first.
  std::vector<int32_t> priorities;
  for (const Claimant& c : claimants) {
    priorities.push_back(c.priority);
  }
  std::sort(priorities.begin(), priorities.end(), std::greater<>());
  priorities.erase(std::unique(priorities.begin(), priorities.end()), priorities.end());
  for (int32_t p : priorities) {
    if (remaining <= 0) {
      break;
    }
    std::vector<size_t> members;
    for (size_t i = 0; i < n; ++i) {
      if (claimants[i].priority == p && need[i] > 0 && weight[i] > 0) {
        members.push_back(i);
      }
    }
    remaining -= waterFill(remaining, std::move(members), need, weight, share);
  }
  return share;
}

namespace {

// What a queue's subtree can use in one dimension: allocated plus pending, clipped by the limits
// of the queue (its own; ancestors' limits clip at their level).
int64_t demandOf(const Queue& q, size_t dim) {
  return std::min(q.limit[dim], q.allocated[dim] + q.pending[dim]);
}

}  // namespace

void computeFairShare(QueueTree& tree, const Amounts& capacity, std::span<const int64_t> weights) {
  const size_t dims = tree.space().size();
  auto weight_of = [&](QueueId q) { return weights.empty() ? tree.queue(q).weight : weights[q]; };
  auto split = [&](const std::vector<QueueId>& children, const Amounts& total) {
    std::vector<Claimant> claimants(children.size());
    for (size_t d = 0; d < dims; ++d) {
      for (size_t i = 0; i < children.size(); ++i) {
        const Queue& c = tree.queue(children[i]);
        claimants[i] = {demandOf(c, d), c.quota[d], weight_of(children[i]), c.priority};
      }
      std::vector<int64_t> shares = divide(total[d], claimants);
      for (size_t i = 0; i < children.size(); ++i) {
        Queue& c = tree.mutableQueue(children[i]);
        c.fair_share[d] = shares[i];
        // The guaranteed part: quota up to demand, or the scaled-down share when guarantees
        // exceed the total (then the share is exactly that). CPU or memory without a quota is
        // not guaranteed as such: there the fair share stands in.
        const bool unguarded = (d == kCpuDim || d == kMemoryDim) && c.quota[d] == 0;
        c.deserved[d] =
            unguarded ? shares[i] : std::min({c.quota[d], claimants[i].demand, shares[i]});
      }
    }
  };
  split(tree.roots(), capacity);
  for (QueueId q : tree.topDown()) {
    if (!tree.queue(q).isLeaf()) {
      split(tree.queue(q).children, tree.queue(q).fair_share);
    }
  }
}

}  // namespace tessera::sched
