// The agent protocol. Only agent tokens reach it, and each only for its own
// node: a token made for node gpu-1 can register as gpu-1, heartbeat and
// long-poll as gpu-1, and report on and ship logs of tasks placed on gpu-1.
// These routes run on the agent pool, which user traffic never occupies.
#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/agent_protocol.h"
#include "common/build_info.h"
#include "common/json_limits.h"
#include "common/log.h"
#include "net/ipv4.h"
#include "server/api.h"
#include "protocol/metrics_line.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

StatusOr<int64_t> IntField(const json& b, const std::string& name, int64_t def, int64_t lo, int64_t hi) {
  auto it = b.find(name);
  if (it == b.end()) return def;
  if (!it->is_number_integer()) return InvalidArgument(fmt::format("{}: must be an integer", name));
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : it->get<int64_t>();
  if (v < lo || v > hi) return InvalidArgument(fmt::format("{}: must be between {} and {}, got {}", name, lo, hi, v));
  return v;
}

// The node of the route's {id}, if it is the caller's.
StatusOr<store::Node> OwnNode(Api& api, const http::Request& req, const Caller& c) {
  RM_ASSIGN_OR_RETURN(store::Node node, api.store->GetNode(PathId(req)));
  RM_RETURN_IF_ERROR(Auth::CheckNode(c, node.name));
  return node;
}

// The long-poll's shared state: answered exactly once, by a change or by the timer.
struct Poll {
  std::atomic<bool> done{false};
  std::mutex mu;
  uint64_t watch = 0;                  // GUARDED_BY(mu)
  std::shared_ptr<http::Timer> timer;  // GUARDED_BY(mu)
};

// The longest fencing window an agent may say it keeps: a day, the most any
// server tells (--node-lost-after), so no agent holds its node's jobs longer.
constexpr int64_t kMaxFenceMs = int64_t{24} * 3600 * 1000;

// A heartbeat's body: the samples of up to two minutes (monitor::kMaxSamplesPerBody).
constexpr size_t kMaxHeartbeatBytes = 4 << 20;

// Puts the samples on the server's clock and drops those that cannot be
// right: an agent whose clock is off keeps its samples' spacing, not its idea
// of now; then only what lies in [now - 130 s, now + 2 s], in increasing time
// order, is kept (the agent keeps two minutes of samples while the server is
// out of reach). What was dropped, or "".
std::string KeepSamplesInTime(std::vector<monitor::NodeSample>* samples, int64_t now) {
  if (samples->empty()) return "";
  const int64_t skew = now - samples->back().t_ms;
  if (std::abs(skew) > 30'000) {
    for (auto& s : *samples) s.t_ms += skew;
  }
  std::vector<monitor::NodeSample> kept;
  int64_t last = INT64_MIN;
  size_t dropped = 0;
  for (auto& s : *samples) {
    if (s.t_ms < now - 130'000 || s.t_ms > now + 2'000 || s.t_ms <= last) {
      ++dropped;
      continue;
    }
    last = s.t_ms;
    kept.push_back(std::move(s));
  }
  samples->swap(kept);
  return dropped == 0 ? "" : fmt::format("samples: {} out of time order or more than 2 minutes from the newest", dropped);
}

// Drops samples of GPUs the node did not register (by index; the first
// monitor::kMaxGpusPerSample of them): an agent cannot make a node's series
// without bound, nor series that every user's node usage read would carry.
std::string KeepRegisteredGpus(std::vector<monitor::NodeSample>* samples, const store::Node& node) {
  std::set<int> registered;
  auto gpus = ParseJson(node.gpus_json, JsonLimits{1 << 20, 8}, "stored node");
  if (gpus.ok() && gpus->is_array()) {
    for (size_t i = 0; i < gpus->size() && registered.size() < monitor::kMaxGpusPerSample; ++i) {
      const json& g = (*gpus)[i];
      const json index = g.is_object() ? g.value("index", json(static_cast<int>(i))) : json(static_cast<int>(i));
      if (index.is_number_integer()) registered.insert(index.get<int>());
    }
  }
  size_t dropped = 0;
  for (auto& s : *samples) {
    const size_t before = s.gpus.size();
    std::erase_if(s.gpus, [&](const monitor::GpuSample& g) { return !registered.count(g.index); });
    dropped += before - s.gpus.size();
  }
  return dropped == 0 ? "" : fmt::format("gpus: {} samples of GPUs node {} did not register", dropped, node.name);
}

}  // namespace

