// Resumer: runs `resume` on a thread of its own each time it is told to (`due`), until it
// succeeds, waiting between failures (100 ms, doubling to 5 s). For what follows the store with
// a watch that the store may end (its history compacted while the server was cut off): the
// watch's last callback says `due()`, and `resume` reads the state again and watches on.
//
//   Resumer again("the store's watch of the workloads", [this] { return resumeFeed(); });
//   ... in the watch's callback, on its error:  again.due();
//   ... before what `resume` uses goes:         again.stop();
//
// Thread-safe; `due` may be called from any thread, also while `resume` runs (it runs again).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"

namespace tessera::server {

class Resumer {
 public:
  // `what`: what is resumed, for the log.
  Resumer(std::string what, std::function<core::Status()> resume)
      : what_(std::move(what)), resume_(std::move(resume)) {}
  ~Resumer() { stop(); }
  Resumer(const Resumer&) = delete;
  Resumer& operator=(const Resumer&) = delete;

  // `resume` should run (again). Nothing once stopped.
  void due();
  // Waits for a `resume` that runs to return; nothing runs after. Idempotent.
  void stop();

 private:
  void run();

  const std::string what_;
  const std::function<core::Status()> resume_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool due_ = false;
  bool stopped_ = false;
  std::thread thread_;  // Started at the first `due`.
};

}  // namespace tessera::server
