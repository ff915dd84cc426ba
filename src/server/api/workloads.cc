// Workloads: submit (admission), read, cancel, events and logs; a workload's command and env,
// the secret-looking env values sealed by the barrier.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "core/strings.h"
#include "model/codec.h"
#include "protocol/node_protocol.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

namespace {

// An environment variable's name: [A-Za-z_][A-Za-z0-9_]*, at most 256 characters.
bool isVariableName(const std::string& v) {
  return !v.empty() && v.size() <= 256 && (std::isalpha(v[0]) != 0 || v[0] == '_') &&
         std::all_of(v.begin(), v.end(), [](char ch) {
           return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_';
         });
}

// A workload's "command" (argv) and "env" (variables), as an agent will run them.
core::Status parseCommandAndEnv(const core::JsonNode& n, SubmitCommand& cmd) {
  if (n.has("command")) {
    const core::JsonNode c = n.child("command");
    if (!c.value().is_array() || c.value().empty() || c.value().size() > 1024) {
      return c.error("expected a list of 1 to 1024 strings (argv)");
    }
    size_t bytes = 0;
    for (size_t i = 0; i < c.value().size(); ++i) {
      if (!c.value()[i].is_string()) {
        return c.at(i).error("expected a string");
      }
      std::string arg = c.value()[i].get<std::string>();
      if (arg.find('\0') != std::string::npos || (i == 0 && arg.empty())) {
        return c.at(i).error(i == 0 ? "the program may not be empty"
                                    : "may not contain a NUL byte");
      }
      bytes += arg.size();
      cmd.command.push_back(std::move(arg));
    }
    if (bytes > size_t{128} * 1024) {
      return c.error("longer than 128 KiB in all");
    }
  }
  if (n.has("env")) {
    const core::JsonNode e = n.child("env");
    if (!e.value().is_object() || e.value().size() > 256) {
      return e.error("expected an object of at most 256 NAME: \"value\" pairs");
    }
    for (const auto& [key, value] : e.value().items()) {
      if (!isVariableName(key)) {
        return e.error("'" + key.substr(0, 64) +
                       "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
      }
      if (!value.is_string() || value.get<std::string>().size() > 32768 ||
          value.get<std::string>().find('\0') != std::string::npos) {
        return e.child(key.c_str()).error("expected a string of at most 32 KiB without NUL bytes");
      }
      cmd.env[key] = value.get<std::string>();
    }
  }
  if (n.has("indexEnv")) {
    // ["JOB_COMPLETION_INDEX"]: more names for each task's index (TESSERA_TASK_INDEX).
    const core::JsonNode e = n.child("indexEnv");
    if (!e.value().is_array() || e.value().size() > 8) {
      return e.error("expected a list of at most 8 variable names");
    }
    for (size_t i = 0; i < e.value().size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(std::string var, e.at(i).str());
      if (!isVariableName(var)) {
        return e.at(i).error("'" + var.substr(0, 64) +
                             "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
      }
      cmd.index_env.push_back(std::move(var));
    }
  }
  if (n.has("image")) {  // A container (docs/agent.md "Containers"): checked here, run there.
    TESSERA_ASSIGN_OR_RETURN(cmd.image, n.child("image").str());
    if (auto ref = model::parseImageRef(cmd.image); !ref.isOk()) {
      return n.child("image").error(ref.status().message());
    }
  }
  if (n.has("shmMiB") || n.has("readOnlyRootfs")) {
    if (cmd.image.empty()) {
      return n.error("shmMiB and readOnlyRootfs are for containers: give an image too");
    }
    if (n.has("shmMiB")) {
      TESSERA_ASSIGN_OR_RETURN(cmd.shm_mib, n.child("shmMiB").integer(1, 1 << 20));
    }
    if (n.has("readOnlyRootfs")) {
      TESSERA_ASSIGN_OR_RETURN(cmd.read_only_rootfs, n.child("readOnlyRootfs").boolean());
    }
  }
  if (n.has("volumes")) {
    // [{"path": "/etc/db", "kv": "app/db", "items": {"password": "pw"}, "optional": false},
    //  {"path": "/dev/shm", "tmpfs": {"sizeMiB": 8192}}]: folders in its containers
    // (docs/agent.md "Volumes").
    const core::JsonNode vs = n.child("volumes");
    if (!vs.value().is_array() || vs.value().size() > 32) {
      return vs.error("expected a list of at most 32 volumes");
    }
    if (cmd.image.empty()) {
      return vs.error(
          "volumes are mounted in containers: give an image too (a plain process reads its "
          "secrets from secrets.kv)");
    }
    for (size_t i = 0; i < vs.value().size(); ++i) {
      const core::JsonNode v = vs.at(i);
      TESSERA_RETURN_IF_ERROR(v.checkKeys({"path", "kv", "items", "optional", "tmpfs"}));
      WorkloadVolume volume;
      TESSERA_ASSIGN_OR_RETURN(volume.path, v.child("path").str());
      if (!protocol::isMountPath(volume.path)) {
        return v.child("path").error(
            "'" + volume.path.substr(0, 64) +
            "' is not an absolute path without '.' or '..', outside /proc, /sys and /dev (but "
            "/dev/shm)");
      }
      for (const WorkloadVolume& other : cmd.volumes) {
        if (other.path == volume.path) {
          return v.child("path").error("mounted twice");
        }
      }
      if (v.has("kv") == v.has("tmpfs")) {
        return v.error("expected exactly one of kv (a secret's data as files) and tmpfs");
      }
      if (v.has("tmpfs")) {
        const core::JsonNode t = v.child("tmpfs");
        TESSERA_RETURN_IF_ERROR(t.checkKeys({"sizeMiB"}));
        if (t.has("sizeMiB")) {
          TESSERA_ASSIGN_OR_RETURN(volume.size_mib, t.child("sizeMiB").integer(1, 1 << 30));
        }
        if (v.has("items") || v.has("optional")) {
          return v.error("items and optional are for kv volumes");
        }
        cmd.volumes.push_back(std::move(volume));
        continue;
      }
      TESSERA_ASSIGN_OR_RETURN(volume.kv, v.child("kv").str());
      if (core::Status st = secrets::KvEngine::checkPath(volume.kv); !st.isOk()) {
        return v.child("kv").error(st.message());
      }
      if (v.has("optional")) {
        TESSERA_ASSIGN_OR_RETURN(volume.optional, v.child("optional").boolean());
      }
      if (v.has("items")) {
        const core::JsonNode items = v.child("items");
        if (!items.value().is_object() || items.value().empty() || items.value().size() > 1024) {
          return items.error("expected an object of 1 to 1,024 KEY: \"file\"");
        }
        std::set<std::string> files;
        for (const auto& [key, file] : items.value().items()) {
          if (!file.is_string() || !protocol::isVolumeFilePath(file.get<std::string>())) {
            return items.child(key.c_str())
                .error(
                    "expected a relative path (components of A-Z, a-z, 0-9, '-', '_' and "
                    "'.', none starting with '..')");
          }
          if (!files.insert(file.get<std::string>()).second) {
            return items.child(key.c_str()).error("a file named twice");
          }
          volume.items[key] = file.get<std::string>();
        }
      }
      cmd.volumes.push_back(std::move(volume));
    }
  }
  if (n.has("ports")) {
    // ["master", "http"]: a port on its node for each task, by name (docs/agent.md).
    const core::JsonNode p = n.child("ports");
    if (!p.value().is_array() || p.value().size() > 16) {
      return p.error("expected a list of at most 16 port names");
    }
    for (size_t i = 0; i < p.value().size(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(std::string name, p.at(i).str());
      if (!protocol::isPortName(name)) {
        return p.at(i).error("'" + name.substr(0, 40) +
                             "' is not a port name (1 to 32 of a-z, 0-9, '_' and '-', starting "
                             "with a letter)");
      }
      if (std::find(cmd.ports.begin(), cmd.ports.end(), name) != cmd.ports.end()) {
        return p.at(i).error("named twice");
      }
      cmd.ports.push_back(std::move(name));
    }
  }
  if (n.has("restart")) {
    // {"attempts": 2, "delay": 5, "maxDelay": 60, "mode": "fail"}: retries of the whole
    // workload when a task fails (docs/agent.md "Retries").
    const core::JsonNode r = n.child("restart");
    TESSERA_RETURN_IF_ERROR(r.checkKeys({"attempts", "delay", "maxDelay", "mode"}));
    if (r.has("attempts")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t attempts, r.child("attempts").integer(0, 1000));
      cmd.restart.attempts = static_cast<int>(attempts);
    }
    if (r.has("delay")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t delay, r.child("delay").integer(0, 3600));
      cmd.restart.delay = std::chrono::seconds(delay);
    }
    if (r.has("maxDelay")) {
      TESSERA_ASSIGN_OR_RETURN(int64_t max_delay, r.child("maxDelay").integer(0, 3600));
      if (max_delay > 0 && max_delay < cmd.restart.delay.count()) {
        return r.child("maxDelay")
            .error("must be at least delay (" + std::to_string(cmd.restart.delay.count()) + " s)");
      }
      if (max_delay > 0 && cmd.restart.delay.count() == 0) {
        return r.child("maxDelay")
            .error("needs a delay of at least 1 s to double from (restart.delay)");
      }
      cmd.restart.max_delay = std::chrono::seconds(max_delay);
    }
    if (r.has("mode")) {
      TESSERA_ASSIGN_OR_RETURN(std::string mode, r.child("mode").str());
      if (mode != "fail" && mode != "delay") {
        return r.child("mode").error(
            "expected \"fail\" (fail once the attempts are used) or "
            "\"delay\" (go on trying, backing off)");
      }
      cmd.restart.keep_trying = mode == "delay";
    }
  }
  if (n.has("identity")) {
    // {"audiences": ["sts.amazonaws.com"]}: who the task's identity token is for.
    const core::JsonNode id = n.child("identity");
    TESSERA_RETURN_IF_ERROR(id.checkKeys({"audiences"}));
    if (id.has("audiences")) {
      const core::JsonNode a = id.child("audiences");
      if (!a.value().is_array() || a.value().size() > 8) {
        return a.error("expected a list of at most 8 audiences");
      }
      for (size_t i = 0; i < a.value().size(); ++i) {
        const json& v = a.value()[i];
        if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 256) {
          return a.at(i).error("expected a non-empty string of at most 256 bytes");
        }
        cmd.identity_audiences.push_back(v.get<std::string>());
      }
    }
  }
  if (n.has("pullSecret")) {
    // "app/registry": the KV secret its registry image is pulled with (docs/agent.md).
    TESSERA_ASSIGN_OR_RETURN(cmd.secrets.pull, n.child("pullSecret").str());
    if (core::Status st = secrets::KvEngine::checkPath(cmd.secrets.pull); !st.isOk()) {
      return n.child("pullSecret").error(st.message());
    }
    auto ref = model::parseImageRef(cmd.image);
    if (cmd.image.empty() || !ref.isOk() || ref->kind != model::ImageRef::Kind::kRegistry) {
      return n.child("pullSecret")
          .error("a pull secret is for an image from a registry (`image`: registry/name:tag)");
    }
  }
  if (n.has("secrets")) {
    // {"kv": ["app/config"], "db": ["readonly"]}: delivered to each task (docs/secrets.md).
    const core::JsonNode sec = n.child("secrets");
    TESSERA_RETURN_IF_ERROR(sec.checkKeys({"kv", "db"}));
    auto names = [&](const char* field, size_t most, std::vector<std::string>& out,
                     const std::function<core::Status(const std::string&)>& check) {
      if (!sec.has(field)) {
        return core::Status::ok();
      }
      const core::JsonNode list = sec.child(field);
      if (!list.value().is_array() || list.value().size() > most) {
        return list.error("expected a list of at most " + std::to_string(most) + " names");
      }
      for (size_t i = 0; i < list.value().size(); ++i) {
        const json& v = list.value()[i];
        if (!v.is_string()) {
          return list.at(i).error("expected a string");
        }
        if (core::Status st = check(v.get<std::string>()); !st.isOk()) {
          return list.at(i).error(st.message());
        }
        if (std::find(out.begin(), out.end(), v.get<std::string>()) != out.end()) {
          return list.at(i).error("named twice");
        }
        out.push_back(v.get<std::string>());
      }
      return core::Status::ok();
    };
    TESSERA_RETURN_IF_ERROR(names("kv", 32, cmd.secrets.kv, secrets::KvEngine::checkPath));
    TESSERA_RETURN_IF_ERROR(names("db", 8, cmd.secrets.db, [](const std::string& role) {
      return secrets::DatabaseEngine::checkName("role", role);
    }));
  }
  return core::Status::ok();
}

std::string envKey(const std::string& workload, const std::string& var) {
  return "workloads/" + workload + "/env/" + var;
}

}  // namespace

