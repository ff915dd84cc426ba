// WatchHub: delivers a store's committed events to its watchers, on one thread of its own. Not
// tied to a backend: the backend publishes each committed batch of events and gives the hub a way
// to read older events back from its durable history.
//
//   WatchHub hub(readHistory, /*committed=*/rev, /*compacted=*/compact_rev, /*buffer=*/10000);
//   hub.add("/a/", prefixEnd("/a/"), /*from_revision=*/0, callback);
//   ... after each commit: hub.publish(new_revision, events_of_the_batch);
//
// How delivery works. The hub keeps a `frontier`: the last revision delivered to every watcher
// that is caught up (the "synced" group). Published events wait in a buffer until the hub thread
// delivers them, revision by revision, to the synced group: each revision reaches every synced
// watcher before any callback for the next one. A watcher that starts at an older revision joins
// the "unsynced" group and is caught up from the history in chunks, one chunk between live
// deliveries, then joins the synced group. If the buffer grows past its bound (callbacks slower
// than writes), it is dropped and the synced group reads that stretch back from the history too,
// so memory stays bounded and no event is lost. A watcher whose next revision has been compacted
// away gets a final response with an OUT_OF_RANGE error.
//
// Thread-safety: every public method may be called from any thread, including from inside a
// callback (which runs on the hub thread with no hub lock held).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "store/store.h"

namespace tessera::store::internal {

// Events read back from the history: every event with from <= revision <= `last_revision`, in
// order, whole revisions only. `last_revision` may be below the `to` asked for (the chunk was
// full). `compact_revision` is the store's compact revision as of the read: events below it are
// gone, so a chunk starting below it is incomplete.
struct HistoryChunk {
  std::vector<Event> events;
  int64_t last_revision = 0;
  int64_t compact_revision = 0;
};

// Reads events with from <= revision <= to, about `max_events` of them (at least one revision).
using HistoryReader =
    std::function<core::Result<HistoryChunk>(int64_t from, int64_t to, size_t max_events)>;

class WatchHub {
 public:
  // `committed` and `compacted`: the store's revision and compact revision when the hub starts.
  // `max_buffered_events`: published events kept in memory before the hub falls back to reading
  // the history.
  WatchHub(HistoryReader reader, int64_t committed, int64_t compacted, size_t max_buffered_events);
  // Stops the hub thread; no callback runs after this returns. Must not be called from a callback.
  ~WatchHub();
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // Registers a watch (see Store::watch). The key range must already be validated.
  core::Result<WatchId> add(std::string key, std::string range_end, int64_t from_revision,
                            WatchCallback callback);
  // See Store::cancelWatch.
  void cancel(WatchId id);

  // Announces that everything up to `revision` is committed, with these events (the events of
  // the revisions since the last call, in order). Calls must come in revision order.
  void publish(int64_t revision, std::vector<Event> events);
  // Announces a new compact revision.
  void compacted(int64_t compact_revision);

 private:
  struct Watcher {
    int64_t id = 0;
    std::string key;
    std::string range_end;
    WatchCallback callback;
    int64_t next_revision = 0;      // Hub thread only, once adopted.
    std::atomic<bool> done{false};  // Cancelled or ended; set under mu_.
  };
  using WatcherPtr = std::shared_ptr<Watcher>;

  void run();
  // Delivers `events` (whole revisions, in order) to the watchers of `group` that are at or
  // before each revision, then moves every watcher of the group past `last_revision`.
  void deliver(std::vector<WatcherPtr>& group, const std::vector<Event>& events,
               int64_t last_revision);
  // Ends the watchers of `group` whose next revision is below `compact_revision`, or all of them
  // with `error` if it failed.
  void endStale(std::vector<WatcherPtr>& group, int64_t compact_revision);
  void endAll(std::vector<WatcherPtr>& group, const core::Status& error);
  // Calls `w`'s callback unless it is done; false if it was.
  bool invoke(Watcher& w, const WatchResponse& response);
  void end(Watcher& w, const core::Status& error);
  static void prune(std::vector<WatcherPtr>& group);

  const HistoryReader reader_;
  const size_t max_buffered_events_;

  std::mutex mu_;                          // Guards every field down to `thread_`.
  std::condition_variable wake_;           // The hub thread waits for work.
  std::condition_variable callback_done_;  // cancel() waits for a running callback.
  bool stop_ = false;
  int64_t committed_;         // Highest published revision.
  int64_t compacted_;         // Highest announced compact revision.
  std::deque<Event> buffer_;  // Published, not yet delivered to the synced group.
  int64_t buffer_start_;      // Every event of revisions [buffer_start_, committed_] is in buffer_.
  int64_t next_id_ = 1;
  std::map<int64_t, WatcherPtr> watchers_;  // Live watchers by id.
  std::vector<WatcherPtr> added_;           // Registered, not yet adopted by the hub thread.
  int64_t running_ = 0;                     // Id of the watcher whose callback runs now.

  // Hub thread only.
  int64_t frontier_;  // Last revision delivered to the synced group.
  std::vector<WatcherPtr> synced_;
  std::vector<WatcherPtr> unsynced_;

  std::thread thread_;
};

}  // namespace tessera::store::internal
