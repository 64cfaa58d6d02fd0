// Nodes: capacity, allocation, utilisation, labels.
#include <fmt/format.h>

#include "common/json_limits.h"
#include "common/units.h"
#include "server/api.h"

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

}  // namespace

void AddNodeRoutes(Api& api) {
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};
  api.http->Route("GET", "/api/v1/nodes", read, Json([&api](const http::Request&, const Caller&) -> StatusOr<Reply> {
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
                     {"state", api.jobs->NodeReady(n) ? "ready" : "unreachable"},
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
                     {"ports", n.port_hi >= n.port_lo ? fmt::format("{}-{}", n.port_lo, n.port_hi) : ""}});
    }
    return Reply{200, {{"nodes", out}}};
  }));
}

}  // namespace ringmaster::server
