// Nodes: the list operators and tenants read, and the agents' protocol (heartbeat, the task
// list watch, log answers); docs/agent.md.
#include <openssl/crypto.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

HttpResponse ControlPlane::nodesApi(Request& r) {
  if (r.method != "GET" && r.method != "LIST") {
    return error(405, "method not allowed: nodes are read with GET or LIST");
  }
  // Capacity only: which tenant runs what on a node is not the caller's business.
  json nodes = json::array();
  for (const NodeState& s : driver_.nodeStates()) {
    nodes.push_back(nodeJson(s, r.scope.tenant));
  }
  return reply(200, {{"request_id", r.request_id}, {"data", {{"nodes", nodes}}}});
}

HttpResponse ControlPlane::heartbeatApi(Request& r, const std::string& node) {
  if (r.method != "PUT" && r.method != "POST") {
    return error(405, "method not allowed");
  }
  const std::string source = "heartbeat of node '" + node + "'";
  core::JsonNode body(r.body, "", source);
  if (core::Status st = body.checkKeys({"node", "reports"}); !st.isOk()) {
    return fromStatus(st);
  }
  // The GPUs its agent found, in index order, by catalogue model, and which have MIG mode on.
  std::vector<std::string> models;
  std::vector<model::MigMode> mig_modes;
  std::vector<std::vector<model::MigInstance>> mig_idle;  // Per GPU (docs/agent.md, "MIG").
  if (body.has("node")) {
    const json& found = r.body["node"];
    if (!found.is_object() || !found.contains("gpus") || !found["gpus"].is_array()) {
      return error(400, source + ": node: expected the agent's discovery ({\"gpus\": [...]})");
    }
    for (const json& g : found["gpus"]) {
      if (!g.is_object() || !g.contains("model") || !g["model"].is_string()) {
        return error(400, source + ": node.gpus: each GPU needs its \"model\"");
      }
      models.push_back(g["model"].get<std::string>());
      if (g.contains("mig_enabled") && !g["mig_enabled"].is_boolean()) {
        return error(400, source + ": node.gpus: \"mig_enabled\" must be true or false");
      }
      if (g.contains("mig_managed") && !g["mig_managed"].is_boolean()) {
        return error(400, source + ": node.gpus: \"mig_managed\" must be true or false");
      }
      // A GPU whose agent turns MIG mode on and off as work needs takes either kind of work.
      mig_modes.push_back(g.value("mig_managed", false)   ? model::MigMode::kAny
                          : g.value("mig_enabled", false) ? model::MigMode::kOn
                                                          : model::MigMode::kOff);
      std::vector<model::MigInstance>& idle = mig_idle.emplace_back();
      if (g.contains("mig_idle")) {
        const json& list = g["mig_idle"];
        if (!list.is_array() || list.size() > 8) {
          return error(400, source + ": node.gpus: \"mig_idle\" must be a list of at most 8");
        }
        for (const json& m : list) {
          if (!m.is_object() || !m.contains("profile") || !m["profile"].is_number_integer() ||
              !m.contains("start") || !m["start"].is_number_integer() ||
              m["profile"].get<int64_t>() < 0 || m["profile"].get<int64_t>() > 64 ||
              m["start"].get<int64_t>() < 0 || m["start"].get<int64_t>() > 7) {
            return error(400, source +
                                  ": node.gpus: each of \"mig_idle\" is {\"profile\": <catalogue "
                                  "profile index>, \"start\": <slice 0-7>}");
          }
          idle.push_back({m["profile"].get<int>(), m["start"].get<int>()});
        }
      }
    }
  } else {
    return error(400, source + ": node: missing (the agent's discovery)");
  }
  std::vector<NodeTaskReport> reports;
  if (body.has("reports")) {
    const json& list = r.body["reports"];
    if (!list.is_array() || list.size() > 10000) {
      return error(400, source + ": reports: expected a list (at most 10000)");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      auto rep = protocol::reportFromJson(list[i], "reports[" + std::to_string(i) + "]", source);
      if (!rep.isOk()) {
        return fromStatus(rep.status());
      }
      reports.push_back(std::move(rep).value());
    }
  }
  // The answer comes at once: agents wait for news on GET sys/nodes/<node>/tasks instead, so
  // that their reports are never held behind a waiting call.
  // Where its tasks' peers reach the node: what its agent advertises, else the address its
  // connection comes from (docs/agent.md "Distributed training").
  std::string address;
  if (const json& found = r.body["node"]; found.contains("address")) {
    const json& a = found["address"];
    if (!a.is_string() || a.get<std::string>().empty() || a.get<std::string>().size() > 255 ||
        a.get<std::string>().find_first_of(" \t\r\n,") != std::string::npos) {
      return error(400, source + ": node.address: expected a host name or IP address");
    }
    address = a.get<std::string>();
  } else {
    const std::string& remote = r.http.remote;  // "1.2.3.4:5678" or "[::1]:5678".
    address = remote.rfind('[', 0) == 0 ? remote.substr(1, remote.find(']') - 1)
                                        : remote.substr(0, remote.rfind(':'));
  }
  auto answer = driver_.heartbeat(node, models, std::move(reports), mig_modes, address, mig_idle);
  if (!answer.isOk()) {
    return fromStatus(answer.status());
  }
  noteBeat(node, r);
  json tasks = json::array();
  for (const NodeTask& t : answer->tasks) {
    protocol::AssignedTask a = t;  // The message, without what the server keeps beside it.
    for (const auto& [var, hex] : t.sealed_env) {
      auto plain = openEnv(t, var, hex);
      if (plain.isOk()) {
        a.env[var] = std::move(plain).value();
      } else {
        a.credentials_error = "its env." + var + ": " + plain.status().message();
      }
    }
    // Files the agent keeps in the task's credentials folder (docs/secrets.md). The key is one
    // the audit log always HMACs.
    if (std::string token = identityToken(t, node); !token.empty()) {
      a.credentials["identity-token"] = std::move(token);
    }
    if (!t.secrets.empty()) {
      auto file = task_secrets_ != nullptr
                      ? task_secrets_->resolve(t)
                      : core::Result<std::string>(core::failedPrecondition("no secrets engine"));
      if (file.isOk()) {
        a.credentials["secrets.json"] = std::move(file).value();
      } else {
        // The agent does not start the task, and reports why.
        a.credentials_error = "its secrets: " + file.status().message();
      }
    }
    const bool kv_volumes = std::any_of(t.volumes.begin(), t.volumes.end(),
                                        [](const WorkloadVolume& v) { return !v.kv.empty(); });
    if (!kv_volumes) {
      for (const WorkloadVolume& v : t.volumes) {  // Empty folders: nothing to read.
        a.volumes.push_back({.path = v.path, .files = {}, .tmpfs = true, .size_mib = v.size_mib});
      }
    } else {
      auto volumes = task_secrets_ != nullptr
                         ? task_secrets_->volumes(t)
                         : core::Result<std::vector<protocol::TaskVolume>>(
                               core::failedPrecondition("volumes: no secrets engine"));
      if (volumes.isOk()) {
        a.volumes = std::move(volumes).value();
      } else {
        a.credentials_error = "its " + volumes.status().message();
      }
    }
    if (!t.secrets.pull.empty()) {
      // The login for the image's registry only; the agent keeps it in memory for the pull.
      auto login =
          task_secrets_ != nullptr
              ? task_secrets_->pullCredentials(t)
              : core::Result<PullCredentials>(core::failedPrecondition("no secrets engine"));
      if (login.isOk()) {
        a.pull_username = login->username;
        a.pull_password = login->password;
      } else {
        a.credentials_error = "its image: " + login.status().message();
      }
    }
    tasks.push_back(protocol::toJson(a));
    OPENSSL_cleanse(a.pull_password.data(), a.pull_password.size());
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"version", answer->version},
                       {"lease_ttl_ms", options_.node_lease_ttl.count()},
                       {"tasks", tasks}}}});
}