core::Result<SubmitCommand> ControlPlane::commandFromRecord(const std::string& tenant,
                                                            const WorkloadRecord& record) const {
  const json& spec = record.spec;
  static const std::string kSource = "stored workload";
  core::JsonNode node(spec, "", kSource);
  SubmitCommand cmd;
  cmd.tenant = tenant;
  cmd.name = record.name;
  TESSERA_RETURN_IF_ERROR(model::parseTaskRequest(node, catalogue_, {}, cmd.spec.request));
  cmd.spec.tasks = spec.value("tasks", 1);
  cmd.spec.parallelism = spec.value("parallelism", cmd.spec.tasks);
  cmd.spec.min_available = spec.value("minAvailable", cmd.spec.parallelism);
  cmd.spec.priority = spec.value("priority", 0);
  cmd.spec.preemptible = spec.value("preemptible", true);
  cmd.queue = spec.value("queue", "default");
  cmd.duration = std::chrono::seconds(spec.value("duration", int64_t{0}));
  cmd.grace = std::chrono::seconds(spec.value("gracePeriod", int64_t{30}));
  cmd.checkpoint_every = std::chrono::seconds(spec.value("checkpointEvery", int64_t{0}));
  cmd.spec.max_runtime = std::chrono::seconds(spec.value("maxRuntime", int64_t{0}));
  TESSERA_RETURN_IF_ERROR(parseCommandAndEnv(node, cmd));
  for (const auto& [var, hex] : record.sealed_env) {
    cmd.env.erase(var);
    cmd.sealed_env[var] = hex;
  }
  cmd.suspended = record.suspended;
  // Its attempt goes on where it was (a retry is not a first run again).
  cmd.attempt = std::max(1, record.status.attempt);
  cmd.attempts_ended = record.status.attempts;
  // Tasks that finished successfully stay done, unless the workload runs its tasks together
  // and one of them failed: then its next attempt runs them all again.
  const auto failed = [](const TaskStatus& t) {
    return t.state == "finished" && (t.exit_code > 0 || t.signal != 0 || t.start_failed);
  };
  const bool keep_finished =
      !sched::runsTogether(cmd.spec) ||
      std::none_of(record.status.tasks.begin(), record.status.tasks.end(), failed);
  for (size_t i = 0; keep_finished && i < record.status.tasks.size(); ++i) {
    const TaskStatus& t = record.status.tasks[i];
    if (t.state == "finished" && !failed(t)) {
      RestoredTask rt;
      rt.index = static_cast<int>(i);
      rt.finished = true;
      rt.node = t.node;
      rt.gpus = t.gpus;
      rt.started_at = t.started_at;
      rt.finished_at = t.finished_at;
      rt.exit_code = t.exit_code;
      cmd.restore.push_back(std::move(rt));
    }
  }
  // Tasks an agent ran (or was told to start) when the server stopped go back where they are.
  for (size_t i = 0; i < record.status.tasks.size(); ++i) {
    const TaskStatus& t = record.status.tasks[i];
    if (t.generation == 0 || t.node.empty() ||
        (t.state != "starting" && t.state != "running" && t.state != "terminating")) {
      continue;
    }
    if (t.started_at == core::WallTime{}) {
      core::logWarn("workload {}/{}: task {} has no stored start time; it is placed anew", tenant,
                    cmd.name, i);
      continue;
    }
    RestoredTask rt;
    rt.index = static_cast<int>(i);
    rt.node = t.node;
    rt.gpus = t.gpus;
    rt.mig_profile = t.mig_profile;
    rt.mig_start = t.mig_start;
    rt.generation = t.generation;
    rt.starts = t.starts;
    rt.started_at = t.started_at;
    rt.confirmed = t.state != "starting";
    rt.ports = t.ports;
    cmd.restore.push_back(std::move(rt));
  }
  return cmd;
}

