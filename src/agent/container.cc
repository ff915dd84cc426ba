#include "agent/container.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "agent/exec_util.h"
#include "agent/runtime.h"
#include "agent/sandbox.h"
#include "core/log.h"

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
  config["linux"]["resources"]["devices"].push_back(
      {{"allow", true}, {"type", type}, {"major", maj}, {"minor", min}, {"access", "rwm"}});
  if (config["linux"].contains("uidMappings")) {
    // In a user namespace no device node can be made: the node's is bound in (the runtime's
    // own binding takes the same path on both sides, which a CDI spec's may not be).
    config["mounts"].push_back({{"destination", in_container},
                                {"type", "bind"},
                                {"source", host},
                                {"options", {"bind", "nosuid", "noexec"}}});
    return core::Status::ok();
  }
  config["linux"]["devices"].push_back({{"path", in_container},
                                        {"type", type},
                                        {"major", maj},
                                        {"minor", min},
                                        {"fileMode", st.st_mode & 0777},
                                        {"uid", 0},
                                        {"gid", 0}});
  return core::Status::ok();
}

json bindMount(const std::string& source, const std::string& dest, bool read_only) {
  json opts = {"rbind", "nosuid", "nodev"};
  opts.push_back(read_only ? "ro" : "rw");
  return {{"destination", dest}, {"type", "bind"}, {"source", source}, {"options", opts}};
}

// A YAML document as JSON: maps, lists, and scalars (integers and true/false as such, the rest
// as strings), as CDI specs written in YAML mean them.
json yamlToJson(const YAML::Node& n, int depth = 0) {
  if (depth > 64) {
    throw YAML::Exception(n.Mark(), "nested too deep");
  }
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : n) {
        out[kv.first.as<std::string>()] = yamlToJson(kv.second, depth + 1);
      }
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : n) {
        out.push_back(yamlToJson(item, depth + 1));
      }
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = n.Scalar();
      if (n.Tag() != "!" && !text.empty() &&
          text.find_first_not_of("0123456789") == std::string::npos && text.size() < 18) {
        return std::stoll(text);
      }
      if (n.Tag() != "!" && (text == "true" || text == "false")) {
        return text == "true";
      }
      return text;
    }
    default:
      return nullptr;
  }
}

}  // namespace

CdiDevices readCdi(const std::vector<std::string>& dirs, std::vector<std::string>* problems) {
  CdiDevices out;
  auto problem = [&](const std::string& what) {
    if (problems != nullptr) {
      problems->push_back(what);
    }
  };
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      const std::string ext = e.path().extension().string();
      if (ext == ".json" || ext == ".yaml" || ext == ".yml") {
        files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());  // Later files win, as in the CDI spec's registry.
    for (const fs::path& f : files) {
      // A spec's hooks run as root: only root's files, writable by nobody else, are read.
      struct stat st {};
      if (::stat(f.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
          (::geteuid() == 0 && (st.st_uid != 0 || (st.st_mode & 022) != 0))) {
        problem(f.string() + ": not a file of root's that only root may write; ignored");
        continue;
      }
      json spec;
      try {
        if (f.extension() == ".json") {
          std::ifstream in(f);
          spec = json::parse(in, nullptr, false);
        } else {
          spec = yamlToJson(YAML::LoadFile(f.string()));
        }
      } catch (const std::exception& e) {
        problem(f.string() + ": " + e.what());
        continue;
      }
      if (spec.is_discarded() || !spec.is_object() || !spec.contains("kind") ||
          !spec["kind"].is_string() || !spec.contains("devices") || !spec["devices"].is_array()) {
        problem(f.string() + ": not a CDI spec (kind and devices)");
        continue;
      }
      if (spec["kind"] != "nvidia.com/gpu") {
        continue;  // Another vendor's devices.
      }
      const json common = spec.value("containerEdits", json::object());
      for (const json& d : spec["devices"]) {
        if (d.is_object() && d.contains("name") && d["name"].is_string()) {
          out.devices[d["name"].get<std::string>()] = {
              {"edits", d.value("containerEdits", json::object())}, {"common", common}};
        }
      }
    }
  }
  return out;
}