HttpResponse ControlPlane::watchNodeApi(Request& r, const std::string& node) {
  const std::string source = "tasks of node '" + node + "'";
  uint64_t known = UINT64_MAX;
  int64_t wait_ms = 0;
  try {
    if (auto it = r.scope.query.find("index"); it != r.scope.query.end()) {
      known = std::stoull(it->second);
    }
    if (auto it = r.scope.query.find("wait_ms"); it != r.scope.query.end()) {
      wait_ms = std::clamp<int64_t>(std::stoll(it->second), 0, 10000);
    }
  } catch (const std::exception&) {
    return error(400, source + ": index and wait_ms must be numbers");
  }
  core::Result<uint64_t> version = driver_.watchNode(node, known, std::chrono::milliseconds(0));
  if (!version.isOk()) {
    return fromStatus(version.status());
  }
  if (wait_ms == 0 || *version != known || mailbox_.hasWaiting(node)) {
    return watchAnswer(node, r.request_id, false);
  }
  // Nothing new yet: the answer waits, without a thread, until the node's list changes, a
  // request for its agent comes, or wait_ms is up (server/node_watchers.h).
  const auto deadline = NodeWatchers::Clock::now() + std::chrono::milliseconds(wait_ms);
  r.defer = [this, node, known, deadline, id = r.request_id](auto answer) {
    auto fire = [this, node, id, answer] { answer(watchAnswer(node, id, true)); };
    if (!watchers_->wait(node, deadline, fire)) {
      fire();  // The node has enough watches waiting.
      return;
    }
    // News that came between the look above and the wait: answer now.
    auto now = driver_.watchNode(node, known, std::chrono::milliseconds(0));
    if (!now.isOk() || *now != known || mailbox_.hasWaiting(node)) {
      watchers_->notify(node);
    }
  };
  return HttpResponse{};
}

