// The workload registry's feeds: the store's watch into the registry and on to the scheduler
// (new workloads, cancel requests), the scheduler's status changes back into the store, and the
// collection of finished workloads past their retention. docs/architecture.md, "One workload
// registry".
#include <algorithm>

#include "core/log.h"
#include "core/rfc3339.h"
#include "server/api_util.h"
#include "server/control_plane.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

store::WatchCallback ControlPlane::feedCallback() {
  return [this](const store::WatchResponse& w) { onStoreEvents(w); };
}

void ControlPlane::onStoreEvents(const store::WatchResponse& w) {
  if (!w.error.isOk()) {
    // Its last response. What it would have brought is read again (resumeFeed); until then
    // handlers' own writes wait for it (waitForOwnWrite, at most 5 s).
    core::logError(
        "the store's watch of the workloads ended at revision {}: {}; reading them again and "
        "watching on from there",
        registry_.revision(), w.error.message());
    {
      std::lock_guard lock(feed_mu_);
      watching_ = false;
    }
    feed_again_.due();
    return;
  }
  // Into the registry first: a handler waiting for this revision reads it from there.
  const std::vector<WorkloadChange> changes = registry_.apply(w);
  std::set<std::string> changed;
  for (const WorkloadChange& c : changes) {
    changed.insert(c.tenant);
    if (c.type == WorkloadChange::Type::kAdded) {
      // A new workload, to the scheduler. Not if its tenant is being deleted: that deletion
      // removes it from the store, or, if it fails, hands it over (passed_over_).
      {
        std::lock_guard lock(mu_);
        if (!tenants_.contains(c.tenant)) {
          passed_over_[c.tenant].insert(c.name);
          continue;
        }
      }
      handOver(c.tenant, *c.record);
    } else if (c.type == WorkloadChange::Type::kModified && c.record->cancel_requested &&
               !(c.before && c.before->cancel_requested)) {
      driver_.cancel(c.tenant, c.name);
    } else if (c.type == WorkloadChange::Type::kModified && c.before &&
               c.record->suspended != c.before->suspended) {
      driver_.setSuspended(c.tenant, c.name, c.record->suspended);
    }
  }
  // Last, once the registry holds the new records: a long poll woken here answers with them,
  // and Kubernetes watches get their events.
  for (const std::string& tenant : changed) {
    workload_watchers_->notify(tenant);
  }
  if (!changed.empty()) {
    kubeWatchNotify(changed);
  }
}

core::Status ControlPlane::resumeFeed() {
  TESSERA_ASSIGN_OR_RETURN(const store::RangeResult now,
                           store_.range("/tenants/", store::prefixEnd("/tenants/")));
  // No watch runs now: this thread is the feed's only writer until the next watch starts.
  const store::WatchResponse caught_up = registry_.catchUp(now);
  if (now.revision > registry_.revision()) {
    onStoreEvents(caught_up);  // New workloads to the scheduler, cancels, watches' events.
  }
  TESSERA_ASSIGN_OR_RETURN(
      const store::WatchId feed,
      store_.watch("/tenants/", store::prefixEnd("/tenants/"), now.revision + 1, feedCallback()));
  {
    std::lock_guard lock(feed_mu_);
    watch_ = feed;
    watching_ = true;
  }
  core::logInfo(
      "the store's watch of the workloads resumed at revision {} ({} workloads caught up)",
      now.revision + 1, caught_up.events.size());
  return core::Status::ok();
}

void ControlPlane::handOver(const std::string& tenant, const WorkloadRecord& record) {
  auto cmd = commandFromRecord(tenant, record);
  core::Status st = cmd.isOk() ? driver_.submit(std::move(cmd).value()) : cmd.status();
  if (!st.isOk()) {
    // Stored by the next pass (this runs on the store's watch thread, which must not wait for
    // its own next event).
    driver_.reject(tenant, record.name, st.message());
  }
}

void ControlPlane::waitForOwnWrite(int64_t revision) const {
  if (!registry_.waitFor(revision, std::chrono::seconds(5))) {
    core::logWarn(
        "the store's watch has not brought revision {} after 5 s (at {}); reads may not show "
        "that write yet",
        revision, registry_.revision());
  }
}

