#include "agent/container.h"

#include <fcntl.h>
#include <grp.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "agent/exec_util.h"
#include "agent/runtime.h"

extern char** environ;

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool writeFile(const std::string& path, const std::string& content, mode_t mode) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  return out.good() && ::chmod(path.c_str(), mode) == 0;
}

// A device node of the container, with the rule that lets its cgroup open it.
core::Status addDevice(const std::string& host, const std::string& in_container, json& config) {
  struct stat st {};
  if (::stat(host.c_str(), &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
    return core::failedPrecondition("device node " + host + " is not a device");
  }
  const char* type = S_ISCHR(st.st_mode) ? "c" : "b";
  const auto maj = static_cast<int64_t>(major(st.st_rdev));
  const auto min = static_cast<int64_t>(minor(st.st_rdev));
  config["linux"]["devices"].push_back({{"path", in_container},
                                        {"type", type},
                                        {"major", maj},
                                        {"minor", min},
                                        {"fileMode", st.st_mode & 0777},
                                        {"uid", 0},
                                        {"gid", 0}});
  config["linux"]["resources"]["devices"].push_back(
      {{"allow", true}, {"type", type}, {"major", maj}, {"minor", min}, {"access", "rwm"}});
  return core::Status::ok();
}

json bindMount(const std::string& source, const std::string& dest, bool read_only) {
  json opts = {"rbind", "nosuid", "nodev"};
  opts.push_back(read_only ? "ro" : "rw");
  return {{"destination", dest}, {"type", "bind"}, {"source", source}, {"options", opts}};
}

// CDI specs (the format the NVIDIA container toolkit writes): device name -> its edits, with
// each spec's own edits (what every device of it needs: nvidiactl, the driver's libraries).
struct CdiDevices {
  std::map<std::string, json> devices;  // By name (index, UUID): {"edits", "common"}.
};

CdiDevices readCdi(const std::string& dir) {
  CdiDevices out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".json") {
      continue;  // YAML specs are not read (docs/agent.md).
    }
    std::ifstream in(e.path());
    const json spec = json::parse(in, nullptr, false);
    if (spec.is_discarded() || !spec.is_object() || spec.value("kind", "") != "nvidia.com/gpu" ||
        !spec.contains("devices") || !spec["devices"].is_array()) {
      continue;
    }
    const json common = spec.value("containerEdits", json::object());
    for (const json& d : spec["devices"]) {
      if (d.is_object() && d.contains("name") && d["name"].is_string()) {
        out.devices[d["name"].get<std::string>()] = {
            {"edits", d.value("containerEdits", json::object())}, {"common", common}};
      }
    }
  }
  return out;
}

// Applies a CDI containerEdits object: device nodes, mounts, environment (hooks are not run).
core::Status applyCdiEdits(const json& edits, json& config, std::vector<std::string>& env,
                           std::set<std::string>& done) {
  if (!edits.is_object()) {
    return core::Status::ok();
  }
  for (const json& n : edits.value("deviceNodes", json::array())) {
    const std::string path = n.value("path", "");
    const std::string host = n.value("hostPath", path);
    if (!path.empty() && done.insert("dev:" + path).second) {
      TESSERA_RETURN_IF_ERROR(addDevice(host, path, config).withContext("CDI"));
    }
  }
  for (const json& m : edits.value("mounts", json::array())) {
    const std::string dest = m.value("containerPath", "");
    if (!dest.empty() && done.insert("mnt:" + dest).second) {
      json mount = bindMount(m.value("hostPath", ""), dest, true);
      if (m.contains("options") && m["options"].is_array()) {
        mount["options"] = m["options"];
      }
      config["mounts"].push_back(mount);
    }
  }
  for (const json& v : edits.value("env", json::array())) {
    if (v.is_string()) {
      env.push_back(v.get<std::string>());
    }
  }
  return core::Status::ok();
}

