#include "agent/server_link.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <thread>

#include "agent/exec_util.h"
#include "agent/runtime.h"
#include "core/log.h"
#include "core/strings.h"

namespace tessera::agent {

using api::ApiClient;
using api::pathSegment;

namespace {

// The node whose agent runs on this thread (several share a process in `tessera dev`), for logs.
thread_local std::string t_log_node;

// The node protocol over HTTPS: PUT /v1/sys/nodes/<node>/heartbeat (docs/agent.md).
class HttpControlPlane final : public ControlPlaneClient {
 public:
  HttpControlPlane(std::unique_ptr<ApiClient> api, AssignmentOptions assign, UserMapping* users,
                   std::string advertise_address)
      : api_(std::move(api)),
        assign_(std::move(assign)),
        users_(users),
        advertise_address_(std::move(advertise_address)) {}

  core::Result<std::vector<TaskAssignment>> heartbeat(
      const std::string& node, const NodeGpus& gpus,
      const std::vector<TaskReport>& reports) override {
    nlohmann::json list = nlohmann::json::array();
    for (const TaskReport& r : reports) {
      list.push_back(reportToJson(r));
    }
    const std::string target = "/v1/sys/nodes/" + pathSegment(node) + "/heartbeat";
    nlohmann::json found = toJson(gpus);
    if (!advertise_address_.empty()) {
      found["address"] = advertise_address_;
    }
    auto answer =
        api_->call("PUT", target, {{"node", std::move(found)}, {"reports", std::move(list)}});
    no_leader_ = !answer.isOk() && api_->lastHeader("X-Tessera-Leader") == "none";
    if (!answer.isOk()) {
      return answer.status();
    }
    const nlohmann::json* found_data =
        answer->is_object() && answer->contains("data") ? &(*answer)["data"] : nullptr;
    if (found_data == nullptr || !found_data->is_object()) {
      // Not an answer to a heartbeat: nothing in it was delivered.
      return core::unavailable("the server's answer to the heartbeat from " + api_->address() +
                               " has no data object: " + answer->dump().substr(0, 200));
    }
    const nlohmann::json& data = *found_data;
    for (const TaskReport& r : reports) {
      describe(r);  // Delivered.
    }
    if (!registered_) {
      agentLog(fmt::format("node {} registered with {} ({} GPUs, lease {} ms)", node,
                           api_->address(), gpus.gpus.size(), data.value("lease_ttl_ms", 0)));
      registered_ = true;
    }
    std::vector<TaskAssignment> out;
    for (const nlohmann::json& t : data.value("tasks", nlohmann::json::array())) {
      auto a = assignmentFromJson(t, gpus, assign_);
      if (!a.isOk()) {
        if (!t.is_object() || !t.contains("task") || !t["task"].is_string() ||
            !t.contains("generation") || !t["generation"].is_number_unsigned()) {
          agentLog("ignoring a task the server sent: " + a.status().message());
          continue;
        }
        TaskAssignment bad;
        bad.spec.id = t["task"].get<std::string>();
        bad.generation = t["generation"].get<uint32_t>();
        bad.invalid = a.status().message();
        out.push_back(std::move(bad));
        continue;
      }
      if (users_ != nullptr) {
        auto user = users_->ensure(a->spec.tenant);
        if (user.isOk()) {
          a->spec.user = *user;
        } else {
          a->invalid = user.status().message();
        }
      }
      out.push_back(std::move(a).value());
    }
    return out;
  }

  bool noLeaderCanAct() const override { return no_leader_; }

 private:
  static void describe(const TaskReport& r) {
    switch (r.state) {
      case TaskReport::State::kRunning:
        agentLog(fmt::format("task {} (generation {}) started", r.id, r.generation));
        break;
      case TaskReport::State::kExited:
        agentLog(fmt::format("task {} (generation {}) {} after {} ms", r.id, r.generation,
                             r.exit.describe(), r.exit.run_time.count()));
        break;
      case TaskReport::State::kFailedToStart:
        agentLog(fmt::format("task {} (generation {}) could not start: {}", r.id, r.generation,
                             r.error));
        break;
      case TaskReport::State::kStarting:
        break;  // Progress: the server shows it; the log would repeat it every second.
    }
  }

