// MPS control daemons: one per GPU and Unix user, started when the first MPS task of that user
// lands on the GPU and stopped after its last one ends. Each has its own pipe and log folder,
// <run_dir>/mps/<gpu-uuid>-<user>/{pipe,log}, which its tasks find through
// CUDA_MPS_PIPE_DIRECTORY (gpuEnvironment); a task's own limits (active thread percentage,
// pinned memory) are its environment's, so one daemon serves clients with different limits.
//
//   ProcessMpsControl control;                 // runs nvidia-cuda-mps-control
//   MpsDaemons daemons(control, "/run/tessera");
//   TESSERA_ASSIGN_OR_RETURN(std::string pipe, daemons.acquire("GPU-...", "tessera-team-a"));
//   ...
//   daemons.release("GPU-...", "tessera-team-a");   // the last one: "quit"
//
// In simulation (`RecordingMpsControl`) the same requests are recorded instead, so the logic
// is tested without GPUs.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/runtime.h"
#include "core/status.h"

namespace tessera::agent {

struct MpsDaemon {
  std::string gpu_uuid;
  std::string user;  // "" : the agent's own user.
  std::string pipe_directory;
  std::string log_directory;
};

class MpsControl {
 public:
  virtual ~MpsControl() = default;
  virtual core::Status start(const MpsDaemon& d) = 0;
  virtual core::Status stop(const MpsDaemon& d) = 0;
  // Whether the daemon's folders must belong to its user (a real daemon runs as that user; a
  // recorded one runs nothing, and its users need not exist on this machine).
  virtual bool runsAsUser() const { return true; }
};

// The real one: `nvidia-cuda-mps-control -d` as the daemon's user, with CUDA_VISIBLE_DEVICES
// set to its GPU and its own pipe and log folders; stopped by sending it "quit".
class ProcessMpsControl : public MpsControl {
 public:
  explicit ProcessMpsControl(std::string binary = "nvidia-cuda-mps-control")
      : binary_(std::move(binary)) {}
  core::Status start(const MpsDaemon& d) override;
  core::Status stop(const MpsDaemon& d) override;

 private:
  std::string binary_;
};

// Simulation: records "start GPU-x user pipe" and "stop ..." lines.
class RecordingMpsControl : public MpsControl {
 public:
  core::Status start(const MpsDaemon& d) override;
  core::Status stop(const MpsDaemon& d) override;
  bool runsAsUser() const override { return false; }
  std::vector<std::string> calls() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> calls_;
};

class MpsDaemons {
 public:
  MpsDaemons(MpsControl& control, std::string run_dir)
      : control_(control), run_dir_(std::move(run_dir)) {}
  // Stops every daemon still running.
  ~MpsDaemons();
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // One more client of `user` on `gpu_uuid`: starts the daemon if it is the first. Returns the
  // pipe directory for the task's CUDA_MPS_PIPE_DIRECTORY.
  core::Result<std::string> acquire(const std::string& gpu_uuid, const std::string& user);
  // One client fewer; the last one stops the daemon. Not acquired: not found.
  core::Status release(const std::string& gpu_uuid, const std::string& user);
  // Clients per (GPU, user) with a daemon running.
  std::map<std::pair<std::string, std::string>, int> clients() const;
  // One more client of a daemon an earlier agent left running (a restart): counted, never
  // started again. Its folders are the ones acquire would have made.
  void adopt(const std::string& gpu_uuid, const std::string& user);
  // Forgets every daemon without stopping it: the agent goes and leaves its tasks running under
  // their shims (a restart), and the next agent adopts them with their daemons.
  void detach();

 private:
  MpsControl& control_;
  std::string run_dir_;
  mutable std::mutex mu_;
  struct Entry {
    MpsDaemon daemon;
    int clients = 0;
  };
  std::map<std::pair<std::string, std::string>, Entry> daemons_;
};

// A runtime that gives MPS tasks their daemons: before an MPS task starts it acquires the
// daemon of each of its GPUs for its user (the pipe folder goes into the task's environment),
// and after the task ends it releases them, so the last client's exit stops the daemon.
// Other tasks pass through. Exits reach `on_exit` after the release.
//
//   MpsRuntime rt(daemons, on_exit);
//   ProcessRuntime inner(options, rt.exitHandler());
//   rt.wrap(inner);
//
// Across an agent restart the daemons stay with their clients: which task holds which daemon
// is kept in `holds_file` (when given), and a new agent calls `restore` before it adopts the
// tasks (ProcessRuntime::adopt), then `forgetGone` with the tasks still running.
class MpsRuntime : public Runtime {
 public:
  MpsRuntime(MpsDaemons& daemons, OnExit on_exit, std::string holds_file = "")
      : daemons_(daemons), on_exit_(std::move(on_exit)), holds_file_(std::move(holds_file)) {}
  // Takes back the holds an earlier agent wrote: each task's daemons count it as a client
  // again (MpsDaemons::adopt), so its exit releases them. Errors: the file cannot be read.
  core::Status restore();
  // The tasks restored that no longer run (they ended while no agent watched) release their
  // daemons: the last client's release stops one.
  void forgetGone(const std::set<std::string>& running);
  // The inner runtime's exit callback.
  OnExit exitHandler();
  void wrap(Runtime& inner) { inner_ = &inner; }

  core::Status start(const TaskSpec& spec) override;
  core::Status stop(const std::string& id, std::chrono::milliseconds grace) override {
    return inner_->stop(id, grace);
  }
  std::vector<std::string> running() const override { return inner_->running(); }
  bool needsPull(const TaskSpec& spec) const override { return inner_->needsPull(spec); }
  core::Status pull(const TaskSpec& spec) override { return inner_->pull(spec); }

 private:
  void releaseFor(const std::string& id);
  // Writes held_ to holds_file_ (write and rename); a failure is logged by the caller's log.
  void saveHolds();

  MpsDaemons& daemons_;
  OnExit on_exit_;
  Runtime* inner_ = nullptr;
  std::mutex mu_;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> held_;  // id -> daemons
  const std::string holds_file_;
};

}  // namespace tessera::agent
