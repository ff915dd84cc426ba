// Credential files of tasks (issue #6; docs/secrets.md "Workload identity"): what the server
// hands a task with its assignment (its identity token, its secrets) is kept in one folder per
// task, readable by the task's user only, rewritten in place (write + rename) when the server
// sends a new version, and removed when the task is gone. The root should be a tmpfs
// (/dev/shm by default, where the machine has it), so credentials never reach a disk.
//
// Layout and modes (docs/agent.md "Tenant isolation"):
//   <root>/                  the agent's user, 0711: others may pass through, never list
//   <root>/<task>/           the agent's user, group of the task's user, 0750 (0700 when the
//                            task runs as the agent's own user): the task can list and read it,
//                            not write in it; nobody else can enter it
//   <root>/<task>/<name>     the task's user, 0400
// The root must be the agent's alone: `prepare` creates it, or accepts an existing one only if
// it is a real folder (no link) owned by the agent's user with mode 0711, so a name another user
// made first under a world-writable parent (/dev/shm) is refused, never used.
//
//   CredentialFiles files(CredentialFiles::defaultRoot("gpu-a", "/var/lib/tessera/agent"));
//   TESSERA_RETURN_IF_ERROR(files.prepare());
//   files.write("team-1.train.0", "identity-token", jwt, "tessera-team-1");
//   // the task reads $TESSERA_CREDENTIALS_DIR/identity-token
//   files.remove("team-1.train.0");
//
// Thread-safe (each call touches only its task's folder; the agent serializes calls per task).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::agent {

class CredentialFiles {
 public:
  explicit CredentialFiles(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string dir(const std::string& task) const { return root_ + "/" + task; }
  // Creates the root (and its parents), mode 0711, or checks that the existing one is the
  // agent's own (see above). write() checks it again, so a root removed meanwhile comes back.
  core::Status prepare() const;
  // Writes `content` to the task's file `name` ([a-z0-9][a-z0-9.-]*, 1-64 bytes), mode 0400,
  // owned by `user` ("" : the agent's own user), in the task's folder (see above).
  core::Status write(const std::string& task, const std::string& name, const std::string& content,
                     const std::string& user) const;
  // Writes a volume's files (relative path -> content, protocol::isVolumeFilePath) into the
  // task's folder `name` (as a file's name), bound read-only into its container: each version in
  // a folder of its own (`..v<n>`), `..data` a link to the current one, and each top-level name a
  // link through `..data`, so that a new version replaces the old at once, as the task sees it
  // (Kubernetes' atomic writer). Folders 0750 (the agent's, the task's group), files 0400 (the
  // task's user).
  core::Status writeVolume(const std::string& task, const std::string& name,
                           const std::map<std::string, std::string>& files,
                           const std::string& user) const;
  // Removes the task's folder and everything in it, without following links (a folder an older
  // agent gave to the task's user may hold what the task put there).
  void remove(const std::string& task) const;
  // The task folders in the root (for an agent that starts, or fences itself, to find folders it
  // did not write itself or no longer tracks).
  std::vector<std::string> list() const;
  // Removes the root if it is empty (an agent that stopped its tasks, as it leaves).
  void removeRootIfEmpty() const;

  // /dev/shm/tessera-<node>-<hash of work_dir> where /dev/shm is a tmpfs, else
  // <work_dir>/credentials.
  static std::string defaultRoot(const std::string& node, const std::string& work_dir);

 private:
  // The root, opened (O_DIRECTORY | O_NOFOLLOW) after prepare's checks; the caller closes it.
  core::Result<int> openRoot() const;
  // The task's folder, made if new (0750, the agent's, the group of `user`; 0700 for the agent's
  // own user), opened; and `user`'s uid and gid.
  struct TaskFolder {
    int fd = -1;  // The caller closes it.
    uid_t uid = 0;
    gid_t gid = 0;
  };
  core::Result<TaskFolder> openTaskFolder(const std::string& task, const std::string& user) const;

  std::string root_;
};

}  // namespace tessera::agent
