#include "server/workload_record.h"

#include "core/rfc3339.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// Reads the fields of one stored object, each error naming the field.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  bool ok() const { return error_.empty(); }
  core::Status status() const {
    return ok() ? core::Status::ok() : core::internalError(where_ + ": " + error_);
  }
  template <typename T>
  T get(const char* field, T fallback) {
    auto it = j_.find(field);
    if (it == j_.end() || it->is_null()) {
      return fallback;
    }
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      fail(std::string(field) + ": expected " + expected<T>() + ", found " + it->type_name());
      return fallback;
    }
  }
  core::WallTime time(const char* field) {
    const std::string text = get<std::string>(field, "");
    if (text.empty()) {
      return {};
    }
    auto t = core::parseRfc3339(text);
    if (!t) {
      fail(std::string(field) + ": '" + text + "' is not an RFC 3339 time");
      return {};
    }
    return *t;
  }
  void fail(std::string what) {
    if (error_.empty()) {
      error_ = std::move(what);
    }
  }

 private:
  template <typename T>
  static const char* expected() {
    if constexpr (std::is_same_v<T, std::string>) {
      return "a string";
    } else if constexpr (std::is_same_v<T, bool>) {
      return "true or false";
    } else if constexpr (std::is_integral_v<T>) {
      return "an integer";
    } else {
      return "a list or an object of the right kind";
    }
  }
  const json& j_;
  std::string where_;
  std::string error_;
};

}  // namespace

void WorkloadRecord::addEvent(std::string time, std::string event, std::string reason) {
  events.push_back({std::move(time), std::move(event), std::move(reason)});
  if (events.size() > kMaxWorkloadEvents) {
    events.erase(events.begin(),
                 events.begin() + static_cast<std::ptrdiff_t>(events.size() - kMaxWorkloadEvents));
  }
}

json statusJson(const WorkloadStatus& s) {
  json tasks = json::array();
  for (const TaskStatus& t : s.tasks) {
    json tj = {{"state", t.state}};
    if (!t.node.empty()) {
      tj["node"] = t.node;
      tj["gpus"] = t.gpus;
      if (t.milli_per_gpu > 0 && t.milli_per_gpu < 1000) {
        tj["milli_per_gpu"] = t.milli_per_gpu;
      }
      if (!t.mig_profile.empty()) {
        tj["mig"] = t.mig_profile;  // Its MIG slice's profile ("3g.40gb").
        if (t.mig_start >= 0) {
          tj["mig_slot"] = t.mig_start;
        }
      }
      if (t.generation != 0) {  // On an agent's node: what a restarted server keeps.
        tj["generation"] = t.generation;
        tj["starts"] = t.starts;
      }
      if (!t.ports.empty()) {
        tj["ports"] = t.ports;
      }
      if (!t.progress.empty()) {
        tj["progress"] = t.progress;
      }
      if (t.started_at != core::WallTime{}) {
        tj["started_at"] = core::formatRfc3339Millis(t.started_at);
      }
      if (t.finished_at != core::WallTime{}) {  // A finished task: when and how it ended.
        tj["finished_at"] = core::formatRfc3339Millis(t.finished_at);
        if (t.exit_code >= 0) {
          tj["exit_code"] = t.exit_code;
        } else if (t.signal > 0) {
          tj["signal"] = t.signal;
        }
      }
      if (t.start_failed) {  // Ended without running: its node could not start it.
        tj["start_failed"] = true;
      }
    }
    tasks.push_back(std::move(tj));
  }
  json j = {{"phase", phaseName(s.phase)}, {"tasks", tasks}};
  if (!s.reason.empty()) {
    j["reason"] = s.reason;
  }
  if (s.attempt > 1 || !s.attempts.empty()) {  // Retried, or failed once: its attempts.
    j["attempt"] = s.attempt;
    j["attempts"] = s.attempts;
  }
  return j;
}

