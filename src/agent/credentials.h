// Credential files of tasks (issue #6; docs/secrets.md "Workload identity"): what the server
// hands a task with its assignment (its identity token, later its secrets) is kept in one folder
// per task, readable by the task's user only, rewritten in place (write + rename) when the server
// sends a new version, and removed when the task is gone. The root should be a tmpfs
// (/dev/shm by default, where the machine has it), so credentials never reach a disk.
//
//   CredentialFiles files(CredentialFiles::defaultRoot("gpu-a", "/var/lib/tessera/agent"));
//   files.write("team-1.train.0", "identity-token", jwt, "tessera-team-1");
//   // the task reads $TESSERA_CREDENTIALS_DIR/identity-token
//   files.remove("team-1.train.0");
//
// Thread-safe (each call touches only its task's folder; the agent serializes calls per task).
#pragma once

#include <string>

#include "core/status.h"

namespace tessera::agent {

class CredentialFiles {
 public:
  explicit CredentialFiles(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string dir(const std::string& task) const { return root_ + "/" + task; }
  // Writes `content` to the task's file `name` ([a-z0-9][a-z0-9.-]*, 1-64 bytes), mode 0400,
  // owned by `user` ("" : the agent's own user), in a folder of mode 0700 owned by the same user.
  core::Status write(const std::string& task, const std::string& name, const std::string& content,
                     const std::string& user) const;
  // Removes the task's folder and everything in it.
  void remove(const std::string& task) const;

  // /dev/shm/tessera-<node>-<hash of work_dir> where /dev/shm is a tmpfs, else
  // <work_dir>/credentials.
  static std::string defaultRoot(const std::string& node, const std::string& work_dir);

 private:
  std::string root_;
};

}  // namespace tessera::agent
