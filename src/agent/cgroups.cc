#include "agent/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "agent/device_filter.h"
#include "agent/exec_util.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

core::Status writeFile(const std::string& path, const std::string& value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    return core::unavailable("cgroup: cannot open " + path + ": " + std::strerror(errno));
  }
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return core::unavailable("cgroup: cannot write '" + value + "' to " + path + ": " +
                             std::strerror(n < 0 ? err : EIO));
  }
  return core::Status::ok();
}

// "key N" lines (memory.events, memory.oom_control): the value of `key`, or 0.
int64_t readKeyed(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) {
      return v;
    }
  }
  return 0;
}

// Controllers of a v1 mount folder name: "cpu,cpuacct" -> {cpu, cpuacct}.
std::set<std::string> controllersOf(const std::string& folder) {
  std::set<std::string> out;
  std::stringstream ss(folder);
  for (std::string c; std::getline(ss, c, ',');) {
    out.insert(c);
  }
  return out;
}

// Devices every process may open: null, zero, full, random, urandom, tty, ptmx and the ptys.
constexpr const char* kBasicDevices[] = {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm",
                                         "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm"};

}  // namespace

std::vector<std::string> TaskCgroup::joinPaths() const {
  std::vector<std::string> out;
  out.reserve(dirs.size());
  for (const std::string& d : dirs) {
    out.push_back(d + "/cgroup.procs");
  }
  return out;
}

int64_t TaskCgroup::oomKills() const {
  if (memory_dir.empty()) {
    return 0;
  }
  return version == 1 ? readKeyed(memory_dir + "/memory.oom_control", "oom_kill")
                      : readKeyed(memory_dir + "/memory.events", "oom_kill");
}

std::vector<pid_t> TaskCgroup::pids() const {
  std::set<pid_t> all;
  for (const std::string& d : dirs) {
    // The group's own, and its child groups' (a container runtime makes one for its container).
    std::vector<std::string> groups = {d};
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(d, ec)) {
      if (e.is_directory(ec)) {
        groups.push_back(e.path().string());
      }
    }
    for (const std::string& g : groups) {
      std::ifstream in(g + "/cgroup.procs");
      for (pid_t p = 0; in >> p;) {
        all.insert(p);
      }
    }
  }
  return {all.begin(), all.end()};
}

core::Result<Cgroups> Cgroups::detect(const std::string& folder, const std::string& root,
                                      const std::string& self_cgroup) {
  if (folder.empty() || folder.front() == '/' || folder.find("..") != std::string::npos) {
    return core::invalidArgument("cgroup: folder '" + folder + "' must be a relative path");
  }
  // Our own groups: "ID:controllers:path" lines; v2's is "0::path".
  std::map<std::string, std::string> self;  // Controller ("" for v2) -> path.
  {
    std::ifstream in(self_cgroup);
    if (!in) {
      return core::failedPrecondition("cgroup: cannot read " + self_cgroup);
    }
    for (std::string line; std::getline(in, line);) {
      const size_t a = line.find(':');
      const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
      if (b == std::string::npos) {
        continue;
      }
      const std::string path = line.substr(b + 1);
      const std::string ctrls = line.substr(a + 1, b - a - 1);
      if (ctrls.empty()) {
        self[""] = path;
      }
      for (const std::string& c : controllersOf(ctrls)) {
        self[c] = path;
      }
    }
  }
  Cgroups cg;
  cg.folder_ = folder;
  cg.root_ = root;
  std::error_code ec;
  if (fs::exists(root + "/cgroup.controllers", ec)) {
    cg.version_ = 2;
    const std::string mine = self.contains("") ? self[""] : "/";
    cg.self_dir_ = root + (mine == "/" ? "" : mine);
    cg.unified_parent_ = cg.self_dir_ + "/" + folder;
    std::ifstream available(cg.self_dir_ + "/cgroup.controllers");
    for (std::string c; available >> c;) {
      cg.v2_controllers_.insert(c);
    }
    cg.v2_devices_ = probeDeviceFilter();
    return cg;
  }
  // v1: find the mount folder of each controller we use.
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory(ec)) {
      continue;
    }
    const std::set<std::string> ctrls = controllersOf(e.path().filename().string());
    auto parent_for = [&](const char* controller) {
      const std::string mine = self.contains(controller) ? self[controller] : "/";
      return e.path().string() + (mine == "/" ? "" : mine) + "/" + folder;
    };
    if (ctrls.contains("cpu") && cg.cpu_parent_.empty()) {
      cg.cpu_parent_ = parent_for("cpu");
    }
    if (ctrls.contains("memory") && cg.memory_parent_.empty()) {
      cg.memory_parent_ = parent_for("memory");
    }
    if (ctrls.contains("devices") && cg.devices_parent_.empty()) {
      cg.devices_parent_ = parent_for("devices");
    }
    if (ctrls.contains("pids") && cg.pids_parent_.empty()) {
      cg.pids_parent_ = parent_for("pids");
    }
  }
  if (cg.cpu_parent_.empty() && cg.memory_parent_.empty() && cg.devices_parent_.empty()) {
    return core::failedPrecondition("cgroup: neither v2 (" + root +
                                    "/cgroup.controllers) nor v1 cpu, memory or devices "
                                    "controllers under " +
                                    root);
  }
  return cg;
}