core::Status ControlPlane::sealEnv(const std::string& tenant, const std::string& name,
                                   SubmitCommand& cmd, json& spec, json& sealed,
                                   const std::set<std::string>& also) {
  for (auto it = cmd.env.begin(); it != cmd.env.end();) {
    if (!audit::looksSecret(it->first) && !also.contains(it->first)) {
      ++it;
      continue;
    }
    const std::string where = "workload '" + name + "': env." + it->first;
    if (secrets_ == nullptr) {
      return core::invalidArgument(where +
                                   ": its name looks secret, and this server has no secrets "
                                   "engine to seal it with; rename it, or enable secrets");
    }
    TESSERA_RETURN_IF_ERROR(secrets_->keys().addTenant(tenant).withContext(where));
    auto blob = secrets_->keys().encrypt(tenant, envKey(name, it->first), it->second);
    if (!blob.isOk()) {
      return blob.status().withContext(where + ": cannot seal it");
    }
    sealed[it->first] =
        core::hexEncode(reinterpret_cast<const unsigned char*>(blob->data()), blob->size());
    spec["env"][it->first] = "(sealed)";
    cmd.sealed_env[it->first] = sealed[it->first].get<std::string>();
    it = cmd.env.erase(it);
  }
  return core::Status::ok();
}