HttpResponse ControlPlane::watchAnswer(const std::string& node, const std::string& request_id,
                                       bool waited) {
  core::Result<uint64_t> version = driver_.watchNode(node, 0, std::chrono::milliseconds(0));
  if (!version.isOk()) {
    return fromStatus(version.status());
  }
  json requests = json::array();
  for (const LogRequest& l : mailbox_.take(node)) {
    requests.push_back({{"id", l.id},
                        {"task", l.task},
                        {"stream", l.stream},
                        {"offset", l.offset},
                        {"limit", l.limit}});
  }
  return reply(200,
               {{"request_id", request_id},
                {"data", {{"version", *version}, {"waited", waited}, {"log_requests", requests}}}});
}

HttpResponse ControlPlane::logAnswerApi(Request& r, const std::string& node,
                                        const std::string& id) {
  if (r.method != "PUT" && r.method != "POST") {
    return error(405, "method not allowed");
  }
  const std::string source = "log answer of node '" + node + "'";
  core::JsonNode body(r.body, "", source);
  if (core::Status st = body.checkKeys({"data_hex", "size", "error"}); !st.isOk()) {
    return fromStatus(st);
  }
  LogPiece piece;
  if (body.has("error")) {
    auto e = body.child("error").str();
    if (!e.isOk()) {
      return fromStatus(e.status());
    }
    piece.error = e->substr(0, 1024);
  } else {
    const json hex = r.body.value("data_hex", json(""));
    if (!hex.is_string() || hex.get<std::string>().size() % 2 != 0) {
      return error(400, source + ": data_hex: expected hex digits");
    }
    const std::string& h = hex.get_ref<const std::string&>();
    piece.data.reserve(h.size() / 2);
    for (size_t i = 0; i < h.size(); i += 2) {
      const int hi = core::hexDigitValue(h[i]);
      const int lo = core::hexDigitValue(h[i + 1]);
      if (hi < 0 || lo < 0) {
        return error(400, source + ": data_hex: expected hex digits");
      }
      piece.data.push_back(static_cast<char>(hi * 16 + lo));
    }
    auto size = body.has("size") ? body.child("size").integer(0, INT64_MAX)
                                 : core::Result<int64_t>(int64_t{0});
    if (!size.isOk()) {
      return fromStatus(size.status());
    }
    piece.size = *size;
  }
  if (core::Status st = mailbox_.answer(node, id, std::move(piece)); !st.isOk()) {
    return fromStatus(st);
  }
  return noContent();
}

}  // namespace tessera::server
