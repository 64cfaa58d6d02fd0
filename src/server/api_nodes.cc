// Nodes: capacity, allocation, utilisation, labels; an admin's cordon, drain and delete.
#include <fmt/format.h>

#include "common/json_limits.h"
#include "common/units.h"
#include "server/api.h"
#include "server/slurm_backend.h"

namespace ringmaster::server {

using nlohmann::json;

namespace {

// The node's use now: its last heartbeat's, and its GPUs' from the monitor.
json Usage(Api& api, const store::Node& n, int64_t now) {
  json u = {{"cpu_util", n.cpu_util}, {"memory_used_bytes", n.memory_used_bytes}};
  if (auto s = api.monitor->LatestNode(n.id, now, 30'000)) {
    u["disk_used_bytes"] = s->disk_used_bytes;
    u["net_rx_bps"] = s->net_rx_bps;
    u["net_tx_bps"] = s->net_tx_bps;
    if (!s->gpus.empty()) {
      double sum = 0;
      json gpus = json::array();
      for (const auto& g : s->gpus) {
        sum += g.util;
        gpus.push_back({{"index", g.index}, {"util", g.util}, {"memory_used_bytes", g.memory_used_bytes},
                        {"power_w", g.power_w}, {"temperature_c", g.temperature_c}});
      }
      u["gpu_util"] = sum / static_cast<double>(s->gpus.size());
      u["gpus"] = gpus;
    }
  }
  return u;
}

// Slurm's nodes, in the rows' shape where it has the same things ("state" is
// Slurm's, with its reason; "slurm": true).
json SlurmNodes(const SlurmBackend& slurm, int64_t now) {
  SlurmBackend::NodesView v = slurm.Nodes();
  json out = json::array();
  for (const slurm::NodeInfo& n : v.nodes) {
    json gpus = json::array();
    for (int i = 0; i < n.gpus; ++i) gpus.push_back({{"index", i}, {"model", n.gres}});
    out.push_back({{"name", n.name},
                   {"slurm", true},
                   {"state", n.state},
                   {"reason", n.reason},
                   {"cpu", std::to_string(n.cpus)},
                   {"memory_bytes", n.memory_mib << 20},
                   {"gpus", gpus},
                   {"gres", n.gres},
                   {"address", n.address},
                   {"allocated", {{"cpu", std::to_string(n.cpus_alloc)},
                                  {"memory_bytes", n.memory_alloc_mib << 20},
                                  {"gpus", n.gpus_used}}}});
  }
  json body = {{"backend", "slurm"}, {"nodes", out}, {"read_age_ms", v.read_ms ? now - v.read_ms : -1}};
  if (!v.error.empty()) body["error"] = "reading Slurm's nodes: " + v.error;
  return body;
}

}  // namespace

void AddNodeRoutes(Api& api) {
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};
  api.http->Route("GET", "/api/v1/nodes", read, Json([&api](const http::Request&, const Caller&) -> StatusOr<Reply> {
    if (api.slurm) return Reply{200, SlurmNodes(*api.slurm, api.clock->NowMs())};
    RM_ASSIGN_OR_RETURN(auto nodes, api.store->ListNodes());
    for (auto& n : nodes) api.jobs->ApplyLive(&n);  // heartbeats are held in memory
    RM_ASSIGN_OR_RETURN(auto placed, api.store->ListPlacedTasks());
    const int64_t now = api.clock->NowMs();
    json out = json::array();
    for (const auto& n : nodes) {
      int64_t cpu = 0, mem = 0;
      int gpus = 0, tasks = 0;
      for (const auto& t : placed) {
        if (t.node_id != n.id) continue;
        cpu += t.cpu_milli;
        mem += t.memory_bytes;
        gpus += t.gpus;
        ++tasks;
      }
      // Stored by the server from validated registrations; a damaged row shows as null, never fails the call.
      auto stored = [](const std::string& text) {
        auto j = ParseJson(text, JsonLimits{1 << 20, 8}, "stored node");
        return j.ok() ? *j : json(nullptr);
      };
      out.push_back({{"id", n.id},
                     {"name", n.name},
                     {"state", api.jobs->NodeStateName(n)},
                     {"last_heartbeat_at", FormatTimeUtc(n.last_heartbeat_ms)},
                     {"last_heartbeat_age_ms", now - n.last_heartbeat_ms},
                     {"cpu", FormatCpu(n.cpu_milli)},
                     {"memory_bytes", n.memory_bytes},
                     {"gpus", stored(n.gpus_json)},
                     {"allocated", {{"cpu", FormatCpu(cpu)}, {"memory_bytes", mem}, {"gpus", gpus}, {"tasks", tasks}}},
                     {"usage", Usage(api, n, now)},
                     {"agent_version", n.agent_version},
                     {"address", n.address},
                     {"labels", stored(n.labels_json)},
                     {"executors", n.executors},
                     {"network", n.network},
                     {"overlay_block", n.network == "host" ? "" : api.jobs->OverlayBlock(n.overlay_block)},
                     {"ports", n.port_hi >= n.port_lo ? fmt::format("{}-{}", n.port_lo, n.port_hi) : ""},
                     {"schedulable", !n.cordoned},
                     {"cordon", CordonText(n)},
                     {"drained", n.draining && tasks == 0}});
    }
    return Reply{200, {{"nodes", out}}};
  }));

  // ---- the node lifecycle (admins): cordon, drain, uncordon, delete. {name}: a node's name or id.
  http::RouteOptions admin{api.limits.max_body_bytes, http::Pool::kApi, true, access::kAdmin};
  auto reason_of = [](const http::Request& req) -> StatusOr<std::string> {
    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
    RM_ASSIGN_OR_RETURN(std::string reason, StringField(b, "reason", ""));
    if (reason.size() > 200) return InvalidArgument("reason: at most 200 bytes");
    if (!IsDisplayText(reason)) return InvalidArgument("reason: one line of text, no control characters");
    return reason;
  };
  for (const char* verb : {"cordon", "drain", "uncordon"}) {
    const std::string what = verb;
    api.http->Route("POST", "/api/v1/nodes/{name}/" + what, admin,
                    Json([&api, what, reason_of](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                      const std::string& name = req.matches[0];
                      RM_ASSIGN_OR_RETURN(std::string reason, reason_of(req));
                      if (what == "uncordon") {
                        RM_RETURN_IF_ERROR(api.jobs->Uncordon(name));
                      } else {
                        RM_RETURN_IF_ERROR(api.jobs->Cordon(name, reason, what == "drain"));
                      }
                      RM_ASSIGN_OR_RETURN(store::Node n, api.jobs->FindNode(name));
                      api.auth->Audit(req, c.user.name, "node." + what, "node " + n.name, "ok", reason);
                      return Reply{200, {{"node", n.name}, {"schedulable", !n.cordoned}, {"cordon", CordonText(n)}}};
                    }));
  }
  api.http->Route("DELETE", "/api/v1/nodes/{name}", admin,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(bool force, BoolParam(req, "force"));
                    RM_ASSIGN_OR_RETURN(store::Node n, api.jobs->FindNode(req.matches[0]));
                    RM_RETURN_IF_ERROR(api.jobs->DeleteNode(n.name, force));
                    api.auth->Audit(req, c.user.name, "node.delete", "node " + n.name, "ok", force ? "force" : "");
                    return Reply{200, {{"node", n.name}, {"deleted", true}}};
                  }));
}

}  // namespace ringmaster::server