core::Result<std::string> ControlPlane::openEnv(const NodeTask& t, const std::string& var,
                                                const std::string& hex) const {
  if (secrets_ == nullptr) {
    return core::failedPrecondition("no secrets engine");
  }
  std::string blob;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    const int hi = core::hexDigitValue(hex[i]);
    const int lo = core::hexDigitValue(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return core::internalError("env." + var + ": the stored sealed value is not hex");
    }
    blob.push_back(static_cast<char>(hi * 16 + lo));
  }
  return secrets_->keys().decrypt(t.tenant, envKey(t.workload, var), blob);
}

int64_t ControlPlane::workloadIndex(const std::string& tenant) const {
  return registry_.index(tenant);
}

bool ControlPlane::deferUntilWorkloadsChange(Request& r, const std::string& tenant,
                                             std::function<HttpResponse(const Request&)> answer) {
  auto index = r.scope.query.find("index");
  auto wait = r.scope.query.find("wait");
  if (index == r.scope.query.end() || wait == r.scope.query.end()) {
    return false;
  }
  int64_t known = -1;
  const std::string& text = index->second;
  if (std::from_chars(text.data(), text.data() + text.size(), known).ec != std::errc() ||
      known != workloadIndex(tenant)) {
    return false;  // Unreadable, or news already: the answer now.
  }
  auto seconds = parseDurationSeconds(json(wait->second), "wait");
  if (!seconds.isOk() || *seconds <= 0) {
    return false;
  }
  const auto deadline =
      NodeWatchers::Clock::now() + std::chrono::seconds(std::min<int64_t>(*seconds, 300));
  // What the answer needs once this request is gone: its scope, token and grant (the token may
  // read some workloads only), never the request itself.
  static const HttpRequest kLater{};
  auto saved = std::make_shared<Request>(
      Request{kLater, r.scope, r.method, r.request_id, r.token, r.route, json::object(), r.grant});
  r.defer = [this, tenant, known, deadline, saved, answer = std::move(answer)](auto reply) {
    auto fire = [this, tenant, known, saved, answer, reply] {
      if (workloadIndex(tenant) == known) {
        // The wait is up and nothing changed: a short answer saying so (an idle console's
        // polls cost the audit log a few hundred bytes each, not the whole list).
        reply(api::reply(200, {{"request_id", saved->request_id},
                               {"data", {{"index", known}, {"unchanged", true}}}}));
        return;
      }
      reply(answer(*saved));
    };
    if (!workload_watchers_->wait(tenant, deadline, fire)) {
      fire();  // The tenant has enough long polls waiting.
      return;
    }
    if (workloadIndex(tenant) != known) {
      workload_watchers_->notify(tenant);  // News between the look above and the wait.
    }
  };
  return true;
}