StatusOr<store::Task> AgentTask(Api& api, const http::Request& req, const Caller& c) {
  RM_ASSIGN_OR_RETURN(store::Task task, api.store->GetTask(PathId(req)));
  auto node = task.node_id ? api.store->GetNode(task.node_id) : StatusOr<store::Node>(NotFound("no node"));
  if (!node.ok() || !Auth::CheckNode(c, node->name).ok()) {
    return FailedPrecondition(fmt::format("task {} is not assigned to node {}", task.id, c.token.node));
  }
  return task;
}

// Trainer records in a shipped piece of a task's metrics file: the lines that
// carry step_time_s or samples_per_s go to the monitor (stragglers,
// `autoscale: {metric: samples_per_s}`). A line cut between two pieces is skipped.
static void IngestTrainerRecords(Api& api, int64_t task_id, const std::string& body) {
  const int64_t now = api.clock->NowMs();
  size_t start = 0;
  for (size_t nl; (nl = body.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string_view line(body.data() + start, nl - start);
    if (line.find("step_time_s") == std::string_view::npos && line.find("samples_per_s") == std::string_view::npos) continue;
    if (auto rec = protocol::ParseMetricsLine(line)) api.monitor->IngestTrainer(task_id, now, *rec);
  }
}

void AddAgentRoutes(Api& api) {
  http::RouteOptions agent{api.limits.max_body_bytes, http::Pool::kAgent, true, access::kAgent};
  http::RouteOptions ship{api.limits.max_agent_chunk, http::Pool::kAgent, true, access::kAgent};

  api.http->Route("POST", "/api/v1/agent/register", agent, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
    store::Node n;
    RM_ASSIGN_OR_RETURN(n.name, StringField(b, "name", ""));
    if (n.name.empty()) return InvalidArgument("name: required");
    RM_RETURN_IF_ERROR(Auth::CheckNode(c, n.name));
    RM_ASSIGN_OR_RETURN(n.agent_version, StringField(b, "agent_version", ""));
    if (n.agent_version.size() > 64 || !IsDisplayText(n.agent_version)) {
      return InvalidArgument("agent_version: at most 64 bytes of text without control characters");
    }
    // The protocol both must speak (common/agent_protocol.h): an agent of one
    // release back is served, a newer one or an older one is not.
    RM_ASSIGN_OR_RETURN(const int64_t protocol, IntField(b, "protocol_version", 1, 0, INT32_MAX));
    if (protocol < kMinAgentProtocol || protocol > kAgentProtocol) {
      const std::string range = kMinAgentProtocol == kAgentProtocol
                                    ? std::to_string(kAgentProtocol)
                                    : fmt::format("{} to {}", kMinAgentProtocol, kAgentProtocol);
      return FailedPrecondition(fmt::format(
          "agent protocol {} (agent {}) is not one this server speaks: protocol {} (server {}); {}", protocol,
          n.agent_version.empty() ? "of unknown version" : n.agent_version, range, ThisBuild().version,
          protocol > kAgentProtocol ? "upgrade the server first, then the agents" : "upgrade the agent"));
    }
    RM_ASSIGN_OR_RETURN(n.cpu_milli, IntField(b, "cpu_milli", -1, 1, int64_t{1} << 40));
    if (n.cpu_milli < 0) return InvalidArgument("cpu_milli: required");
    RM_ASSIGN_OR_RETURN(n.memory_bytes, IntField(b, "memory_bytes", -1, 1, int64_t{1} << 60));
    if (n.memory_bytes < 0) return InvalidArgument("memory_bytes: required");
    json gpus = b.value("gpus", json::array());
    if (!gpus.is_array() || gpus.size() > 1024) return InvalidArgument("gpus: must be a list of at most 1024 GPUs");
    for (const auto& g : gpus) {
      if (!g.is_object()) return InvalidArgument("gpus: each must be an object");
      if (g.contains("model") && !g["model"].is_string()) return InvalidArgument("gpus[].model: must be a string");
      for (const char* f : {"model", "uuid"}) {
        if (g.contains(f) && g[f].is_string() && (!IsDisplayText(g[f].get<std::string>()) || g[f].get<std::string>().size() > 256)) {
          return InvalidArgument(fmt::format("gpus[].{}: at most 256 bytes of text without control characters", f));
        }
      }
    }
    n.gpu_count = static_cast<int>(gpus.size());
    n.gpus_json = Dump(gpus);
    if (!gpus.empty()) n.gpu_model = gpus[0].value("model", "");
    RM_ASSIGN_OR_RETURN(n.address, StringField(b, "address", ""));
    if (n.address.size() > 255 || !IsDisplayText(n.address)) {
      return InvalidArgument("address: at most 255 bytes of text without control characters");
    }
    RM_ASSIGN_OR_RETURN(int64_t lo, IntField(b, "port_lo", 0, 0, 65535));
    RM_ASSIGN_OR_RETURN(int64_t hi, IntField(b, "port_hi", -1, -1, 65535));
    n.port_lo = static_cast<int>(lo);
    n.port_hi = static_cast<int>(hi);
    if (n.port_hi >= n.port_lo && n.port_lo < 1) {
      return InvalidArgument(fmt::format("port_lo, port_hi: [{}, {}] is not a range of TCP ports", n.port_lo, n.port_hi));
    }
    json labels = b.value("labels", json::object());
    if (!labels.is_object()) return InvalidArgument("labels: must be an object of strings");
    for (const auto& [k, v] : labels.items()) {
      if (k.empty() || !v.is_string()) {
        return InvalidArgument(fmt::format("labels.{}: must be a non-empty name with a string value", Printable(k)));
      }
      if (!IsDisplayText(k) || !IsDisplayText(v.get<std::string>()) || k.size() > 128 || v.get<std::string>().size() > 256) {
        return InvalidArgument(fmt::format("labels.{}: names of at most 128 bytes and values of at most 256, text "
                                           "without control characters", Printable(k)));
      }
    }
    n.labels_json = Dump(labels);
    // What the agent runs tasks with; an agent from before executors existed runs processes.
    json executors = b.value("executors", json::array({"process"}));
    if (!executors.is_array() || executors.empty() || executors.size() > 8) {
      return InvalidArgument("executors: must be a non-empty list of process, runc, docker");
    }
    std::vector<std::string> names;
    for (const auto& e : executors) {
      if (!e.is_string() || (e != "process" && e != "runc" && e != "docker")) {
        return InvalidArgument("executors: each must be one of process, runc, docker");
      }
      if (std::find(names.begin(), names.end(), e.get<std::string>()) == names.end()) names.push_back(e);
    }
    n.executors = fmt::format("{}", fmt::join(names, ","));
    // Its containers' network (docs/cluster.md): an overlay needs an
    // address the other nodes' tunnels can reach.
    RM_ASSIGN_OR_RETURN(n.network, StringField(b, "network", "host"));
    if (n.network != "host" && n.network != "vxlan" && n.network != "ovs-gre") {
      return InvalidArgument("network: must be one of host, vxlan, ovs-gre");
    }
    if (n.network != "host") {
      // The tunnels' endpoint: a unicast address other nodes can reach.
      auto a = net::ParseIpv4(n.address);
      const bool bad = !a || (*a >> 24) == 127 || (*a >> 24) == 0 || (*a >> 28) >= 14;
      if (bad) {
        return InvalidArgument("address: an overlay node needs the unicast IPv4 address other nodes reach it at "
                               "(agent --address), got \"" + n.address.substr(0, 64) + "\"");
      }
    }
    // The tasks it holds (protocol 2): a task it ran here and lost with its data is LOST now.
    std::optional<std::set<std::pair<int64_t, int>>> held;
    if (protocol >= 2) {
      json tasks = b.value("tasks", json::array());
      if (!tasks.is_array() || tasks.size() > 100'000) return InvalidArgument("tasks: must be a list of {task_id, attempt}");
      held.emplace();
      for (const auto& t : tasks) {
        if (!t.is_object() || !t.contains("task_id") || !t["task_id"].is_number_integer() || !t.contains("attempt") ||
            !t["attempt"].is_number_integer()) {
          return InvalidArgument("tasks: each must be {\"task_id\": N, \"attempt\": N}");
        }
        held->insert({t["task_id"].get<int64_t>(), t["attempt"].get<int>()});
      }
    }
    // The window its agent keeps now (re-adopted tasks), until it takes this server's.
    RM_ASSIGN_OR_RETURN(n.fence_after_ms, IntField(b, "fence_after_ms", 0, 0, kMaxFenceMs));
    RM_ASSIGN_OR_RETURN(int64_t id, api.jobs->RegisterNode(n, held));
    api.auth->Audit(req, c.user.name, "agent.register", "node " + n.name, "ok", n.address);
    RM_ASSIGN_OR_RETURN(json overlay, api.jobs->Overlay(id));
    // Fencing (docs/cluster.md): without an answered heartbeat for
    // fence_after_ms the agent stops its tasks; protocol 1 agents stop them
    // after 70% of lease_ms, sooner, which is as safe.
    return Reply{200, {{"node_id", id},
                       {"overlay", overlay},
                       {"lease_ms", api.jobs->LeaseMs()},
                       {"fence_after_ms", api.jobs->FenceAfterMs()},
                       {"protocol_version", kAgentProtocol}}};
  }));

  // The samples the agent took since its last heartbeat (monitor/samples.h):
  // the newest one is the node's usage now. The lease is renewed whatever the
  // samples hold: bad samples are refused in the answer ("samples_refused",
  // naming the field), never by failing the heartbeat, which would end the
  // node's lease and its tasks for a telemetry error.
  http::RouteOptions beat{kMaxHeartbeatBytes, http::Pool::kAgent, true, access::kAgent};
  api.http->Route("POST", "/api/v1/agent/nodes/{id}/heartbeat", beat,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(store::Node node, OwnNode(api, req, c));
                    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
                    const int64_t now = api.clock->NowMs();
                    std::vector<monitor::NodeSample> samples;
                    std::string refused;
                    if (b.contains("samples")) {
                      auto parsed = monitor::ParseSamples(b["samples"]);
                      if (parsed.ok()) {
                        samples = std::move(*parsed);
                        refused = KeepSamplesInTime(&samples, now);
                        const std::string gpus = KeepRegisteredGpus(&samples, node);
                        if (!gpus.empty()) refused += (refused.empty() ? "" : "; ") + gpus;
                      } else {
                        refused = parsed.status().message();
                      }
                    }
                    if (!refused.empty()) {
                      spdlog::warn("node {}: samples refused: {}", node.name, refused);
                    }
                    double cpu = 0;
                    int64_t mem = 0;
                    if (!samples.empty()) {
                      cpu = samples.back().cpu;
                      mem = samples.back().memory_used_bytes;
                    } else if (auto last = api.monitor->LatestNode(node.id, now, 60'000)) {
                      cpu = last->cpu;
                      mem = last->memory_used_bytes;
                    }
                    // The fencing window the agent keeps (protocol 2), told this server's in the answer.
                    RM_ASSIGN_OR_RETURN(const int64_t fence, IntField(b, "fence_after_ms", -1, 0, kMaxFenceMs));
                    RM_RETURN_IF_ERROR(api.jobs->Heartbeat(node.id, cpu, mem, fence));
                    api.monitor->IngestNode(node.id, samples, api.jobs->TasksOn(node.id));
                    // The overlay's peers ride on the heartbeat: the agent keeps its tunnels in step.
                    RM_ASSIGN_OR_RETURN(json overlay, api.jobs->Overlay(node.id));
                    json out = {{"overlay", overlay}, {"fence_after_ms", api.jobs->FenceAfterMs()}};
                    if (!refused.empty()) out["samples_refused"] = refused;
                    return Reply{200, out};
                  }));

  // Long-poll: answers at once if `index` is stale, else when the node's
  // assignments change or after `wait` seconds. No thread waits meanwhile.
  api.http->Route("GET", "/api/v1/agent/nodes/{id}/assignments", agent, [&api](http::Request& req, http::Responder respond) {
    const Caller& c = CallerOf(req);
    auto node = OwnNode(api, req, c);
    if (!node.ok()) return respond(ErrorFor(req, node.status()));
    auto index = IntParam(req, "index", 0, 0, INT64_MAX);
    if (!index.ok()) return respond(ErrorFor(req, index.status()));
    auto wait = IntParam(req, "wait", 0, 0, 25);
    if (!wait.ok()) return respond(ErrorFor(req, wait.status()));
    const int64_t node_id = node->id;
    auto answer = [&api, node_id, respond, req_copy = req]() {
      auto a = api.jobs->Assignments(node_id);
      // What the node is told to run was written by the scheduler's thread:
      // on disk before the node acts on it (a restarted server knows it too).
      Status durable = a.ok() ? api.store->Sync() : Status::Ok();
      if (!durable.ok()) return respond(ErrorFor(req_copy, durable));
      respond(a.ok() ? JsonResponse(200, *a) : ErrorFor(req_copy, a.status()));
    };
    if (*wait == 0) return answer();
    auto poll = std::make_shared<Poll>();
    auto finish = [&api, poll, answer] {
      if (poll->done.exchange(true)) return;
      std::lock_guard<std::mutex> l(poll->mu);
      if (poll->watch) api.jobs->Unwatch(poll->watch);
      if (poll->timer) poll->timer->Cancel();
      api.http->Post(http::Pool::kAgent, answer);
    };
    std::lock_guard<std::mutex> l(poll->mu);
    poll->watch = api.jobs->WatchNode(node_id, static_cast<uint64_t>(*index), finish);
    if (poll->watch == 0) {
      poll->done = true;
      return answer();  // stale index: the node has news now
    }
    if (!poll->done) poll->timer = api.http->After(std::chrono::seconds(*wait), finish);
  });

  api.http->Route("POST", "/api/v1/agent/tasks/{id}/status", agent, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(store::Task task, AgentTask(api, req, c));
    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
    TaskReport r;
    r.node_id = task.node_id;
    RM_ASSIGN_OR_RETURN(int64_t attempt, IntField(b, "attempt", 0, 0, INT32_MAX));
    r.attempt = static_cast<int>(attempt);
    RM_ASSIGN_OR_RETURN(r.state, StringField(b, "state", ""));
    RM_ASSIGN_OR_RETURN(int64_t code, IntField(b, "exit_code", -1, -1, 255));
    r.exit_code = static_cast<int>(code);
    RM_ASSIGN_OR_RETURN(int64_t sig, IntField(b, "signal", 0, 0, 128));
    r.signal = static_cast<int>(sig);
    RM_ASSIGN_OR_RETURN(r.message, StringField(b, "message", ""));
    r.message = r.message.substr(0, 4096);
    RM_RETURN_IF_ERROR(api.jobs->ReportTask(task.id, r));
    return Reply{200, json::object()};
  }));

  // Logs and metrics arrive the same way: bytes appended at an offset, for the task's current attempt.
  for (const bool is_logs : {true, false}) {
    api.http->Route("POST", is_logs ? "/api/v1/agent/tasks/{id}/logs" : "/api/v1/agent/tasks/{id}/metrics", ship,
                    Json([&api, is_logs](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                      RM_ASSIGN_OR_RETURN(store::Task task, AgentTask(api, req, c));
                      RM_ASSIGN_OR_RETURN(int64_t attempt, IntParam(req, "attempt", 0, 0, INT32_MAX));
                      RM_ASSIGN_OR_RETURN(int64_t offset, IntParam(req, "offset", 0, 0, INT64_MAX / 2));
                      if (task.attempt != attempt) {
                        return FailedPrecondition(
                            fmt::format("task {} is on attempt {}, not {}", task.id, task.attempt, attempt));
                      }
                      // An agent ships everything before it reports an exit, so a
                      // task that has ended (lost, say) gets no more: 409 tells the
                      // agent to drop the rest.
                      if (store::IsTerminal(task.state)) {
                        return FailedPrecondition(fmt::format("task {} has ended ({}): no more output is kept",
                                                              task.id, store::StateName(task.state)));
                      }
                      LogStore* to = is_logs ? api.logs : api.metrics;
                      RM_ASSIGN_OR_RETURN(int64_t size, to->Append(task.job_id, task.rank, static_cast<int>(attempt),
                                                                   offset, req.body));
                      // Trainer records once: not again for a piece resent or refused at its offset.
                      if (!is_logs && api.monitor && size == offset + static_cast<int64_t>(req.body.size()) &&
                          !req.body.empty()) {
                        IngestTrainerRecords(api, task.id, req.body);
                      }
                      return Reply{200, {{"size", size}}};
                    }));
  }
}

}  // namespace ringmaster::server
