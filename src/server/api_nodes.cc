// Nodes: capacity, allocation, utilisation, labels.
#include <fmt/format.h>

#include "common/json_limits.h"
#include "common/units.h"
#include "server/api.h"

namespace ringmaster::server {

using nlohmann::json;

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
                     {"usage", {{"cpu_util", n.cpu_util}, {"memory_used_bytes", n.memory_used_bytes}}},
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