json ControlPlane::workloadData(const std::string& tenant, const WorkloadRecord& record) const {
  json data = {{"name", record.name},
               {"tenant", tenant},
               {"spec", record.spec},
               {"submitted", record.submitted}};
  if (!record.finished.empty()) {  // Collected a retention after this.
    data["finished"] = record.finished;
  }
  auto live = driver_.status(tenant, record.name);
  data["status"] = statusJson(live ? *live : record.status);
  return data;
}

HttpResponse ControlPlane::workloadListAnswer(const Request& r, const std::string& tenant) {
  // Each workload as GET workloads/<name> shows it, in the one answer instead of one request per
  // workload; only those the token may read, and the keys as before, so older clients see the
  // same answer. `index` is what a long poll waits on.
  const int64_t index = workloadIndex(tenant);
  json keys = json::array();
  json details = json::array();
  for (const WorkloadPtr& record : registry_.list(tenant)) {
    keys.push_back(record->name);
    if (authorizedOn(r, "workloads/" + record->name, Capability::kRead)) {
      details.push_back(workloadData(tenant, *record));
    }
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data", {{"keys", keys}, {"workloads", details}, {"index", index}}}});
}

HttpResponse ControlPlane::workloadsApi(Request& r) {
  const std::string tenant = *r.scope.tenant;
  const std::vector<std::string> parts = split(r.scope.path);
  {
    std::shared_lock lock(mu_);
    if (!tenants_.contains(tenant)) {
      return error(404, "not found");
    }
  }
  if (parts.size() == 1) {
    if (r.method != "LIST") {
      return error(405, "use LIST (or GET ?list=true) on workloads");
    }
    if (!r.scope.query.contains("detail")) {
      json keys = json::array();
      for (const WorkloadPtr& record : registry_.list(tenant)) {
        keys.push_back(record->name);
      }
      return reply(200, {{"request_id", r.request_id}, {"data", {{"keys", keys}}}});
    }
    // `?detail=true` (`tessera ps`, the console), at once or as a long poll.
    if (deferUntilWorkloadsChange(r, tenant, [this, tenant](const Request& later) {
          return workloadListAnswer(later, tenant);
        })) {
      return HttpResponse{};
    }
    return workloadListAnswer(r, tenant);
  }
  const std::string& name = parts[1];
  if (!validName(name)) {
    return error(400, "workload names are lowercase letters, digits and '-' (at most 63)");
  }
  // Read before the record: a change after it moves the index past this one, so a long poll
  // from here misses nothing.
  const int64_t index = workloadIndex(tenant);
  const WorkloadPtr record = registry_.get(tenant, name);
  const bool exists = record != nullptr;
  if (parts.size() == 3 && (parts[2] == "suspend" || parts[2] == "resume")) {
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    auto done = setSuspended(tenant, name, parts[2] == "suspend");
    if (!done.isOk()) {
      return fromStatus(done.status());
    }
    return reply(200, {{"request_id", r.request_id}, {"data", workloadData(tenant, **done)}});
  }
  if (parts.size() == 3 && parts[2] == "logs") {
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    return workloadLogs(r, tenant, name);
  }
  if (parts.size() == 3 && parts[2] == "events" && r.method == "GET") {
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id},
                       {"data", {{"events", workloadJson(*record)["events"]}}}});
  }
  if (parts.size() != 2) {
    return error(404, "unsupported path");
  }
  if (r.method == "GET") {
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    json data = workloadData(tenant, *record);
    data["index"] = index;  // The tenant's workloads' (a long poll of the list waits on it).
    return reply(200, {{"request_id", r.request_id}, {"data", data}});
  }
  if (r.method == "DELETE") {
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    // The request is stored (durable, so it survives a restart); the scheduler stops the
    // workload when the store's watch brings it (onStoreEvents).
    std::lock_guard write_lock(status_write_mu_);
    const WorkloadPtr now = registry_.get(tenant, name);
    if (now == nullptr) {
      return error(404, "no workload '" + name + "'");
    }
    if (now->cancel_requested || isFinished(now->status.phase)) {
      return noContent();  // Nothing left to stop.
    }
    WorkloadRecord updated = *now;
    updated.cancel_requested = true;
    updated.addEvent(core::formatRfc3339(clock_.wallNow()), "cancel requested");
    auto put = store_.put(workloadKey(tenant, name), encodeWorkload(updated));
    if (!put.isOk()) {
      return fromStatus(put.status());
    }
    waitForOwnWrite(*put);
    return noContent();
  }
  if (r.method != "POST") {
    return error(405, "method not allowed");
  }
  if (exists) {
    return error(409, "workload '" + name + "' exists; workloads cannot be changed");
  }
  return submitWorkload(r, tenant, name, r.body, json());
}