core::Result<WorkloadStatus> statusFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) {
    return core::internalError(where + ": expected an object");
  }
  Fields f(j, where);
  WorkloadStatus s;
  const std::string phase = f.get<std::string>("phase", "");
  if (auto p = parsePhase(phase)) {
    s.phase = *p;
  } else {
    f.fail("phase: '" + phase + "' is not a workload phase");
  }
  s.reason = f.get<std::string>("reason", "");
  s.attempt = f.get<int>("attempt", 1);
  s.attempts = f.get<std::vector<std::string>>("attempts", {});
  const json tasks = f.get<json>("tasks", json::array());
  if (!tasks.is_array()) {
    f.fail("tasks: expected a list");
  }
  for (size_t i = 0; f.ok() && tasks.is_array() && i < tasks.size(); ++i) {
    if (!tasks[i].is_object()) {
      f.fail("tasks[" + std::to_string(i) + "]: expected an object");
      break;
    }
    Fields tf(tasks[i], where + ": tasks[" + std::to_string(i) + "]");
    TaskStatus t;
    t.state = tf.get<std::string>("state", "pending");
    t.node = tf.get<std::string>("node", "");
    t.gpus = tf.get<std::vector<int>>("gpus", {});
    t.milli_per_gpu = tf.get<int64_t>("milli_per_gpu", 0);
    t.mig_profile = tf.get<std::string>("mig", "");
    t.mig_start = tf.get<int>("mig_slot", -1);
    t.generation = tf.get<uint32_t>("generation", 0);
    t.starts = tf.get<uint32_t>("starts", 0);
    t.ports = tf.get<std::map<std::string, int>>("ports", {});
    t.progress = tf.get<std::string>("progress", "");
    t.started_at = tf.time("started_at");
    t.finished_at = tf.time("finished_at");
    t.exit_code = tf.get<int>("exit_code", -1);
    t.signal = tf.get<int>("signal", 0);
    t.start_failed = tf.get<bool>("start_failed", false);
    TESSERA_RETURN_IF_ERROR(tf.status());
    s.tasks.push_back(std::move(t));
  }
  TESSERA_RETURN_IF_ERROR(f.status());
  return s;
}

json workloadJson(const WorkloadRecord& r) {
  json events = json::array();
  for (const WorkloadEvent& e : r.events) {
    json ej = {{"time", e.time}, {"event", e.event}};
    if (!e.reason.empty()) {
      ej["reason"] = e.reason;
    }
    events.push_back(std::move(ej));
  }
  json j = {{"name", r.name},
            {"spec", r.spec},
            {"submitted", r.submitted},
            {"status", statusJson(r.status)},
            {"events", std::move(events)}};
  if (!r.started.empty()) {
    j["started"] = r.started;
  }
  if (!r.finished.empty()) {
    j["finished"] = r.finished;
  }
  if (r.cancel_requested) {
    j["cancel_requested"] = true;
  }
  if (r.suspended) {
    j["suspended"] = true;
  }
  if (!r.sealed_env.empty()) {
    j["sealed_env"] = r.sealed_env;
  }
  if (r.kube.is_object()) {
    j["kube"] = r.kube;
  }
  return j;
}

std::string encodeWorkload(const WorkloadRecord& r) {
  // A task's output (progress) or a reason may hold bytes that are not UTF-8: replaced, never
  // a throw on the way to the store.
  return workloadJson(r).dump(-1, ' ', false, json::error_handler_t::replace);
}

core::Result<WorkloadRecord> workloadFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) {
    return core::internalError(where + ": expected an object");
  }
  Fields f(j, where);
  WorkloadRecord r;
  r.name = f.get<std::string>("name", "");
  r.spec = f.get<json>("spec", json::object());
  if (!r.spec.is_object()) {
    f.fail("spec: expected an object");
  }
  r.submitted = f.get<std::string>("submitted", "");
  r.started = f.get<std::string>("started", "");
  r.finished = f.get<std::string>("finished", "");
  r.cancel_requested = f.get<bool>("cancel_requested", false);
  r.suspended = f.get<bool>("suspended", false);
  r.sealed_env = f.get<std::map<std::string, std::string>>("sealed_env", {});
  r.kube = f.get<json>("kube", json());
  if (!r.kube.is_null() && !r.kube.is_object()) {
    f.fail("kube: expected an object");
  }
  const json events = f.get<json>("events", json::array());
  if (!events.is_array()) {
    f.fail("events: expected a list");
  }
  for (size_t i = 0; f.ok() && events.is_array() && i < events.size(); ++i) {
    Fields ef(events[i], where + ": events[" + std::to_string(i) + "]");
    if (!events[i].is_object()) {
      f.fail("events[" + std::to_string(i) + "]: expected an object");
      break;
    }
    WorkloadEvent e{ef.get<std::string>("time", ""), ef.get<std::string>("event", ""),
                    ef.get<std::string>("reason", "")};
    TESSERA_RETURN_IF_ERROR(ef.status());
    r.events.push_back(std::move(e));
  }
  TESSERA_RETURN_IF_ERROR(f.status());
  if (r.name.empty()) {
    return core::internalError(where + ": name: missing");
  }
  if (!j.contains("status")) {
    return core::internalError(where + ": status: missing");
  }
  TESSERA_ASSIGN_OR_RETURN(r.status, statusFromJson(j.at("status"), where + ": status"));
  return r;
}

core::Result<WorkloadRecord> decodeWorkload(std::string_view stored, const std::string& where) {
  const json j = json::parse(stored, nullptr, false);
  if (j.is_discarded()) {
    return core::internalError(where + ": the stored workload is not JSON");
  }
  return workloadFromJson(j, where);
}

}  // namespace tessera::server