std::string Cgroups::describe() const {
  if (version_ == 2) {
    std::string c;
    for (const char* controller : {"cpu", "memory", "pids"}) {
      if (v2_controllers_.contains(controller)) {
        c += (c.empty() ? "" : ", ") + std::string(controller);
      }
    }
    if (v2_devices_.isOk()) {
      c += (c.empty() ? "" : ", ") + std::string("devices");
    }
    return "cgroup v2 (" + c + ") under " + unified_parent_ +
           (v2_devices_.isOk() ? "" : "; device rules not enforced: " + v2_devices_.message());
  }
  std::string c;
  for (const auto& [name, parent] : {std::pair<const char*, const std::string&>{"cpu", cpu_parent_},
                                     {"memory", memory_parent_},
                                     {"pids", pids_parent_},
                                     {"devices", devices_parent_}}) {
    if (!parent.empty()) {
      c += (c.empty() ? "" : ", ") + std::string(name);
    }
  }
  return "cgroup v1 (" + c + ")";
}

std::string Cgroups::hierarchyOf(const std::string& parent) const {
  if (version_ == 2) {
    return root_;
  }
  // v1's parents are "<root>/<hierarchy>/<agent's group>/<folder>".
  std::string base = root_;
  while (base.size() > 1 && base.back() == '/') {
    base.pop_back();
  }
  return parent.substr(0, parent.find('/', base.size() + 1));
}

TaskCgroup Cgroups::existing(const std::string& name) const {
  TaskCgroup g;
  g.name = name;
  g.version = version_;
  if (!plainFileName(name)) {
    return g;
  }
  for (const std::string* parent :
       {&cpu_parent_, &memory_parent_, &devices_parent_, &pids_parent_, &unified_parent_}) {
    std::error_code ec;
    const std::string dir = *parent + "/" + name;
    if (!parent->empty() && fs::is_directory(dir, ec)) {
      g.dirs.push_back(dir);
      g.view_roots.push_back(hierarchyOf(*parent));
      if (parent == &memory_parent_ ||
          (version_ == 2 && parent == &unified_parent_ && v2_controllers_.contains("memory"))) {
        g.memory_dir = dir;
      }
    }
  }
  return g;
}