core::Result<WorkloadPtr> ControlPlane::setSuspended(
    const std::string& tenant, const std::string& name, bool suspended,
    const std::function<void(WorkloadRecord&)>& also) {
  std::lock_guard write_lock(status_write_mu_);
  const WorkloadPtr now = registry_.get(tenant, name);
  if (now == nullptr) {
    return core::notFound("no workload '" + name + "'");
  }
  if (now->cancel_requested || isFinished(now->status.phase)) {
    return core::failedPrecondition("workload '" + name + "' has " +
                                    (now->cancel_requested ? "been cancelled" : "finished") +
                                    ": there is nothing to " + (suspended ? "suspend" : "resume"));
  }
  WorkloadRecord updated = *now;
  if (updated.suspended != suspended) {
    updated.suspended = suspended;
    updated.addEvent(core::formatRfc3339(clock_.wallNow()), suspended ? "suspended" : "resumed");
  }
  if (also) {
    also(updated);
  }
  if (workloadJson(updated) == workloadJson(*now)) {
    return now;  // Nothing changes.
  }
  auto put = store_.put(workloadKey(tenant, name), encodeWorkload(updated));
  if (!put.isOk()) {
    return put.status();
  }
  waitForOwnWrite(*put);
  const WorkloadPtr after = registry_.get(tenant, name);
  return after != nullptr ? after : std::make_shared<const WorkloadRecord>(std::move(updated));
}