core::Status applyCdiEdits(const json& edits, json& config, std::vector<std::string>& env,
                           std::set<std::string>& done) {
  if (!edits.is_object()) {
    return core::Status::ok();
  }
  for (const json& n : edits.value("deviceNodes", json::array())) {
    const std::string path = n.is_object() ? n.value("path", "") : "";
    const std::string host = n.is_object() ? n.value("hostPath", path) : "";
    if (!path.empty() && done.insert("dev:" + path).second) {
      TESSERA_RETURN_IF_ERROR(addDevice(host, path, config).withContext("CDI"));
    }
  }
  for (const json& m : edits.value("mounts", json::array())) {
    const std::string dest = m.is_object() ? m.value("containerPath", "") : "";
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
  // Hooks (nvidia-ctk's update-ldcache, create-symlinks): into the OCI config, run by the
  // runtime at their point of the container's life.
  static const std::set<std::string> kHooks = {"prestart",       "createRuntime", "createContainer",
                                               "startContainer", "poststart",     "poststop"};
  for (const json& h : edits.value("hooks", json::array())) {
    if (!h.is_object() || !h.contains("path") || !h["path"].is_string()) {
      return core::invalidArgument("CDI: a hook without a path");
    }
    const std::string name = h.value("hookName", "");
    if (!kHooks.contains(name)) {
      return core::invalidArgument("CDI: hook '" + h["path"].get<std::string>() +
                                   "' has an unknown hookName '" + name + "'");
    }
    if (!done.insert("hook:" + name + ":" + h.dump()).second) {
      continue;
    }
    json hook = {{"path", h["path"]}};
    for (const char* key : {"args", "env"}) {
      if (h.contains(key) && h[key].is_array()) {
        hook[key] = h[key];
      }
    }
    if (h.contains("timeout") && h["timeout"].is_number_integer()) {
      hook["timeout"] = h["timeout"];
    }
    config["hooks"][name].push_back(hook);
  }
  return core::Status::ok();
}

namespace {

// Makes `rel` (a path inside the root filesystem open at `root_fd`, without leading '/') as a
// folder, or as an empty file when `file`, with its missing parents: each part through
// mkdirat/openat with O_NOFOLLOW, so a link in the image can never lead outside it (the agent is
// root). A part that is a link is left alone (the runtime resolves it inside the container).
void makeMountPoint(int root_fd, const std::string& rel, bool file) {
  int at = ::dup(root_fd);
  size_t start = 0;
  while (at >= 0 && start < rel.size()) {
    size_t end = rel.find('/', start);
    const bool last = end == std::string::npos;
    if (last) {
      end = rel.size();
    }
    const std::string part = rel.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == "." || part == "..") {
      break;
    }
    if (last && file) {
      const int fd = ::openat(at, part.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::close(fd);
      }
      break;
    }
    (void)::mkdirat(at, part.c_str(), 0755);
    const int next = ::openat(at, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    ::close(at);
    at = next;
  }
  if (at >= 0) {
    ::close(at);
  }
}

// A libcuda.so* file of a task's view: where the task sees it, and where it is on the host.
struct DriverFile {
  std::string in_view;
  std::string host;
};

// `rel` opened under the root filesystem open at `root_fd`, every link resolved inside it (so an
// image's link can never lead the agent, root, to a file of the node); -1 if it cannot be.
int openInRoot(int root_fd, const std::string& rel, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
}

// The libcuda.so* files a container's view will have: the CDI spec's mounts of one, then the
// image's own in kDriverFolders (each link followed inside the image to the file it names),
// each file once.
std::vector<DriverFile> driverFilesInView(const json& mounts, const std::string& rootfs) {
  std::vector<DriverFile> out;
  std::set<std::string> seen;
  std::error_code ec;
  for (const json& m : mounts) {
    const std::string dest = m.value("destination", "");
    const std::string source = m.value("source", "");
    if (m.value("type", "") == "bind" &&
        fs::path(dest).filename().string().starts_with("libcuda.so") &&
        fs::is_regular_file(source, ec) && seen.insert(dest).second) {
      out.push_back({dest, source});
    }
  }
  const int root_fd = ::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    return out;
  }
  for (const char* folder : kDriverFolders) {
    const int dir_fd = openInRoot(root_fd, folder, O_RDONLY | O_DIRECTORY);
    DIR* dir = dir_fd >= 0 ? ::fdopendir(dir_fd) : nullptr;
    if (dir == nullptr) {
      if (dir_fd >= 0) {
        ::close(dir_fd);
      }
      continue;
    }
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(dir)) {
      if (std::string_view(e->d_name).starts_with("libcuda.so")) {
        names.emplace_back(e->d_name);
      }
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const int fd = openInRoot(root_fd, std::string(folder) + "/" + name, O_PATH);
      struct stat st {};
      char host[PATH_MAX];
      ssize_t n = -1;
      if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), host, sizeof host - 1);
      }
      if (fd >= 0) {
        ::close(fd);
      }
      if (n <= 0) {
        continue;
      }
      const std::string path(host, static_cast<size_t>(n));
      if (path.size() > rootfs.size() && path.starts_with(rootfs + "/")) {
        const std::string in_view = path.substr(rootfs.size());
        if (seen.insert(in_view).second) {
          out.push_back({in_view, path});
        }
      }
    }
  }
  ::close(root_fd);
  return out;
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
  // Only root reaches a rootfs from here (with user namespaces, a task's own user its own:
  // the folder is then traversable, each bundle its user's alone).
  ::chmod((options_.dir + "/bundles").c_str(), options_.user_namespace ? 0711 : 0700);
  ::chmod(bundle.c_str(), 0700);
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
  // In a user namespace of its own, the task's user is root inside, and only that: nothing else
  // of the node's is mapped (its root's files show as nobody's).
  const bool userns = options_.user_namespace && uid != 0;
  const uid_t inside_uid = userns ? 0 : uid;
  const gid_t inside_gid = userns ? 0 : gid;
  json caps = json::array();
  if (inside_uid == 0) {
    caps = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
  }
  config["process"] = {
      {"terminal", false},
      {"user", {{"uid", inside_uid}, {"gid", inside_gid}, {"additionalGids", json::array()}}},
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
  // Its volumes (docs/agent.md "Volumes"): files from its credentials folder, read-only; empty
  // tmpfs folders (one at /dev/shm replaces the default one).
  for (const ContainerSpec::Volume& v : spec.container.volumes) {
    if (!v.source.empty()) {
      json m = bindMount(v.source, v.path, true);
      m["options"].push_back("noexec");
      config["mounts"].push_back(std::move(m));
      continue;
    }
    json opts = {"nosuid", "nodev", "mode=1777"};
    if (v.size_mib > 0) {
      opts.push_back("size=" + std::to_string(v.size_mib) + "m");
    }
    json m = {{"destination", v.path}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", opts}};
    auto shm = std::find_if(config["mounts"].begin(), config["mounts"].end(),
                            [&](const json& e) { return e["destination"] == v.path; });
    if (shm != config["mounts"].end()) {
      *shm = std::move(m);
    } else {
      config["mounts"].push_back(std::move(m));
    }
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
  if (userns) {
    config["linux"]["namespaces"].push_back({{"type", "user"}});
    config["linux"]["uidMappings"] = {{{"containerID", 0}, {"hostID", uid}, {"size", 1}}};
    config["linux"]["gidMappings"] = {{{"containerID", 0}, {"hostID", gid}, {"size", 1}}};
    // sysfs cannot be mounted anew from a user namespace that does not own the network
    // namespace (the node's): the node's, bound read-only.
    for (json& m : config["mounts"]) {
      if (m["destination"] == "/sys") {
        m = {{"destination", "/sys"},
             {"type", "bind"},
             {"source", "/sys"},
             {"options", {"rbind", "nosuid", "noexec", "nodev", "ro"}}};
      }
    }
    // The runtime's init reaches the root filesystem as the task's user: its bundle stays
    // root's (nothing in it is the task's to change), traversable by the task's group alone
    // (0710), the bundles folder only traversable.
    if (::chown(bundle.c_str(), 0, gid) != 0 || ::chmod(bundle.c_str(), 0710) != 0 ||
        ::chmod((options_.dir + "/bundles").c_str(), 0711) != 0) {
      cleanup(spec.id);
      return core::unavailable(where + ": cannot give its bundle to uid " + std::to_string(uid) +
                               ": " + std::strerror(errno));
    }
  }
  // GPUs: a CDI spec's description of each when there is one for all of them, else the task's
  // device nodes (real GPUs) or stand-ins (simulated ones).
  core::Status dev_status;
  std::vector<std::string> cdi_dirs = {options_.cdi_dir};
  if (!options_.cdi_dir_dynamic.empty()) {
    cdi_dirs.push_back(options_.cdi_dir_dynamic);
  }
  std::vector<std::string> cdi_problems;
  const CdiDevices cdi = readCdi(cdi_dirs, &cdi_problems);
  for (const std::string& p : cdi_problems) {
    core::logWarn("CDI spec {}", p);  // The operator's to mend; the task goes on without it.
  }
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
  // A time-sliced share (docs/agent.md, "The driver seen only through the interposer"): the
  // interposer in the container's /etc/ld.so.preload, so that every program loads it whatever
  // its environment says, and its caps in a read-only file it reads instead of the variables (as
  // in a process task's view, agent/sandbox.h). The image's own /etc/ld.so.preload is covered;
  // the task's LD_PRELOAD still adds to it. Where the view has a libcuda.so.1 (the CDI spec's, or
  // the image's), libtessera-cuda-driver.so is bound over every such file and is what the
  // preload names, and the driver itself is bound at the one path it needs it by: a program that
  // skips the preload (a static binary's dlopen, its own loader) still finds only the
  // interposer under the driver's name.
  if (const std::string caps = cudaCapsText(spec.gpus); !caps.empty()) {
    std::string preloaded = spec.gpus.interposer;
    const std::string stand_in = driverStandIn(spec.gpus.interposer);
    const std::vector<DriverFile> drivers = driverFilesInView(config["mounts"], rootfs);
    if (!drivers.empty() && !stand_in.empty()) {
      config["mounts"].push_back(bindMount(drivers.front().host, kDriverInView, true));
      for (const DriverFile& d : drivers) {
        config["mounts"].push_back(bindMount(stand_in, d.in_view, true));
      }
      preloaded = stand_in;
      if (auto it = vars.find("LD_PRELOAD"); it != vars.end()) {
        it->second = preloadWithStandIn(it->second, spec.gpus.interposer, stand_in);
      }
    } else if (!drivers.empty()) {
      core::logWarn(
          "{}: no {} beside {}: the task's libcuda.so.1 is the driver itself, so a "
          "program that skips /etc/ld.so.preload is not capped",
          where, kDriverStandIn, spec.gpus.interposer);
    }
    config["mounts"].push_back(bindMount(preloaded, preloaded, true));
    fs::create_directories(bundle + "/cuda/caps", ec);
    const std::string preload_file = bundle + "/cuda/ld.so.preload";
    // The runtime's caps folder, which it rewrites as bursts start and end (ProcessRuntime);
    // without one (Containers on its own), a folder of the bundle's with the guarantee.
    std::string caps_dir = spec.gpus.caps_dir;
    if (caps_dir.empty()) {
      caps_dir = bundle + "/cuda/caps";
      if (!writeFile(caps_dir + "/caps", caps, 0444)) {
        cleanup(spec.id);
        return core::unavailable("cannot write the CUDA caps in " + caps_dir).withContext(where);
      }
    }
    if (!writeFile(preload_file, preloaded + "\n", 0444)) {
      cleanup(spec.id);
      return core::unavailable("cannot write " + preload_file).withContext(where);
    }
    config["mounts"].push_back(bindMount(preload_file, "/etc/ld.so.preload", true));
    config["mounts"].push_back(bindMount(caps_dir, kCudaCapsDir, true));
  } else if (!spec.gpus.interposer.empty()) {
    config["mounts"].push_back(bindMount(spec.gpus.interposer, spec.gpus.interposer, true));
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
  if (userns) {
    // Root inside cannot make folders in the image's own (the node's root owns them): the
    // mount points are made now, in the container's upper layer.
    const int root_fd = ::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (const json& m : config["mounts"]) {
      const std::string dest = m.value("destination", "");
      bool inside_other = false;  // Under a mount of its own (a tmpfs the runtime makes).
      for (const char* top : {"/dev/", "/proc/", "/sys/", "/tmp/"}) {
        inside_other = inside_other || dest.starts_with(top);
      }
      if (root_fd < 0 || dest.size() < 2 || dest[0] != '/' || inside_other) {
        continue;
      }
      std::error_code ec;
      const bool file =
          m.value("type", "") == "bind" && !fs::is_directory(m.value("source", ""), ec);
      makeMountPoint(root_fd, dest.substr(1), file);
    }
    if (root_fd >= 0) {
      ::close(root_fd);
    }
  }
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
