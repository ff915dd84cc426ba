#include "protocol/node_protocol.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>

#include "core/json_node.h"

namespace tessera::protocol {

using nlohmann::json;

namespace {

// A string field, possibly empty.
core::Result<std::string> text(const core::JsonNode& n) {
  if (!n.value().is_string()) {
    return n.error("expected a string");
  }
  return n.value().get<std::string>();
}

core::Result<int64_t> integerOr(const core::JsonNode& n, const char* field, int64_t lo, int64_t hi,
                                int64_t def) {
  return n.has(field) ? n.child(field).integer(lo, hi) : core::Result<int64_t>(def);
}

core::Result<bool> booleanOr(const core::JsonNode& n, const char* field) {
  if (!n.has(field)) {
    return false;
  }
  if (!n.child(field).value().is_boolean()) {
    return n.child(field).error("expected true or false");
  }
  return n.child(field).value().get<bool>();
}

}  // namespace

json toJson(const AssignedTask& t) {
  json out = {{"task", t.id},
              {"generation", t.generation},
              {"tenant", t.tenant},
              {"workload", t.workload},
              {"index", t.index},
              {"command", t.command},
              {"env", t.env},
              {"gpus", t.gpus},
              {"milli_per_gpu", t.milli_per_gpu},
              {"isolation", t.isolation},
              {"gpu_memory_mib", t.gpu_memory_mib},
              {"cpu_milli", t.cpu_milli},
              {"memory_mib", t.memory_mib},
              {"duration_s", t.duration_s},
              {"grace_ms", t.grace_ms},
              {"credentials", t.credentials}};
  if (t.milli_limit_per_gpu > 0) {  // Absent without a burst limit.
    out["milli_limit_per_gpu"] = t.milli_limit_per_gpu;
  }
  if (!t.image.empty()) {  // Absent for a plain process: older agents see nothing new.
    out["image"] = t.image;
    out["shm_mib"] = t.shm_mib;
    out["read_only_rootfs"] = t.read_only_rootfs;
  }
  if (t.mig_profile >= 0) {
    out["mig_profile"] = t.mig_profile;
    out["mig_start"] = t.mig_start;
  }
  if (!t.credentials_error.empty()) {
    out["credentials_error"] = t.credentials_error;
  }
  if (!t.pull_username.empty() || !t.pull_password.empty()) {
    // Under a key the audit log always HMACs.
    out["pull_credentials"] = {{"username", t.pull_username}, {"password", t.pull_password}};
  }
  if (t.task_count > 1 || !t.ports.empty()) {  // Absent for a lone task without ports.
    out["task_count"] = t.task_count;
    out["hosts"] = t.hosts;
    out["ports"] = t.ports;
    out["master_port"] = t.master_port;
  }
  if (!t.volumes.empty()) {
    json volumes = json::array();
    for (const TaskVolume& v : t.volumes) {
      json one = {{"path", v.path}};
      if (v.tmpfs) {
        one["tmpfs"] = {{"size_mib", v.size_mib}};
      } else {
        // Under a key the audit log always HMACs (a Secret's files), as the task's other
        // credentials.
        one["credentials"] = v.files;
      }
      volumes.push_back(std::move(one));
    }
    out["volumes"] = std::move(volumes);
  }
  return out;
}

namespace {

// The components of `path` split at '/', each checked by `ok`.
bool componentsAre(std::string_view path, const std::function<bool(std::string_view)>& ok) {
  while (true) {
    const size_t slash = path.find('/');
    if (!ok(path.substr(0, slash))) {
      return false;
    }
    if (slash == std::string_view::npos) {
      return true;
    }
    path.remove_prefix(slash + 1);
  }
}

}  // namespace

bool isMountPath(std::string_view path) {
  for (std::string_view top : {"/proc", "/sys", "/dev"}) {
    if (path.starts_with(top) && (path.size() == top.size() || path[top.size()] == '/') &&
        path != "/dev/shm") {
      return false;
    }
  }
  return path.size() > 1 && path.size() <= 1024 && path[0] == '/' &&
         componentsAre(path.substr(1), [](std::string_view c) {
           return !c.empty() && c != "." && c != ".." &&
                  c.find_first_of(std::string_view("\0\n", 2)) == std::string_view::npos;
         });
}

bool isVolumeFilePath(std::string_view path) {
  return !path.empty() && path.size() <= 253 && componentsAre(path, [](std::string_view c) {
    return !c.empty() && c != "." && !c.starts_with("..") &&
           std::all_of(c.begin(), c.end(), [](char ch) {
             return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                    ch == '.';
           });
  });
}

bool isPortName(std::string_view name) {
  return !name.empty() && name.size() <= 32 && name[0] >= 'a' && name[0] <= 'z' &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
         });
}

