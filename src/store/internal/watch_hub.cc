#include "store/internal/watch_hub.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

#include "store/internal/checks.h"

namespace tessera::store::internal {
namespace {

// Events read from the history per chunk: bounds the memory of a catch-up and how long live
// watchers wait behind one.
constexpr size_t kChunkEvents = 1000;

}  // namespace

WatchHub::WatchHub(HistoryReader reader, int64_t committed, int64_t compacted,
                   size_t max_buffered_events)
    : reader_(std::move(reader)),
      max_buffered_events_(max_buffered_events),
      committed_(committed),
      compacted_(compacted),
      buffer_start_(committed + 1),
      frontier_(committed),
      thread_([this] { run(); }) {}

WatchHub::~WatchHub() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

core::Result<WatchId> WatchHub::add(std::string key, std::string range_end, int64_t from_revision,
                                    WatchCallback callback) {
  std::lock_guard lock(mu_);
  if (stop_) {
    return core::Status(core::StatusCode::kUnavailable, "the store is closing");
  }
  const int64_t from = from_revision == 0 ? committed_ + 1 : from_revision;
  if (from < compacted_) {
    return core::outOfRange("cannot watch from revision " + std::to_string(from) +
                            ": the history before revision " + std::to_string(compacted_) +
                            " has been compacted; read the current state with range() and watch "
                            "from its revision + 1");
  }
  auto w = std::make_shared<Watcher>();
  w->id = next_id_++;
  w->key = std::move(key);
  w->range_end = std::move(range_end);
  w->callback = std::move(callback);
  w->next_revision = from;
  watchers_[w->id] = w;
  added_.push_back(w);
  wake_.notify_all();
  return WatchId{w->id};
}

void WatchHub::cancel(WatchId id) {
  std::unique_lock lock(mu_);
  if (auto it = watchers_.find(id.value()); it != watchers_.end()) {
    it->second->done = true;
    watchers_.erase(it);
  }
  if (std::this_thread::get_id() != thread_.get_id()) {
    callback_done_.wait(lock, [&] { return running_ != id.value(); });
  }
}

void WatchHub::publish(int64_t revision, std::vector<Event> events) {
  {
    std::lock_guard lock(mu_);
    committed_ = revision;
    if (buffer_.size() + events.size() > max_buffered_events_) {
      // Watchers are too far behind: let them read this stretch back from the history.
      buffer_.clear();
      buffer_start_ = revision + 1;
    } else {
      std::move(events.begin(), events.end(), std::back_inserter(buffer_));
    }
  }
  wake_.notify_all();
}

void WatchHub::compacted(int64_t compact_revision) {
  std::lock_guard lock(mu_);
  compacted_ = std::max(compacted_, compact_revision);
}

void WatchHub::run() {
  for (;;) {
    std::vector<Event> live;
    int64_t live_last = 0;     // Deliver `live` to the synced group, up to this revision.
    int64_t history_last = 0;  // Or read the synced group's next events from the history.
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stop_ || committed_ > frontier_ || !added_.empty() || !unsynced_.empty();
      });
      if (stop_) {
        return;
      }
      for (WatcherPtr& w : added_) {
        (w->next_revision > frontier_ ? synced_ : unsynced_).push_back(std::move(w));
      }
      added_.clear();
      if (committed_ > frontier_) {
        if (buffer_start_ <= frontier_ + 1) {
          live.assign(std::make_move_iterator(buffer_.begin()),
                      std::make_move_iterator(buffer_.end()));
          buffer_.clear();
          live_last = committed_;
          buffer_start_ = committed_ + 1;
        } else {
          history_last = buffer_start_ - 1;
        }
      }
    }
    prune(synced_);
    prune(unsynced_);

    if (live_last > 0) {
      deliver(synced_, live, live_last);
      frontier_ = live_last;
    } else if (history_last > 0) {
      core::Result<HistoryChunk> chunk = reader_(frontier_ + 1, history_last, kChunkEvents);
      if (!chunk.isOk() || chunk->last_revision <= frontier_) {
        endAll(synced_, chunk.isOk() ? core::internalError("watch history read made no progress")
                                     : chunk.status());
        frontier_ = history_last;
      } else {
        endStale(synced_, chunk->compact_revision);
        deliver(synced_, chunk->events, chunk->last_revision);
        frontier_ = chunk->last_revision;
      }
    }

    if (!unsynced_.empty()) {
      int64_t from = unsynced_.front()->next_revision;
      for (const WatcherPtr& w : unsynced_) {
        from = std::min(from, w->next_revision);
      }
      core::Result<HistoryChunk> chunk = reader_(from, frontier_, kChunkEvents);
      if (!chunk.isOk() || chunk->last_revision < from) {
        endAll(unsynced_, chunk.isOk() ? core::internalError("watch history read made no progress")
                                       : chunk.status());
      } else {
        endStale(unsynced_, chunk->compact_revision);
        deliver(unsynced_, chunk->events, chunk->last_revision);
      }
      prune(unsynced_);
      for (WatcherPtr& w : unsynced_) {
        if (w->next_revision > frontier_) {
          synced_.push_back(std::move(w));
        }
      }
      std::erase(unsynced_, nullptr);
    }
  }
}

void WatchHub::deliver(std::vector<WatcherPtr>& group, const std::vector<Event>& events,
                       int64_t last_revision) {
  for (size_t i = 0; i < events.size();) {
    const int64_t revision = events[i].kv.mod_revision;
    size_t end = i;
    while (end < events.size() && events[end].kv.mod_revision == revision) {
      ++end;
    }
    for (const WatcherPtr& w : group) {
      if (w->done || w->next_revision > revision) {
        continue;
      }
      w->next_revision = revision + 1;
      WatchResponse response;
      response.revision = revision;
      for (size_t k = i; k < end; ++k) {
        if (inRange(events[k].kv.key, w->key, w->range_end)) {
          response.events.push_back(events[k]);
        }
      }
      if (!response.events.empty()) {
        invoke(*w, response);
      }
    }
    i = end;
  }
  for (const WatcherPtr& w : group) {
    w->next_revision = std::max(w->next_revision, last_revision + 1);
  }
}

void WatchHub::endStale(std::vector<WatcherPtr>& group, int64_t compact_revision) {
  for (const WatcherPtr& w : group) {
    if (!w->done && w->next_revision < compact_revision) {
      end(*w,
          core::outOfRange("watch needs revision " + std::to_string(w->next_revision) +
                           " but the history before revision " + std::to_string(compact_revision) +
                           " has been compacted; read the current state with range() and "
                           "watch again from its revision + 1"));
    }
  }
  prune(group);
}

void WatchHub::endAll(std::vector<WatcherPtr>& group, const core::Status& error) {
  for (const WatcherPtr& w : group) {
    end(*w, error.withContext("reading the watch history"));
  }
  group.clear();
}

bool WatchHub::invoke(Watcher& w, const WatchResponse& response) {
  {
    std::lock_guard lock(mu_);
    if (w.done) {
      return false;
    }
    running_ = w.id;
  }
  w.callback(response);
  {
    std::lock_guard lock(mu_);
    running_ = 0;
  }
  callback_done_.notify_all();
  return true;
}

void WatchHub::end(Watcher& w, const core::Status& error) {
  WatchResponse response;
  response.revision = w.next_revision;
  response.error = error;
  invoke(w, response);
  std::lock_guard lock(mu_);
  w.done = true;
  watchers_.erase(w.id);
}

void WatchHub::prune(std::vector<WatcherPtr>& group) {
  std::erase_if(group, [](const WatcherPtr& w) { return w->done.load(); });
}

}  // namespace tessera::store::internal