core::Status ControlPlane::onDriverChanges(const std::map<std::string, WorkloadStatus>& changed) {
  // A record is read from the cache and written back whole: one writer at a time, so a status
  // change never overwrites a cancel request (or the reverse).
  std::lock_guard write_lock(status_write_mu_);
  // One store transaction per batch of changes, not one write each: a pass that starts many
  // workloads must not fall behind on fsyncs.
  std::vector<std::pair<std::string, std::string>> writes;
  for (const auto& [key, status] : changed) {
    const size_t slash = key.find('/');
    const std::string tenant = key.substr(0, slash);
    const std::string name = key.substr(slash + 1);
    const WorkloadPtr stored = registry_.get(tenant, name);
    if (stored == nullptr) {
      continue;
    }
    WorkloadRecord rec = *stored;
    const WorkloadPhase before = rec.status.phase;
    rec.status = status;
    rec.status.events.clear();
    rec.status.restarts.clear();
    const std::string now = core::formatRfc3339(clock_.wallNow());
    for (const std::string& text : status.restarts) {
      rec.addEvent(now, "restarting", text);
    }
    for (const std::string& text : status.events) {
      request_metrics_.countEviction(tenant, evictionReason(text));
      rec.addEvent(now, "evicted", text);
    }
    if (before == WorkloadPhase::kPending && status.phase == WorkloadPhase::kRunning &&
        rec.started.empty()) {
      // Its first start: how long it waited since its submission (the queue SLO).
      const auto submitted = core::parseRfc3339(rec.submitted);
      rec.started = core::formatRfc3339Millis(clock_.wallNow());
      if (submitted) {
        request_metrics_.observeStartDelay(
            tenant, rec.spec.value("queue", "default"),
            std::chrono::duration<double>(clock_.wallNow() - *submitted).count());
      }
    }
    if (before != status.phase) {
      rec.addEvent(now, std::string(phaseName(status.phase)));
      if (isFinished(status.phase) && rec.finished.empty()) {
        rec.finished = core::formatRfc3339Millis(clock_.wallNow());  // Retention counts.
      }
    }
    writes.emplace_back(workloadKey(tenant, name), encodeWorkload(rec));
  }
  const auto base = options_.status_write_deadline;
  int64_t written = 0;
  for (size_t i = 0; i < writes.size(); i += store::kMaxTxnOps) {
    store::Txn txn;
    for (size_t k = i; k < std::min(writes.size(), i + store::kMaxTxnOps); ++k) {
      txn.success.push_back(store::Op::put(writes[k].first, std::move(writes[k].second)));
    }
    // Whole records written as they are now, under status_write_mu_: writing them twice is
    // writing them once, so an etcd leader change costs the pass a retry, not a timeout.
    txn.idempotent = true;
    txn.deadline = base * (1 << std::min(status_failures_, 4));
    auto r = store_.txn(std::move(txn));
    if (!r.isOk()) {
      ++status_failures_;
      return r.status();
    }
    written = r->revision;
  }
  status_failures_ = 0;
  // The next batch (and a cancel) starts from these records.
  waitForOwnWrite(written);
  return core::Status::ok();
}

void ControlPlane::collectFinishedWorkloads() {
  const core::WallTime now = clock_.wallNow();
  std::vector<std::pair<std::string, std::string>> due;  // (tenant, name)
  for (const auto& [tenant, rec] : registry_.all()) {
    if (!isFinished(rec->status.phase)) {
      continue;
    }
    // A pod deleted through Kubernetes goes once it has stopped, whatever the retention.
    if (rec->kube.is_object() && rec->kube.contains("deletionTimestamp")) {
      due.emplace_back(tenant, rec->name);
      continue;
    }
    int64_t keep_s =
        tenantSetting(tenant, "workload_retention_seconds", options_.default_workload_retention_s);
    // A Job's ttlSecondsAfterFinished is its own retention (0: gone once finished).
    const bool ttl = rec->kube.is_object() && rec->kube.contains("spec") &&
                     rec->kube["spec"].is_object() &&
                     rec->kube["spec"].contains("ttlSecondsAfterFinished") &&
                     rec->kube["spec"]["ttlSecondsAfterFinished"].is_number_integer();
    if (ttl) {
      keep_s = rec->kube["spec"]["ttlSecondsAfterFinished"].get<int64_t>();
    } else if (keep_s <= 0) {
      continue;  // Kept until deleted with the tenant.
    }
    const auto finished = core::parseRfc3339(rec->finished);
    if (finished && *finished + std::chrono::seconds(keep_s) <= now) {
      due.emplace_back(tenant, rec->name);
    }
  }
  for (const auto& [tenant, name] : due) {
    {
      // No status write puts it back meanwhile: it waits until the registry has it gone.
      std::lock_guard write_lock(status_write_mu_);
      auto deleted = store_.deleteRange(workloadKey(tenant, name));
      if (!deleted.isOk()) {
        continue;  // Tried again at the next sweep.
      }
      waitForOwnWrite(deleted->revision);
    }
    // Its name may be used again. Not under status_write_mu_: a pass holds the driver's lock
    // while it writes statuses (onDriverChanges), so the two would wait for each other for good.
    // A status write from here on finds no record and writes none.
    driver_.forgetWorkload(tenant, name);
    audit::AuditEvent ev;
    ev.type = audit::AuditType::kResponse;
    ev.request_id = api::requestId();
    ev.tenant = tenant;
    ev.request.method = "COLLECT";
    ev.request.path = "tenants/" + tenant + "/workloads/" + name;
    ev.request.body = {{"event", "finished workload collected after its retention"}};
    ev.response.status = 200;
    (void)auditor_.record(ev);
  }
}

}  // namespace tessera::server