core::Result<AssignedTask> assignedTaskFromJson(const json& j, const std::string& where,
                                                const std::string& source) {
  const core::JsonNode n(j, where, source);
  if (!j.is_object()) {
    return n.error("expected an object");
  }
  for (const char* required : {"task", "generation", "tenant", "workload", "index"}) {
    if (!n.has(required)) {
      return n.error(std::string("missing '") + required + "'");
    }
  }
  AssignedTask t;
  TESSERA_ASSIGN_OR_RETURN(t.id, n.child("task").str());
  TESSERA_ASSIGN_OR_RETURN(const int64_t generation, n.child("generation").integer(0, UINT32_MAX));
  t.generation = static_cast<uint32_t>(generation);
  TESSERA_ASSIGN_OR_RETURN(t.tenant, n.child("tenant").str());
  TESSERA_ASSIGN_OR_RETURN(t.workload, n.child("workload").str());
  TESSERA_ASSIGN_OR_RETURN(const int64_t index, n.child("index").integer(0, INT32_MAX));
  t.index = static_cast<int>(index);
  if (n.has("command")) {
    const core::JsonNode c = n.child("command");
    if (!c.value().is_array()) {
      return c.error("expected a list of strings (argv)");
    }
    for (size_t i = 0; i < c.value().size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(std::string arg, text(c.at(i)));
      t.command.push_back(std::move(arg));
    }
  }
  if (n.has("env")) {
    const core::JsonNode e = n.child("env");
    if (!e.value().is_object()) {
      return e.error("expected an object of NAME: \"value\"");
    }
    for (const auto& [name, value] : e.value().items()) {
      TESSERA_ASSIGN_OR_RETURN(t.env[name], text(e.child(name.c_str())));
    }
  }
  if (n.has("gpus")) {
    const core::JsonNode g = n.child("gpus");
    if (!g.value().is_array()) {
      return g.error("expected a list of GPU indexes");
    }
    for (size_t i = 0; i < g.value().size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(const int64_t gpu, g.at(i).integer(0, 1023));
      t.gpus.push_back(static_cast<int>(gpu));
    }
  }
  // Left out, a share is a whole GPU, as agents have always read it.
  TESSERA_ASSIGN_OR_RETURN(t.milli_per_gpu, integerOr(n, "milli_per_gpu", 0, 1000, 1000));
  t.isolation = "hardware";
  if (n.has("isolation")) {
    TESSERA_ASSIGN_OR_RETURN(t.isolation, text(n.child("isolation")));
  }
  TESSERA_ASSIGN_OR_RETURN(t.gpu_memory_mib,
                           integerOr(n, "gpu_memory_mib", 0, int64_t{1} << 40, 0));
  TESSERA_ASSIGN_OR_RETURN(t.milli_limit_per_gpu, integerOr(n, "milli_limit_per_gpu", 0, 1000, 0));
  TESSERA_ASSIGN_OR_RETURN(const int64_t mig, integerOr(n, "mig_profile", 0, 1023, -1));
  t.mig_profile = static_cast<int>(mig);
  TESSERA_ASSIGN_OR_RETURN(const int64_t start, integerOr(n, "mig_start", 0, 63, -1));
  t.mig_start = static_cast<int>(start);
  if ((t.mig_profile >= 0) != (t.mig_start >= 0)) {
    return n.error("mig_profile and mig_start go together");
  }
  if (n.has("image")) {  // A container (docs/agent.md "Containers").
    TESSERA_ASSIGN_OR_RETURN(t.image, text(n.child("image")));
    TESSERA_ASSIGN_OR_RETURN(t.shm_mib, integerOr(n, "shm_mib", 0, int64_t{1} << 30, 0));
    TESSERA_ASSIGN_OR_RETURN(t.read_only_rootfs, booleanOr(n, "read_only_rootfs"));
  }
  TESSERA_ASSIGN_OR_RETURN(t.cpu_milli, integerOr(n, "cpu_milli", 0, int64_t{1} << 40, 0));
  TESSERA_ASSIGN_OR_RETURN(t.memory_mib, integerOr(n, "memory_mib", 0, int64_t{1} << 40, 0));
  TESSERA_ASSIGN_OR_RETURN(t.duration_s, integerOr(n, "duration_s", 0, INT64_MAX, 0));
  // -1: the task does not say (the agent's own default applies).
  TESSERA_ASSIGN_OR_RETURN(t.grace_ms, integerOr(n, "grace_ms", 0, 3600000, -1));
  if (n.has("credentials")) {
    const json& files = j.at("credentials");
    if (!files.is_object() || files.size() > 64) {
      return n.error("credentials: expected an object of at most 64 files");
    }
    for (const auto& [name, content] : files.items()) {
      if (!content.is_string()) {
        return n.error("credentials: '" + name + "' is not a string");
      }
      t.credentials[name] = content.get<std::string>();
    }
  }
  if (n.has("credentials_error")) {
    TESSERA_ASSIGN_OR_RETURN(t.credentials_error, text(n.child("credentials_error")));
    t.credentials_error = t.credentials_error.substr(0, 1024);
  }
  if (n.has("pull_credentials")) {
    const core::JsonNode p = n.child("pull_credentials");
    for (const auto& [key, field] :
         {std::pair{"username", &t.pull_username}, std::pair{"password", &t.pull_password}}) {
      if (p.has(key)) {
        TESSERA_ASSIGN_OR_RETURN(*field, p.child(key).str());
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t count, integerOr(n, "task_count", 1, 1 << 20, 1));
  t.task_count = static_cast<int>(count);
  if (n.has("hosts")) {
    const core::JsonNode h = n.child("hosts");
    if (!h.value().is_array() || h.value().size() != static_cast<size_t>(t.task_count)) {
      return h.error("expected a list of task_count node addresses");
    }
    for (size_t i = 0; i < h.value().size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(std::string host, text(h.at(i)));
      if (host.size() > 255 || host.find_first_of(" \t\n,") != std::string::npos) {
        return h.at(i).error("expected a node address (no spaces or commas)");
      }
      t.hosts.push_back(std::move(host));
    }
  }
  if (n.has("ports")) {
    const core::JsonNode p = n.child("ports");
    if (!p.value().is_object() || p.value().size() > 16) {
      return p.error("expected an object of at most 16 NAME: port");
    }
    for (const auto& [name, port] : p.value().items()) {
      if (!isPortName(name)) {
        return p.error("'" + name.substr(0, 40) + "' is not a port name");
      }
      TESSERA_ASSIGN_OR_RETURN(const int64_t number, p.child(name.c_str()).integer(1, 65535));
      t.ports[name] = static_cast<int>(number);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t master, integerOr(n, "master_port", 0, 65535, 0));
  t.master_port = static_cast<int>(master);
  if (n.has("volumes")) {
    const core::JsonNode vs = n.child("volumes");
    if (!vs.value().is_array() || vs.value().size() > 32) {
      return vs.error("expected a list of at most 32 volumes");
    }
    for (size_t i = 0; i < vs.value().size(); ++i) {
      const core::JsonNode v = vs.at(i);
      TaskVolume volume;
      TESSERA_ASSIGN_OR_RETURN(volume.path, text(v.child("path")));
      if (!isMountPath(volume.path)) {
        return v.child("path").error(
            "expected an absolute path without '.' or '..', outside /proc, /sys and /dev");
      }
      if (v.has("tmpfs") == v.has("credentials")) {
        return v.error("expected exactly one of credentials (its files) and tmpfs");
      }
      if (v.has("tmpfs")) {
        volume.tmpfs = true;
        TESSERA_ASSIGN_OR_RETURN(volume.size_mib,
                                 integerOr(v.child("tmpfs"), "size_mib", 0, int64_t{1} << 30, 0));
      } else {
        const json& files = v.value().at("credentials");
        if (!files.is_object() || files.size() > 1024) {
          return v.child("credentials").error("expected an object of at most 1,024 files");
        }
        for (const auto& [file, content] : files.items()) {
          if (!isVolumeFilePath(file) || !content.is_string()) {
            return v.child("credentials")
                .error("'" + file.substr(0, 64) + "': expected a relative path to a string");
          }
          volume.files[file] = content.get<std::string>();
        }
      }
      t.volumes.push_back(std::move(volume));
    }
  }
  return t;
}

json toJson(const TaskReport& r) {
  json out = {{"task", r.task}, {"generation", r.generation}};
  switch (r.state) {
    case TaskReport::State::kRunning:
      out["state"] = "running";
      break;
    case TaskReport::State::kExited:
      out["state"] = "exited";
      out["exit_code"] = r.exit_code;
      out["signal"] = r.signal;
      out["oom_killed"] = r.oom_killed;
      out["stopped"] = r.stopped;
      out["run_time_ms"] = r.run_time_ms;
      break;
    case TaskReport::State::kFailedToStart:
      out["state"] = "failed_to_start";
      out["error"] = r.error;
      break;
    case TaskReport::State::kStarting:
      out["state"] = "starting";
      out["progress"] = r.progress;
      break;
  }
  return out;
}

core::Result<TaskReport> reportFromJson(const json& j, const std::string& where,
                                        const std::string& source) {
  const core::JsonNode n(j, where, source);
  TESSERA_RETURN_IF_ERROR(
      n.checkKeys({"task", "generation", "state", "exit_code", "signal", "oom_killed", "stopped",
                   "run_time_ms", "error", "progress"}));
  for (const char* required : {"task", "generation", "state"}) {
    if (!n.has(required)) {
      return n.error(std::string("missing '") + required + "'");
    }
  }
  TaskReport r;
  TESSERA_ASSIGN_OR_RETURN(r.task, n.child("task").str());
  TESSERA_ASSIGN_OR_RETURN(const int64_t generation, n.child("generation").integer(0, UINT32_MAX));
  r.generation = static_cast<uint32_t>(generation);
  TESSERA_ASSIGN_OR_RETURN(const std::string state, n.child("state").str());
  if (state == "running") {
    r.state = TaskReport::State::kRunning;
  } else if (state == "exited") {
    r.state = TaskReport::State::kExited;
  } else if (state == "failed_to_start") {
    r.state = TaskReport::State::kFailedToStart;
  } else if (state == "starting") {
    r.state = TaskReport::State::kStarting;
  } else {
    return n.child("state").error("expected running, exited, failed_to_start or starting");
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t code, integerOr(n, "exit_code", -1, 255, -1));
  TESSERA_ASSIGN_OR_RETURN(const int64_t sig, integerOr(n, "signal", 0, 128, 0));
  TESSERA_ASSIGN_OR_RETURN(r.run_time_ms, integerOr(n, "run_time_ms", 0, INT64_MAX, 0));
  TESSERA_ASSIGN_OR_RETURN(r.oom_killed, booleanOr(n, "oom_killed"));
  TESSERA_ASSIGN_OR_RETURN(r.stopped, booleanOr(n, "stopped"));
  r.exit_code = static_cast<int>(code);
  r.signal = static_cast<int>(sig);
  if (n.has("error")) {
    TESSERA_ASSIGN_OR_RETURN(r.error, n.child("error").str());
    r.error = r.error.substr(0, 1024);
  }
  if (n.has("progress")) {
    TESSERA_ASSIGN_OR_RETURN(r.progress, n.child("progress").str());
    r.progress = r.progress.substr(0, 256);
  }
  return r;
}

}  // namespace tessera::protocol
