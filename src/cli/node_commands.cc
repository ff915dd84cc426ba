// `tessera node ...`: an operator's node commands (docs/server.md, "Nodes join"): join tokens,
// cordon, uncordon, drain, remove, and pools dedicated to one tenant.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/client.h"
#include "cli/client_commands.h"
#include "cli/client_session.h"
#include "core/units.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

struct NodeFlags {
  CommonFlags common;
  std::string name;    // A node, a pool or a join token's accessor.
  std::string tenant;  // pool dedicate
  std::string ttl = "1h";
  std::vector<std::string> labels;  // KEY=VALUE
};

core::Result<json> labelsJson(const std::vector<std::string>& labels) {
  json out = json::object();
  for (const std::string& l : labels) {
    const size_t eq = l.find('=');
    if (eq == std::string::npos || eq == 0) {
      return core::invalidArgument("--label " + l + ": expected KEY=VALUE");
    }
    out[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return out;
}

core::Status joinTokenCreate(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json labels, labelsJson(f.labels));
  TESSERA_ASSIGN_OR_RETURN(
      json r, s->call("POST", "/v1/sys/nodes/join-tokens", {{"ttl", f.ttl}, {"labels", labels}}));
  const json d = r.value("data", json::object());
  if (s->json()) {
    printJson(d);
    return core::Status::ok();
  }
  std::cout << d.value("token", "") << "\n";
  std::cerr << "join token " << d.value("accessor", "") << ", expires at "
            << d.value("expires_at", "") << (labels.empty() ? "" : ", labels " + labels.dump())
            << "\nOn the new machine, with the token in a file only root reads (chmod 600): "
               "tessera agent run --node NAME --address ADDR --ca-cert CA --join-token-file "
               "FILE\n";
  return core::Status::ok();
}

core::Status joinTokenList(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", "/v1/sys/nodes/join-tokens"));
  const json list = r.value("data", json::object()).value("join_tokens", json::array());
  if (s->json()) {
    printJson(list);
    return core::Status::ok();
  }
  Table t({"ACCESSOR", "EXPIRES", "LABELS"});
  for (const json& j : list) {
    t.add({j.value("accessor", ""), j.value("expires_at", ""),
           j.value("labels", json::object()).dump()});
  }
  t.print(std::cout);
  return core::Status::ok();
}

core::Status joinTokenRevoke(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_RETURN_IF_ERROR(
      s->call("DELETE", "/v1/sys/nodes/join-tokens/" + pathSegment(f.name)).status());
  std::cout << "revoked join token " << f.name << "\n";
  return core::Status::ok();
}

core::Status nodeAction(const NodeFlags& f, const std::string& op) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  const std::string target = "/v1/nodes/" + pathSegment(f.name);
  if (op == "remove") {
    TESSERA_RETURN_IF_ERROR(s->call("DELETE", target).status());
    std::cout << "node " << f.name << " removed: its credential is revoked\n";
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("POST", target + "/" + op, json::object()));
  const json d = r.value("data", json::object());
  if (s->json()) {
    printJson(d);
    return core::Status::ok();
  }
  if (op == "drain") {
    std::cout << "node " << f.name << " cordoned; its " << d.value("tasks", 0)
              << " task(s) are stopped and placed elsewhere (tessera nodes shows them go)\n";
  } else {
    std::cout << "node " << f.name
              << (op == "cordon" ? " cordoned: no new tasks go there\n"
                                 : " uncordoned: it takes tasks again\n");
  }
  return core::Status::ok();
}

core::Status poolDedicate(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_RETURN_IF_ERROR(
      s->call("POST", "/v1/sys/pools/" + pathSegment(f.name), {{"tenant", f.tenant}}).status());
  std::cout << "pool " << f.name << " is dedicated to tenant " << f.tenant
            << ": only its tasks run on the nodes labelled pool=" << f.name << "\n";
  return core::Status::ok();
}

core::Status poolOpen(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_RETURN_IF_ERROR(s->call("DELETE", "/v1/sys/pools/" + pathSegment(f.name)).status());
  std::cout << "pool " << f.name << " is open to every tenant\n";
  return core::Status::ok();
}

core::Status poolList(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", "/v1/sys/pools"));
  const json pools = r.value("data", json::object()).value("pools", json::object());
  if (s->json()) {
    printJson(pools);
    return core::Status::ok();
  }
  Table t({"POOL", "TENANT"});
  for (const auto& [pool, p] : pools.items()) {
    t.add({pool, p.value("tenant", "")});
  }
  t.print(std::cout);
  return core::Status::ok();
}