core::Result<TaskCgroup> Cgroups::create(const std::string& name,
                                         const CgroupLimits& limits) const {
  if (!plainFileName(name)) {
    return core::invalidArgument("cgroup: '" + name + "' is not a plain group name");
  }
  // A group of this name left over (an agent that died with its tasks) is reused once its
  // processes are gone, so the new task starts clean.
  TESSERA_RETURN_IF_ERROR(killAll(existing(name)));
  TaskCgroup g;
  g.name = name;
  g.version = version_;
  auto make_dir = [&](const std::string& parent) -> core::Result<std::string> {
    std::error_code ec;
    fs::create_directories(parent, ec);
    const std::string dir = parent + "/" + name;
    fs::create_directory(dir, ec);
    if (ec) {
      return core::unavailable("cgroup: cannot create " + dir + ": " + ec.message());
    }
    g.dirs.push_back(dir);
    g.view_roots.push_back(hierarchyOf(parent));
    return dir;
  };
  auto fail = [&](core::Status s) {
    (void)remove(g);
    return s;
  };
  if (version_ == 2) {
    // Task groups get the cpu and memory controllers from their parents: enable them at every
    // level from the agent's own group down. A controller the hierarchy does not offer is an
    // error only for a task that asks for its limit.
    const bool want_cpu = limits.cpu_milli > 0;
    const bool want_memory = limits.memory_mib > 0;
    // The pids limit is the agent's own default for every task, not a task's request: where the
    // hierarchy has no pids controller it is left out (the agent's start-up line says which
    // controllers there are), as on v1.
    const bool want_pids = limits.pids_max > 0 && v2_controllers_.contains("pids");
    for (const auto& [controller, wanted] :
         {std::pair<const char*, bool>{"cpu", want_cpu}, {"memory", want_memory}}) {
      if (wanted && !v2_controllers_.contains(controller)) {
        return core::failedPrecondition(
            std::string("cgroup v2: the ") + controller + " controller is not available under " +
            self_dir_ + " (cgroup.controllers), so no " + controller + " limit can be set");
      }
    }
    std::error_code ec;
    fs::create_directories(unified_parent_, ec);
    std::vector<std::string> levels = {self_dir_};
    for (const fs::path& part : fs::path(unified_parent_).lexically_relative(self_dir_)) {
      levels.push_back(levels.back() + "/" + part.string());
    }
    std::string enable;
    for (const char* controller : {"cpu", "memory", "pids"}) {
      if (v2_controllers_.contains(controller)) {
        enable += (enable.empty() ? "+" : " +") + std::string(controller);
      }
    }
    for (const std::string& level : enable.empty() ? std::vector<std::string>{} : levels) {
      if (core::Status s = writeFile(level + "/cgroup.subtree_control", enable);
          !s.isOk() && (want_cpu || want_memory || want_pids)) {
        return core::Status(s.code(), s.message() +
                                          " (the agent needs a delegated cgroup: run it as a "
                                          "systemd service with Delegate=yes)");
      }
    }
    TESSERA_ASSIGN_OR_RETURN(std::string dir, make_dir(unified_parent_));
    g.memory_dir = v2_controllers_.contains("memory") ? dir : "";
    if (v2_controllers_.contains("cpu")) {
      const std::string cpu =
          want_cpu ? std::to_string(limits.cpu_milli * 100) + " 100000" : "max 100000";
      if (core::Status s = writeFile(dir + "/cpu.max", cpu); !s.isOk() && want_cpu) {
        return fail(s);
      }
    }
    if (v2_controllers_.contains("memory")) {
      const std::string mem =
          want_memory ? std::to_string(limits.memory_mib << 20) : std::string("max");
      if (core::Status s = writeFile(dir + "/memory.max", mem); !s.isOk() && want_memory) {
        return fail(s);
      }
      if (want_memory && fs::exists(dir + "/memory.swap.max", ec)) {
        (void)writeFile(dir + "/memory.swap.max", "0");
      }
    }
    if (v2_controllers_.contains("pids")) {
      const std::string pids = want_pids ? std::to_string(limits.pids_max) : std::string("max");
      if (core::Status s = writeFile(dir + "/pids.max", pids); !s.isOk() && want_pids) {
        return fail(s);
      }
    }
    if (limits.restrict_devices) {
      if (!v2_devices_.isOk()) {
        return fail(v2_devices_);
      }
      if (core::Status s = attachDeviceFilter(dir, limits.devices); !s.isOk()) {
        return fail(s);
      }
    }
    return g;
  }
  if (!cpu_parent_.empty()) {
    auto dir = make_dir(cpu_parent_);
    if (!dir.isOk()) {
      return fail(dir.status());
    }
    const std::string quota =
        limits.cpu_milli > 0 ? std::to_string(limits.cpu_milli * 100) : std::string("-1");
    for (const auto& [file, value] :
         {std::pair<const char*, std::string>{"cpu.cfs_period_us", "100000"},
          {"cpu.cfs_quota_us", quota}}) {
      if (core::Status s = writeFile(*dir + "/" + file, value); !s.isOk()) {
        return fail(s);
      }
    }
  }
  if (!memory_parent_.empty()) {
    auto dir = make_dir(memory_parent_);
    if (!dir.isOk()) {
      return fail(dir.status());
    }
    g.memory_dir = *dir;
    const std::string bytes =
        limits.memory_mib > 0 ? std::to_string(limits.memory_mib << 20) : std::string("-1");
    // The memory limit may never be above memory+swap's: a group reused from an earlier task
    // may have a lower one, so that one is lifted first, and set to the limit after it.
    std::error_code ec;
    const bool memsw = fs::exists(*dir + "/memory.memsw.limit_in_bytes", ec);
    if (memsw) {
      (void)writeFile(*dir + "/memory.memsw.limit_in_bytes", "-1");
    }
    if (core::Status s = writeFile(*dir + "/memory.limit_in_bytes", bytes); !s.isOk()) {
      return fail(s);
    }
    if (memsw) {
      (void)writeFile(*dir + "/memory.memsw.limit_in_bytes", bytes);  // No swapping past it.
    }
  }
  if (!pids_parent_.empty()) {
    auto dir = make_dir(pids_parent_);
    if (!dir.isOk()) {
      return fail(dir.status());
    }
    const std::string pids =
        limits.pids_max > 0 ? std::to_string(limits.pids_max) : std::string("max");
    if (core::Status s = writeFile(*dir + "/pids.max", pids); !s.isOk()) {
      return fail(s);
    }
  }
  // A task without device rules (a container's are runc's, below it) gets a group here too:
  // the task's view of the hierarchy shows that group, never the other tasks'.
  if (!devices_parent_.empty() && !limits.restrict_devices) {
    (void)make_dir(devices_parent_);  // Inherits the agent's rules; without it, no view only.
  }
  if (!devices_parent_.empty() && limits.restrict_devices) {
    auto dir = make_dir(devices_parent_);
    if (!dir.isOk()) {
      return fail(dir.status());
    }
    if (core::Status s = writeFile(*dir + "/devices.deny", "a"); !s.isOk()) {
      return fail(s);
    }
    std::vector<std::string> allow(std::begin(kBasicDevices), std::end(kBasicDevices));
    for (const DeviceRule& d : limits.devices) {
      allow.push_back("c " + std::to_string(d.major) + ":" + std::to_string(d.minor) + " rwm");
    }
    for (const std::string& rule : allow) {
      if (core::Status s = writeFile(*dir + "/devices.allow", rule); !s.isOk()) {
        return fail(s);
      }
    }
  }
  return g;
}

core::Status Cgroups::killAll(const TaskCgroup& group) {
  // Exits are asynchronous: kill, then wait for the groups to empty.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (std::vector<pid_t> left = group.pids(); !left.empty(); left = group.pids()) {
    for (pid_t p : left) {
      ::kill(p, SIGKILL);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return core::unavailable("cgroup " + group.name + ": " + std::to_string(left.size()) +
                               " processes did not die");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return core::Status::ok();
}

core::Status Cgroups::remove(const TaskCgroup& group) const {
  TESSERA_RETURN_IF_ERROR(killAll(group));
  core::Status status;
  for (const std::string& d : group.dirs) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(d, ec)) {
      if (e.is_directory(ec)) {
        (void)::rmdir(e.path().c_str());  // A child group (a container's), empty by now.
      }
    }
    if (::rmdir(d.c_str()) != 0 && errno != ENOENT && status.isOk()) {
      status = core::unavailable("cgroup: cannot remove " + d + ": " + std::strerror(errno));
    }
  }
  return status;
}

}  // namespace tessera::agent