HttpResponse ControlPlane::submitWorkload(Request& r, const std::string& tenant,
                                          const std::string& name, const json& body, json kube,
                                          const std::set<std::string>& seal) {
  // Admission: the body against the catalogue, the pool and the tenant's caps.
  const std::string source = "workload '" + name + "'";
  core::JsonNode n(body, "", source);
  core::Status st = n.checkKeys(
      {"tasks",           "minAvailable",   "priority", "preemptible", "maxRuntime",   "duration",
       "checkpointEvery", "gracePeriod",    "command",  "env",         "identity",     "secrets",
       "cpuMilli",        "memoryMiB",      "gpu",      "queue",       "nodeSelector", "image",
       "shmMiB",          "readOnlyRootfs", "ports",    "restart",     "pullSecret",   "indexEnv",
       "parallelism",     "volumes",        "suspended"});
  SubmitCommand cmd;
  cmd.tenant = tenant;
  cmd.name = name;
  if (st.isOk()) {
    st = model::parseTaskRequest(n, catalogue_, {}, cmd.spec.request);
  }
  if (st.isOk()) {
    st = parseCommandAndEnv(n, cmd);
  }
  json spec = body;
  // Whether it starts suspended is its state, not its spec: kept in its record (it may change).
  if (st.isOk() && n.has("suspended")) {
    auto suspended = n.child("suspended").boolean();
    st = suspended.status();
    cmd.suspended = suspended.isOk() && *suspended;
    spec.erase("suspended");
  }
  json sealed_env = json::object();
  if (st.isOk()) {
    st = sealEnv(tenant, name, cmd, spec, sealed_env, seal);
  }
  const bool kv_volumes = std::any_of(cmd.volumes.begin(), cmd.volumes.end(),
                                      [](const WorkloadVolume& v) { return !v.kv.empty(); });
  if (st.isOk() && (!cmd.secrets.empty() || !cmd.secrets.pull.empty() || kv_volumes)) {
    if (core::Status allowed = checkWorkloadSecrets(r, cmd.secrets, cmd.volumes); !allowed.isOk()) {
      return fromStatus(allowed.withContext(source));
    }
  }
  if (st.isOk() && n.has("queue")) {
    auto q = n.child("queue").str();
    st = q.status();
    if (q.isOk()) {
      cmd.queue = *q;
      if (!driver_.hasQueue(tenant, cmd.queue)) {
        st = core::invalidArgument(source + ": queue: tenant '" + tenant + "' has no queue '" +
                                   cmd.queue + "'");
      }
    }
  }
  auto field = [&](const char* f, int64_t lo, int64_t hi, int64_t def) -> core::Result<int64_t> {
    return n.has(f) ? n.child(f).integer(lo, hi) : core::Result<int64_t>(def);
  };
  auto tasks = field("tasks", 1, kMaxWorkloadTasks, 1);
  auto parallelism = tasks.isOk() ? field("parallelism", 1, *tasks, *tasks) : tasks;
  auto min =
      parallelism.isOk() ? field("minAvailable", 1, *parallelism, *parallelism) : parallelism;
  auto prio = field("priority", -1000000, 1000000, 0);
  auto duration = field("duration", 0, 365LL * 86400, 0);
  auto grace = field("gracePeriod", 0, 3600, 30);
  auto checkpoint = field("checkpointEvery", 0, 365LL * 86400, 0);
  auto max_runtime = field("maxRuntime", 0, 365LL * 86400, 0);
  for (const core::Status& s : {st, tasks.status(), min.status(), prio.status(), duration.status(),
                                grace.status(), checkpoint.status(), max_runtime.status()}) {
    if (!s.isOk()) {
      return fromStatus(s);
    }
  }
  cmd.checkpoint_every = std::chrono::seconds(*checkpoint);
  cmd.spec.max_runtime = std::chrono::seconds(*max_runtime);
  cmd.spec.tasks = static_cast<int>(*tasks);
  cmd.spec.min_available = static_cast<int>(*min);
  cmd.spec.parallelism = static_cast<int>(*parallelism);
  cmd.spec.priority = static_cast<int32_t>(*prio);
  if (n.has("preemptible")) {
    auto preemptible = n.child("preemptible").boolean();
    if (!preemptible.isOk()) {
      return fromStatus(preemptible.status());
    }
    cmd.spec.preemptible = *preemptible;
  }
  cmd.duration = std::chrono::seconds(*duration);
  cmd.grace = std::chrono::seconds(*grace);
  {
    std::lock_guard lock(mu_);
    auto t = tenants_.find(tenant);
    if (t == tenants_.end()) {
      return error(404, "not found");  // Deleted since the request was routed.
    }
    const json& config = t->second;
    const int64_t pending = registry_.pending(tenant);
    if (static_cast<int64_t>(registry_.count(tenant)) >=
        config.value("max_workloads", options_.default_max_workloads)) {
      return error(429, "tenant '" + tenant + "' is at its limit of stored workloads");
    }
    if (pending >= config.value("max_pending", options_.default_max_pending)) {
      return error(429, "tenant '" + tenant + "' is at its limit of pending workloads");
    }
  }
  WorkloadRecord stored;
  stored.name = name;
  stored.spec = std::move(spec);
  stored.submitted = core::formatRfc3339(clock_.wallNow());
  stored.addEvent(stored.submitted, "submitted");
  stored.kube = std::move(kube);
  stored.suspended = cmd.suspended;
  if (cmd.suspended) {
    stored.addEvent(stored.submitted, "suspended");
  }
  for (const auto& [var, hex] : sealed_env.items()) {
    stored.sealed_env[var] = hex.get<std::string>();
  }
  const std::string value = encodeWorkload(stored);
  // The record grows with its tasks' status and its events, and must stay within what the store
  // takes, or it could never be updated again (nor cancelled).
  const size_t largest =
      value.size() + static_cast<size_t>(*tasks) * kTaskStatusBytes + kEventsBytes + kAttemptsBytes;
  if (largest > store::kMaxValueBytes) {
    return error(400, source + ": its record could grow to " + std::to_string(largest) +
                          " bytes with the status of its " + std::to_string(*tasks) +
                          " tasks, over the store's limit of " +
                          std::to_string(store::kMaxValueBytes) +
                          "; submit fewer tasks or a shorter command and env");
  }
  // Refused now if it could never run; then stored (durable) and acknowledged. The scheduler
  // gets it from the store's watch (onStoreEvents), and after a restart from load().
  if (core::Status ok = driver_.check(cmd); !ok.isOk()) {
    return error(400, source + ": " + ok.message());
  }
  if (core::Status ok = driver_.checkLimits(cmd); !ok.isOk()) {
    return error(400, source + ": " + ok.message());
  }
  // Stored only while the tenant is: a tenant deleted since the checks above (its deletion does
  // not wait for submissions) must not be left with a workload.
  store::Txn txn;
  txn.notes = std::move(r.audit_notes);
  txn.compares.push_back(
      store::Compare::version(workloadKey(tenant, name), store::Compare::kEqual, 0));
  txn.compares.push_back(store::Compare::version(tenantKey(tenant), store::Compare::kGreater, 0));
  txn.success.push_back(store::Op::put(workloadKey(tenant, name), value));
  auto res = store_.txn(std::move(txn));
  if (!res.isOk()) {
    return fromStatus(res.status());
  }
  if (!res->succeeded) {
    // Either compare failed: the tenant is gone (deleted since the checks above), or the name
    // is taken.
    std::shared_lock lock(mu_);
    return tenants_.contains(tenant) ? error(409, "workload '" + name + "' exists")
                                     : error(404, "not found");
  }
  waitForOwnWrite(res->revision);
  bool deleting = false;
  {
    std::shared_lock lock(mu_);
    deleting = !tenants_.contains(tenant);
  }
  if (deleting) {
    // Stored, while the tenant is out of the caches: its deletion began after the checks above
    // and is under way. It holds the tenant's lock until it is done, and either removes the
    // workload with the rest or, if it fails, puts the tenant back and hands the workload over.
    std::lock_guard wait(tenantLock(tenant));
    std::shared_lock lock(mu_);
    if (!tenants_.contains(tenant)) {
      return error(404, "not found");  // Deleted meanwhile: the workload went with it.
    }
  }
  return reply(202, {{"request_id", r.request_id},
                     {"data", {{"name", name}, {"tenant", tenant}, {"phase", "pending"}}}});
}