// `tessera node profile`: the typical task shapes the scheduler learned (GET sys/scheduler) and
// which placement terms act on them.
core::Status profile(const NodeFlags& f) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::open(f.common));
  TESSERA_ASSIGN_OR_RETURN(json r, s->call("GET", "/v1/sys/scheduler"));
  const json data = r.value("data", json::object());
  if (s->json()) {
    printJson(data);
    return core::Status::ok();
  }
  const json p = data.value("profile", json::object());
  std::cout << "policy " << data.value("policy", "") << "; profile " << p.value("source", "")
            << ", " << (p.value("active", false) ? "active" : "not active yet") << ": "
            << static_cast<int64_t>(p.value("tasks_counted", 0.0)) << " tasks counted (needs "
            << static_cast<int64_t>(p.value("tasks_needed", 0.0)) << "), "
            << p.value("shapes_kept", 0) << " shapes kept\n\n";
  Table shapes({"FREQUENCY", "GPUS", "GPU SHARE", "CPU CORES", "MODELS"});
  for (const json& t : p.value("typical", json::array())) {
    std::string models;
    for (const json& m : t.value("models", json::array())) {
      models += (models.empty() ? "" : ",") + m.get<std::string>();
    }
    const int gpus = t.value("gpus", 0);
    shapes.add({fmt::format("{:.1f}%", 100 * t.value("frequency", 0.0)), std::to_string(gpus),
                gpus == 0 ? "-" : core::milliText(t.value("milli_per_gpu", int64_t{0})),
                core::milliText(t.value("cpu_milli", int64_t{0})),
                models.empty() ? "any" : models});
  }
  shapes.print(std::cout);
  std::cout << "\n";
  Table terms({"TERM", "STATE"});
  const json term_states = data.value("terms", json::object());
  for (const auto& [name, why] : term_states.items()) {
    terms.add({name, why.get<std::string>()});
  }
  terms.print(std::cout);
  return core::Status::ok();
}

}  // namespace

void addNodeCommands(CLI::App& app, int* rc) {
  CLI::App* node = app.add_subcommand(
      "node", "Operators' node commands: join tokens, cordon, drain, remove, dedicated pools");
  node->require_subcommand(1);
  CLI::App* jt = node->add_subcommand("join-token", "Tokens new machines join with");
  jt->require_subcommand(1);
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = jt->add_subcommand(
        "create", "A join token (printed once): an agent started with it joins as a new node");
    addCommonFlags(c, f->common);
    c->add_option("--ttl", f->ttl, "How long it lets machines join (1s to 24h)")
        ->capture_default_str();
    c->add_option("--label", f->labels,
                  "A label of every node that joins with it, KEY=VALUE (repeatable): "
                  "pool=team-1, zone=a, nvlink-domain=nvl-1");
    c->footer("The token itself goes to standard output, alone; what it is, to standard error.");
    bind(c, f, &joinTokenCreate, rc);
  }
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = jt->add_subcommand("list", "Live join tokens (never their secrets)");
    addCommonFlags(c, f->common);
    bind(c, f, &joinTokenList, rc);
  }
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = jt->add_subcommand("revoke", "Revoke a join token before it expires");
    addCommonFlags(c, f->common);
    c->add_option("ACCESSOR", f->name, "Its accessor (jt-...)")->required();
    bind(c, f, &joinTokenRevoke, rc);
  }
  for (const auto& [op, help] : std::vector<std::pair<std::string, std::string>>{
           {"cordon", "Take no new tasks on a node; what runs there stays"},
           {"uncordon", "Let a node take tasks again"},
           {"drain", "Cordon a node and move its tasks elsewhere (each with its grace period)"},
           {"remove",
            "Take a joined node out of service and revoke its credential (drain first)"}}) {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = node->add_subcommand(op, help);
    addCommonFlags(c, f->common);
    c->add_option("NODE", f->name, "Node name")->required();
    c->callback([f, rc, op = op] { *rc = finish(nodeAction(*f, op)); });
  }
  CLI::App* pool = node->add_subcommand(
      "pool",
      "Pools (nodes labelled pool=NAME) dedicated to one tenant: the seed's per-team "
      "cluster, on the shared fleet");
  pool->require_subcommand(1);
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = pool->add_subcommand(
        "dedicate", "Run only TENANT's tasks on the pool's nodes (what runs there stays)");
    addCommonFlags(c, f->common);
    c->add_option("POOL", f->name, "Pool name")->required();
    c->add_option("TENANT", f->tenant, "Tenant")->required();
    bind(c, f, &poolDedicate, rc);
  }
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = pool->add_subcommand("open", "Open a pool to every tenant again");
    addCommonFlags(c, f->common);
    c->add_option("POOL", f->name, "Pool name")->required();
    bind(c, f, &poolOpen, rc);
  }
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = pool->add_subcommand("list", "Dedicated pools and their tenants");
    addCommonFlags(c, f->common);
    bind(c, f, &poolList, rc);
  }
  {
    auto f = std::make_shared<NodeFlags>();
    CLI::App* c = node->add_subcommand(
        "profile",
        "The typical task shapes the scheduler learned from submissions, and which placement "
        "terms act on them (GET sys/scheduler)");
    addCommonFlags(c, f->common);
    bind(c, f, &profile, rc);
  }
}

}  // namespace tessera::cli