  std::unique_ptr<ApiClient> api_;
  AssignmentOptions assign_;
  UserMapping* users_;
  std::string advertise_address_;
  bool registered_ = false;
  bool no_leader_ = false;  // The last failed heartbeat's answer: X-Tessera-Leader: none.
};

}  // namespace

void setLogNode(const std::string& node) { t_log_node = node; }

void agentLog(const std::string& line) { core::logInfo("agent {}: {}", t_log_node, line); }

void sleepUnlessStopped(std::chrono::milliseconds d, const std::atomic<bool>& stop) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (!stop && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::unique_ptr<ControlPlaneClient> httpControlPlane(std::unique_ptr<ApiClient> api,
                                                     AssignmentOptions assign, UserMapping* users,
                                                     std::string advertise_address) {
  return std::make_unique<HttpControlPlane>(std::move(api), std::move(assign), users,
                                            std::move(advertise_address));
}

void answerLogRequest(api::ApiClient& api, const std::string& node, const std::string& work_dir,
                      const nlohmann::json& req) {
  const std::string id = req.value("id", "");
  const std::string task = req.value("task", "");
  const std::string stream = req.value("stream", "");
  const int64_t offset = req.value("offset", int64_t{0});
  const int64_t limit =
      std::clamp<int64_t>(req.value("limit", int64_t{65536}), 1, int64_t{256} * 1024);
  nlohmann::json body;
  const std::string path = work_dir + "/" + task + "/" + stream + ".log";
  std::ifstream in(path, std::ios::binary);
  if (!plainFileName(task) || (stream != "stdout" && stream != "stderr") || offset < 0) {
    body = {{"error", "bad log request"}};
  } else if (!in) {
    body = {{"error", "no " + stream + " log of task " + task + " on node " + node}};
  } else {
    in.seekg(0, std::ios::end);
    const int64_t size = in.tellg();
    std::string data;
    if (offset < size) {
      data.resize(static_cast<size_t>(std::min(limit, size - offset)));
      in.seekg(offset);
      in.read(data.data(), static_cast<std::streamsize>(data.size()));
      data.resize(static_cast<size_t>(in.gcount()));
    }
    body = {{"data_hex",
             core::hexEncode(reinterpret_cast<const unsigned char*>(data.data()), data.size())},
            {"size", size}};
  }
  auto r = api.call("PUT", "/v1/sys/nodes/" + pathSegment(node) + "/logs/" + pathSegment(id), body);
  if (!r.isOk()) {
    agentLog("cannot answer a log request: " + r.status().message());
  }
}

void watchTasks(api::ApiClient& api, const std::string& node, const std::string& work_dir,
                std::chrono::milliseconds wait, Wakeup& wakeup, const std::atomic<bool>& stop) {
  setLogNode(node);
  std::optional<uint64_t> known;
  while (!stop) {
    std::string target = "/v1/sys/nodes/" + pathSegment(node) + "/tasks";
    if (known) {
      target += fmt::format("?index={}&wait_ms={}", *known, wait.count());
    }
    auto r = api.call("GET", target);
    if (!r.isOk()) {
      sleepUnlessStopped(std::chrono::milliseconds(1000), stop);  // The heartbeat says why.
      continue;
    }
    const nlohmann::json data = r->is_object() ? r->value("data", nlohmann::json()) : nullptr;
    if (!data.is_object()) {
      // Not an answer to this watch (a server in the middle of a failover, say): later.
      agentLog("the server's answer to the task watch has no data object; trying again");
      sleepUnlessStopped(std::chrono::milliseconds(1000), stop);
      continue;
    }
    try {
      for (const nlohmann::json& req : data.value("log_requests", nlohmann::json::array())) {
        if (req.is_object()) {
          answerLogRequest(api, node, work_dir, req);
        }
      }
      const uint64_t version = data.value("version", uint64_t{0});
      if (known != version) {
        known = version;
        wakeup.poke();
      } else if (!data.value("waited", true)) {
        sleepUnlessStopped(std::chrono::milliseconds(1000), stop);  // The server could not wait.
      }
    } catch (const nlohmann::json::exception& e) {
      agentLog(std::string("the server's answer to the task watch is malformed: ") + e.what());
      sleepUnlessStopped(std::chrono::milliseconds(1000), stop);
    }
  }
}

}  // namespace tessera::agent