HttpResponse ControlPlane::workloadLogs(Request& r, const std::string& tenant,
                                        const std::string& name) {
  if (r.method != "GET") {
    return error(405, "method not allowed");
  }
  int64_t task = 0;
  LogRequest req;
  req.stream = "stdout";
  try {
    if (auto it = r.scope.query.find("task"); it != r.scope.query.end()) {
      task = std::stoll(it->second);
    }
    if (auto it = r.scope.query.find("offset"); it != r.scope.query.end()) {
      req.offset = std::stoll(it->second);
    }
    if (auto it = r.scope.query.find("limit"); it != r.scope.query.end()) {
      req.limit = std::stoll(it->second);
    }
  } catch (const std::exception&) {
    return error(400, "logs: task, offset and limit must be numbers");
  }
  if (auto it = r.scope.query.find("stream"); it != r.scope.query.end()) {
    req.stream = it->second;
  }
  if (req.stream != "stdout" && req.stream != "stderr") {
    return error(400, "logs: stream: expected stdout or stderr");
  }
  if (req.offset < 0 || req.limit < 1 || req.limit > int64_t{256} * 1024) {
    return error(400, "logs: offset must be >= 0 and limit 1..262144 bytes");
  }
  const std::optional<WorkloadStatus> status = driver_.status(tenant, name);
  if (!status) {
    return error(404, "no workload '" + name + "'");
  }
  if (task < 0 || task >= static_cast<int64_t>(status->tasks.size())) {
    return error(404, "workload '" + name + "' has no task " + std::to_string(task));
  }
  const std::string& node = status->tasks[static_cast<size_t>(task)].node;
  if (node.empty()) {
    return error(404, "task " + std::to_string(task) + " of '" + name +
                          "' has not run on an agent's node (no logs yet)");
  }
  if (!driver_.isAgentNode(node)) {
    return error(404, "task " + std::to_string(task) + " runs on simulated node '" + node +
                          "', which keeps no logs");
  }
  if (status->tasks[static_cast<size_t>(task)].state == "starting") {
    // Placed, and its agent not yet said it started it: nothing written yet (`logs -f` waits).
    return reply(200, {{"request_id", r.request_id},
                       {"data",
                        {{"task", task},
                         {"node", node},
                         {"stream", req.stream},
                         {"offset", req.offset},
                         {"next_offset", req.offset},
                         {"size", 0},
                         {"phase", phaseName(status->phase)},
                         {"state", "starting"},
                         {"text", ""}}}});
  }
  req.task = tenant + "." + name + "." + std::to_string(task);
  const int64_t offset = req.offset;
  const std::string stream = req.stream;
  auto piece = mailbox_.fetchLog(node, std::move(req), std::chrono::seconds(5));
  if (!piece.isOk()) {
    return fromStatus(piece.status());
  }
  // Logs are bytes; JSON wants UTF-8: invalid sequences become U+FFFD.
  const std::string text =
      json::parse(json(piece->data).dump(-1, ' ', false, json::error_handler_t::replace))
          .get<std::string>();
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"task", task},
                       {"node", node},
                       {"stream", stream},
                       {"offset", offset},
                       {"next_offset", offset + static_cast<int64_t>(piece->data.size())},
                       {"size", piece->size},
                       {"phase", phaseName(status->phase)},
                       {"text", text}}}});
}

}  // namespace tessera::server