// Runs argv, its output discarded; its exit status (-1: could not run it).
int runQuietly(std::vector<std::string> argv) {
  std::vector<char*> args = cStrings(argv);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int r = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r != 0) {
    return -1;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Whether `path` can be opened for reading by uid/gid (the task's user): the agent reads images
// as root, so without this a tenant could run an image it may not read (another tenant's).
bool readableBy(const std::string& path, uid_t uid, gid_t gid) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only system calls: a fork of a threaded process.
    if (::setgroups(1, &gid) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) {
      ::_exit(1);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ::_exit(fd >= 0 ? 0 : 1);
  }
  if (pid < 0) {
    return false;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

Containers::Containers(ContainerOptions options)
    : options_(std::move(options)), images_(options_.dir + "/images", options_.registries) {}

bool Containers::pullsFromRegistry(const TaskSpec& spec) {
  auto ref = model::parseImageRef(spec.container.image);
  return !spec.container.image.empty() && ref.isOk() &&
         ref->kind == model::ImageRef::Kind::kRegistry;
}

core::Status Containers::pull(const TaskSpec& spec) {
  auto ref = model::parseImageRef(spec.container.image);
  if (!ref.isOk()) {
    return ref.status().withContext("task " + spec.id);
  }
  auto image = images_.get(*ref, {.credentials = spec.container.pull_credentials,
                                  .progress = spec.container.pull_progress,
                                  .cancel = spec.container.pull_cancel});
  if (!image.isOk()) {
    return image.status().withContext("task " + spec.id);
  }
  images_.release(*image);
  if (options_.image_cache_max_mib > 0) {
    trimCache();
  }
  return core::Status::ok();
}

core::Result<std::string> Containers::runtimePath() const {
  if (options_.runtime != "runc" && options_.runtime != "crun") {
    return core::invalidArgument("container runtime '" + options_.runtime +
                                 "' is not runc or crun");
  }
  const std::string name = options_.runtime_path.empty() ? options_.runtime : options_.runtime_path;
  auto found = findExecutable(name, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  if (!found.isOk()) {
    return core::failedPrecondition("no container runtime: " + found.status().message() +
                                    " (apt-get install " + options_.runtime + ")");
  }
  return found;
}

core::Result<std::vector<std::string>> Containers::prepare(const TaskSpec& spec,
                                                           const std::vector<std::string>& env,
                                                           uid_t uid, gid_t gid) {
  const std::string where = "task " + spec.id;
  TESSERA_ASSIGN_OR_RETURN(const std::string runtime, runtimePath());
  auto ref = model::parseImageRef(spec.container.image);
  if (!ref.isOk()) {
    return ref.status().withContext(where);
  }
  if (uid != 0 && ref->kind != model::ImageRef::Kind::kRegistry) {
    const std::string probe =
        ref->kind == model::ImageRef::Kind::kOciLayout ? ref->path + "/index.json" : ref->path;
    std::error_code exists;
    if (fs::exists(probe, exists) && !readableBy(probe, uid, gid)) {
      return core::permissionDenied(where + ": image " + spec.container.image +
                                    ": the task's user (uid " + std::to_string(uid) +
                                    ") may not read " + probe);
    }
  }
  cleanup(spec.id);  // A previous generation's leftovers.
  // Its layers are pinned until the bundle names them, so a collection cannot take them.
  auto image = images_.get(*ref, {.credentials = spec.container.pull_credentials,
                                  .progress = spec.container.pull_progress,
                                  .cancel = spec.container.pull_cancel});
  if (!image.isOk()) {
    return image.status().withContext(where);
  }
  std::unique_lock lock(mu_);
  struct Unpin {
    ImageCache& cache;
    const UnpackedImage& image;
    ~Unpin() { cache.release(image); }
  } unpin{images_, *image};
  const std::string bundle = options_.dir + "/bundles/" + spec.id;
  const std::string rootfs = bundle + "/rootfs";
  std::error_code ec;
  fs::create_directories(options_.dir + "/state", ec);
  for (const char* sub : {"/rootfs", "/upper", "/work"}) {
    fs::create_directories(bundle + sub, ec);
  }
  if (ec) {
    return core::unavailable(where + ": cannot create " + bundle + ": " + ec.message());
  }
  ::chmod((options_.dir + "/bundles").c_str(), 0700);  // Only root reaches the rootfs from here.
  std::string layer_list;
  for (const std::string& key : image->layer_keys) {
    layer_list += key + "\n";
  }
  if (!writeFile(bundle + "/layers", layer_list, 0600)) {
    lock.unlock();
    cleanup(spec.id);
    return core::unavailable(where + ": cannot write " + bundle + "/layers");
  }
  lock.unlock();
  if (options_.image_cache_max_mib > 0) {
    trimCache();  // A pull may have taken the cache past its cap.
  }
  // overlayfs: the top layer first.
  std::string lower;
  for (auto it = image->layer_dirs.rbegin(); it != image->layer_dirs.rend(); ++it) {
    lower += (lower.empty() ? "" : ":") + *it;
  }
  const std::string opts =
      "lowerdir=" + lower + ",upperdir=" + bundle + "/upper,workdir=" + bundle + "/work";
  if (opts.size() >= 4000) {
    cleanup(spec.id);
    return core::failedPrecondition(where + ": the image has too many layers (" +
                                    std::to_string(image->layer_dirs.size()) +
                                    ") for one overlay mount");
  }
  if (::mount("overlay", rootfs.c_str(), "overlay", 0, opts.c_str()) != 0) {
    const int err = errno;
    cleanup(spec.id);
    errno = err;
    return core::unavailable(where + ": cannot mount the image's layers (overlay) on " + rootfs +
                             ": " + std::strerror(errno));
  }
  // The process: the workload's command, else the image's entrypoint and cmd.
  std::vector<std::string> args = spec.command;
  if (args.empty()) {
    args = image->config.entrypoint;
    args.insert(args.end(), image->config.cmd.begin(), image->config.cmd.end());
  }
  if (args.empty()) {
    cleanup(spec.id);
    return core::invalidArgument(where + ": no command, and the image names none");
  }
  // Environment: the image's, then the task's; PATH and HOME are the image's unless the
  // workload sets them (the node's PATH means nothing inside the image).
  std::map<std::string, std::string> vars = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, {"HOME", "/tmp"}};
  for (const std::string& kv : image->config.env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) {
      vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const std::string& kv : env) {
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    if ((key == "PATH" || key == "HOME") && !spec.env.contains(key)) {
      continue;
    }
    vars[key] = kv.substr(eq + 1);
  }
  json config;
  config["ociVersion"] = "1.0.2";
  config["root"] = {{"path", rootfs}, {"readonly", spec.container.read_only_rootfs}};
  config["hostname"] = spec.id.substr(0, 63);
  json caps = json::array();
  if (uid == 0) {
    caps = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
  }
  config["process"] = {
      {"terminal", false},
      {"user", {{"uid", uid}, {"gid", gid}, {"additionalGids", json::array()}}},
      {"args", args},
      {"cwd", image->config.working_dir.empty() ? "/" : image->config.working_dir},
      {"noNewPrivileges", true},
      {"capabilities",
       {{"bounding", caps},
        {"effective", caps},
        {"permitted", caps},
        {"ambient", json::array()}}}};  // Resource limits: the agent's own, inherited.
  json envs = json::array();
  std::vector<std::string> cdi_env;
  const std::string shm =
      "size=" + std::to_string(spec.container.shm_mib > 0 ? spec.container.shm_mib : 64) + "m";
  config["mounts"] = {
      {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
      {{"destination", "/dev"},
       {"type", "tmpfs"},
       {"source", "tmpfs"},
       {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
      {{"destination", "/dev/pts"},
       {"type", "devpts"},
       {"source", "devpts"},
       {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
      {{"destination", "/dev/shm"},
       {"type", "tmpfs"},
       {"source", "shm"},
       {"options", {"nosuid", "noexec", "nodev", "mode=1777", shm}}},
      {{"destination", "/dev/mqueue"},
       {"type", "mqueue"},
       {"source", "mqueue"},
       {"options", {"nosuid", "noexec", "nodev"}}},
      {{"destination", "/sys"},
       {"type", "sysfs"},
       {"source", "sysfs"},
       {"options", {"nosuid", "noexec", "nodev", "ro"}}},
      {{"destination", "/tmp"},
       {"type", "tmpfs"},
       {"source", "tmpfs"},
       {"options", {"nosuid", "nodev", "mode=1777"}}}};
  for (const char* f : {"/etc/resolv.conf", "/etc/hosts"}) {
    if (fs::exists(f, ec)) {
      config["mounts"].push_back(bindMount(f, f, true));
    }
  }
  // What the task was given on the node, at the same paths (its variables name them).
  if (auto it = vars.find("TESSERA_HOSTFILE"); it != vars.end()) {
    config["mounts"].push_back(bindMount(it->second, it->second, true));  // Its peers.
  }
  if (auto it = spec.env.find("TESSERA_CREDENTIALS_DIR"); it != spec.env.end()) {
    config["mounts"].push_back(bindMount(it->second, it->second, true));
  }
  if (!spec.gpus.mps_pipe_directory.empty() && spec.gpus.mode == GpuPinning::Mode::kMps) {
    config["mounts"].push_back(
        bindMount(spec.gpus.mps_pipe_directory, spec.gpus.mps_pipe_directory, false));
  }
  if (!spec.gpus.interposer.empty()) {
    config["mounts"].push_back(bindMount(spec.gpus.interposer, spec.gpus.interposer, true));
  }
  config["linux"] = {
      {"namespaces",
       {{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}}},
      {"cgroupsPath", cgroupName(spec.id)},
      {"devices", json::array()},
      {"resources", {{"devices", {{{"allow", false}, {"access", "rwm"}}}}}},
      {"maskedPaths",
       {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
        "/proc/scsi"}},
      {"readonlyPaths",
       {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}};
  // GPUs: a CDI spec's description of each when there is one for all of them, else the task's
  // device nodes (real GPUs) or stand-ins (simulated ones).
  core::Status dev_status;
  const CdiDevices cdi = readCdi(options_.cdi_dir);
  const bool use_cdi = !spec.gpus.uuids.empty() &&
                       std::all_of(spec.gpus.uuids.begin(), spec.gpus.uuids.end(),
                                   [&](const std::string& u) { return cdi.devices.contains(u); });
  std::set<std::string> done;
  if (use_cdi) {
    for (const std::string& u : spec.gpus.uuids) {
      const json& d = cdi.devices.at(u);
      if (dev_status.isOk()) {
        dev_status = applyCdiEdits(d["common"], config, cdi_env, done);
      }
      if (dev_status.isOk()) {
        dev_status = applyCdiEdits(d["edits"], config, cdi_env, done);
      }
    }
  } else {
    for (const std::string& node : spec.device_nodes) {
      if (dev_status.isOk()) {
        dev_status = addDevice(node, node, config);
      }
    }
    fs::create_directories(bundle + "/sim", ec);
    for (const auto& [path, content] : spec.container.simulated_devices) {
      const std::string file = bundle + "/sim/" + fs::path(path).filename().string();
      if (!writeFile(file, content + "\n", 0444)) {
        dev_status = core::unavailable("cannot write " + file);
      }
      config["mounts"].push_back(bindMount(file, path, true));
    }
  }
  if (!dev_status.isOk()) {
    cleanup(spec.id);
    return dev_status.withContext(where);
  }
  for (const std::string& kv : cdi_env) {
    const size_t eq = kv.find('=');
    // The agent's pinning wins over a CDI spec's defaults.
    if (eq != std::string::npos && !vars.contains(kv.substr(0, eq))) {
      vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  for (const auto& [k, v] : vars) {
    envs.push_back(k + "=" + v);
  }
  config["process"]["env"] = envs;
  if (!writeFile(bundle + "/config.json", config.dump(2), 0600)) {
    cleanup(spec.id);
    return core::unavailable(where + ": cannot write " + bundle + "/config.json");
  }
  return std::vector<std::string>{runtime, "--root", options_.dir + "/state", "run", "--bundle",
                                  bundle,  spec.id};
}

void Containers::cleanup(const std::string& id) {
  if (!plainFileName(id)) {
    return;
  }
  const std::string bundle = options_.dir + "/bundles/" + id;
  std::error_code ec;
  if (!fs::exists(bundle, ec)) {
    return;
  }
  if (auto runtime = runtimePath(); runtime.isOk()) {
    // Kills what is left of the container and removes its cgroups and state; fails harmlessly
    // when the runtime already removed it (it exited).
    (void)runQuietly({*runtime, "--root", options_.dir + "/state", "delete", "--force", id});
  }
  ::umount2((bundle + "/rootfs").c_str(), MNT_DETACH);
  fs::remove_all(bundle, ec);
  trimCache();
}

void Containers::trimCache() {
  // Layers still used by a bundle stay; the rest go once unused for keep_unused, or sooner while
  // the cache is over its cap.
  std::lock_guard lock(mu_);
  std::set<std::string> in_use;
  std::error_code ec;
  for (const fs::directory_entry& b : fs::directory_iterator(options_.dir + "/bundles", ec)) {
    std::ifstream in(b.path() / "layers");
    for (std::string key; std::getline(in, key);) {
      in_use.insert(key);
    }
  }
  (void)images_.trim(in_use, options_.keep_unused, options_.image_cache_max_mib << 20);
}

}  // namespace tessera::agent
