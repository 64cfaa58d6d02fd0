#include "server/agent_service.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/build_info.h"
#include "common/json_limits.h"
#include "common/log.h"
#include "net/ipv4.h"
#include "protocol/metrics_line.h"
#include "server/timeline.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

// The longest fencing window an agent may say it keeps: a day, the most any
// server tells (--node-lost-after), so no agent holds its node's jobs longer.
constexpr int64_t kMaxFenceMs = int64_t{24} * 3600 * 1000;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Status InRange(const char* name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return InvalidArgument(fmt::format("{}: must be between {} and {}, got {}", name, lo, hi, v));
  return Status::Ok();
}

// Puts the samples on the server's clock and drops those that cannot be
// right: an agent whose clock is off keeps its samples' spacing, not its idea
// of now; then only what lies in [now - 130 s, now + 2 s], in increasing time
// order, is kept (the agent keeps two minutes of samples while the server is
// out of reach). What was dropped, or "".
std::string KeepSamplesInTime(std::vector<protocol::NodeSample>* samples, int64_t now) {
  if (samples->empty()) return "";
  const int64_t skew = now - samples->back().t_ms;
  if (std::abs(skew) > 30'000) {
    for (auto& s : *samples) s.t_ms += skew;
  }
  std::vector<protocol::NodeSample> kept;
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
// protocol::kMaxGpusPerSample of them): an agent cannot make a node's series
// without bound, nor series that every user's node usage read would carry.
std::string KeepRegisteredGpus(std::vector<protocol::NodeSample>* samples, const store::Node& node) {
  std::set<int> registered;
  auto gpus = ParseJson(node.gpus_json, JsonLimits{1 << 20, 8}, "stored node");
  if (gpus.ok() && gpus->is_array()) {
    for (size_t i = 0; i < gpus->size() && registered.size() < protocol::kMaxGpusPerSample; ++i) {
      const json& g = (*gpus)[i];
      const json index = g.is_object() ? g.value("index", json(static_cast<int>(i))) : json(static_cast<int>(i));
      if (index.is_number_integer()) registered.insert(index.get<int>());
    }
  }
  size_t dropped = 0;
  for (auto& s : *samples) {
    const size_t before = s.gpus.size();
    std::erase_if(s.gpus, [&](const protocol::GpuSample& g) { return !registered.count(g.index); });
    dropped += before - s.gpus.size();
  }
  return dropped == 0 ? "" : fmt::format("gpus: {} samples of GPUs node {} did not register", dropped, node.name);
}

// The node row a registration makes, checked as the REST API has always
// checked it.
StatusOr<store::Node> NodeOf(const protocol::RegisterRequest& b) {
  store::Node n;
  n.name = b.name;
  n.agent_version = b.agent_version;
  if (b.cpu_milli < 0) return InvalidArgument("cpu_milli: required");
  RM_RETURN_IF_ERROR(InRange("cpu_milli", b.cpu_milli, 1, int64_t{1} << 40));
  n.cpu_milli = b.cpu_milli;
  if (b.memory_bytes < 0) return InvalidArgument("memory_bytes: required");
  RM_RETURN_IF_ERROR(InRange("memory_bytes", b.memory_bytes, 1, int64_t{1} << 60));
  n.memory_bytes = b.memory_bytes;
  if (b.gpus.size() > 1024) return InvalidArgument("gpus: must be a list of at most 1024 GPUs");
  for (const auto& g : b.gpus) {
    for (const auto* f : {&g.model, &g.uuid}) {
      if (*f && (!IsDisplayText(**f) || (*f)->size() > 256)) {
        return InvalidArgument(fmt::format("gpus[].{}: at most 256 bytes of text without control characters",
                                           f == &g.model ? "model" : "uuid"));
      }
    }
  }
  const json gpus = protocol::ToJson(b)["gpus"];  // the fields given, as the agent sent them
  n.gpu_count = static_cast<int>(b.gpus.size());
  n.gpus_json = Dump(gpus);
  if (!b.gpus.empty()) n.gpu_model = b.gpus[0].model.value_or("");
  n.address = b.address;
  if (n.address.size() > 255 || !IsDisplayText(n.address)) {
    return InvalidArgument("address: at most 255 bytes of text without control characters");
  }
  RM_RETURN_IF_ERROR(InRange("port_lo", b.port_lo, 0, 65535));
  RM_RETURN_IF_ERROR(InRange("port_hi", b.port_hi, -1, 65535));
  n.port_lo = static_cast<int>(b.port_lo);
  n.port_hi = static_cast<int>(b.port_hi);
  if (n.port_hi >= n.port_lo && n.port_lo < 1) {
    return InvalidArgument(fmt::format("port_lo, port_hi: [{}, {}] is not a range of TCP ports", n.port_lo, n.port_hi));
  }
  for (const auto& [k, v] : b.labels) {
    if (k.empty()) return InvalidArgument("labels.: must be a non-empty name with a string value");
    if (!IsDisplayText(k) || !IsDisplayText(v) || k.size() > 128 || v.size() > 256) {
      return InvalidArgument(fmt::format("labels.{}: names of at most 128 bytes and values of at most 256, text "
                                         "without control characters", Printable(k)));
    }
  }
  n.labels_json = Dump(json(b.labels));
  // What the agent runs tasks with.
  if (b.executors.empty() || b.executors.size() > 8) {
    return InvalidArgument("executors: must be a non-empty list of process, runc, docker");
  }
  std::vector<std::string> names;
  for (const auto& e : b.executors) {
    if (e != "process" && e != "runc" && e != "docker") {
      return InvalidArgument("executors: each must be one of process, runc, docker");
    }
    if (std::find(names.begin(), names.end(), e) == names.end()) names.push_back(e);
  }
  n.executors = fmt::format("{}", fmt::join(names, ","));
  // Its containers' network (docs/cluster.md): an overlay needs an
  // address the other nodes' tunnels can reach.
  n.network = b.network;
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
  // The window its agent keeps now (re-adopted tasks), until it takes this server's.
  RM_RETURN_IF_ERROR(InRange("fence_after_ms", b.fence_after_ms, 0, kMaxFenceMs));
  n.fence_after_ms = b.fence_after_ms;
  return n;
}

// Trainer records in a shipped piece of a task's metrics file: the lines that
// carry step_time_s or samples_per_s go to the monitor (stragglers,
// `autoscale: {metric: samples_per_s}`). A line cut between two pieces is skipped.
void IngestTrainerRecords(monitor::Monitor* monitor, int64_t task_id, int64_t now, std::string_view body) {
  size_t start = 0;
  for (size_t nl; (nl = body.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string_view line(body.data() + start, nl - start);
    if (line.find("step_time_s") == std::string_view::npos && line.find("samples_per_s") == std::string_view::npos) continue;
    if (auto rec = protocol::ParseMetricsLine(line)) monitor->IngestTrainer(task_id, now, *rec);
  }
}

}  // namespace

StatusOr<std::optional<protocol::Overlay>> AgentService::OverlayOf(int64_t node_id) {
  RM_ASSIGN_OR_RETURN(json overlay, d_.jobs->Overlay(node_id));
  if (overlay.is_null()) return std::optional<protocol::Overlay>();
  auto o = protocol::Parse<protocol::Overlay>(overlay);
  if (!o.ok()) return Internal("the node's overlay: " + o.status().message());
  return std::optional<protocol::Overlay>(std::move(*o));
}

StatusOr<protocol::RegisterReply> AgentService::Register(const protocol::RegisterRequest& b) {
  if (b.name.empty()) return InvalidArgument("name: required");
  if (b.agent_version.size() > 64 || !IsDisplayText(b.agent_version)) {
    return InvalidArgument("agent_version: at most 64 bytes of text without control characters");
  }
  // The protocol both must speak: an agent of one release back is served, a
  // newer one or an older one is not.
  RM_RETURN_IF_ERROR(InRange("protocol_version", b.protocol_version, 0, INT32_MAX));
  const int64_t protocol = b.protocol_version;
  if (protocol < protocol::kMinAgentProtocol || protocol > protocol::kAgentProtocol) {
    const std::string range = protocol::kMinAgentProtocol == protocol::kAgentProtocol
                                  ? std::to_string(protocol::kAgentProtocol)
                                  : fmt::format("{} to {}", protocol::kMinAgentProtocol, protocol::kAgentProtocol);
    return FailedPrecondition(fmt::format(
        "agent protocol {} (agent {}) is not one this server speaks: protocol {} (server {}); {}", protocol,
        b.agent_version.empty() ? "of unknown version" : b.agent_version, range, ThisBuild().version,
        protocol > protocol::kAgentProtocol ? "upgrade the server first, then the agents" : "upgrade the agent"));
  }
  RM_ASSIGN_OR_RETURN(store::Node n, NodeOf(b));
  // The tasks it holds (protocol 2): a task it ran here and lost with its data is LOST now.
  std::optional<std::set<std::pair<int64_t, int>>> held;
  if (protocol >= 2) {
    if (b.tasks.size() > 100'000) return InvalidArgument("tasks: must be a list of {task_id, attempt}");
    held.emplace();
    for (const auto& t : b.tasks) held->insert({t.task_id, static_cast<int>(t.attempt)});
  }
  RM_ASSIGN_OR_RETURN(int64_t id, d_.jobs->RegisterNode(n, held));
  protocol::RegisterReply reply;
  reply.node_id = id;
  RM_ASSIGN_OR_RETURN(reply.overlay, OverlayOf(id));
  // Fencing (docs/cluster.md): without an answered heartbeat for
  // fence_after_ms the agent stops its tasks; protocol 1 agents stop them
  // after 70% of lease_ms, sooner, which is as safe.
  reply.lease_ms = d_.jobs->LeaseMs();
  reply.fence_after_ms = d_.jobs->FenceAfterMs();
  reply.protocol_version = protocol::kAgentProtocol;
  return reply;
}

StatusOr<protocol::HeartbeatReply> AgentService::Heartbeat(const store::Node& node, const protocol::Heartbeat& beat) {
  const int64_t now = d_.clock->NowMs();
  std::vector<protocol::NodeSample> samples = beat.samples;
  std::string refused = beat.samples_error;
  if (refused.empty()) {
    refused = KeepSamplesInTime(&samples, now);
    const std::string gpus = KeepRegisteredGpus(&samples, node);
    if (!gpus.empty()) refused += (refused.empty() ? "" : "; ") + gpus;
  }
  if (!refused.empty()) spdlog::warn("node {}: samples refused: {}", node.name, refused);
  double cpu = 0;
  int64_t mem = 0;
  if (!samples.empty()) {
    cpu = samples.back().cpu;
    mem = samples.back().memory_used_bytes;
  } else if (auto last = d_.monitor ? d_.monitor->LatestNode(node.id, now, 60'000) : std::nullopt) {
    cpu = last->cpu;
    mem = last->memory_used_bytes;
  }
  // The fencing window the agent keeps (protocol 2; -1: not told), told this server's in the answer.
  if (beat.fence_after_ms != -1) RM_RETURN_IF_ERROR(InRange("fence_after_ms", beat.fence_after_ms, 0, kMaxFenceMs));
  RM_RETURN_IF_ERROR(d_.jobs->Heartbeat(node.id, cpu, mem, beat.fence_after_ms));
  if (d_.monitor) d_.monitor->IngestNode(node.id, samples, d_.jobs->TasksOn(node.id));
  protocol::HeartbeatReply reply;
  // The overlay's peers ride on the heartbeat: the agent keeps its tunnels in step.
  RM_ASSIGN_OR_RETURN(reply.overlay, OverlayOf(node.id));
  reply.fence_after_ms = d_.jobs->FenceAfterMs();
  reply.samples_refused = refused;
  return reply;
}

StatusOr<protocol::Assignments> AgentService::Assignments(int64_t node_id) {
  RM_ASSIGN_OR_RETURN(json a, d_.jobs->Assignments(node_id));
  // What the node is told to run was written by the scheduler's thread:
  // on disk before the node acts on it (a restarted server knows it too).
  RM_RETURN_IF_ERROR(d_.store->Sync());
  auto out = protocol::Parse<protocol::Assignments>(a);
  if (!out.ok()) return Internal("the node's assignments: " + out.status().message());
  return out;
}

StatusOr<protocol::Assignments> AgentService::WaitAssignments(int64_t node_id, uint64_t index,
                                                              std::chrono::milliseconds wait) {
  if (wait.count() > 0) {
    struct Waiter {
      std::mutex mu;
      std::condition_variable cv;
      bool changed = false;
    };
    auto w = std::make_shared<Waiter>();
    const uint64_t watch = d_.jobs->WatchNode(node_id, index, [w] {
      std::lock_guard<std::mutex> l(w->mu);
      w->changed = true;
      w->cv.notify_all();
    });
    if (watch != 0) {  // 0: the index is stale, the node has news now
      std::unique_lock<std::mutex> l(w->mu);
      w->cv.wait_for(l, wait, [&] { return w->changed; });
      l.unlock();
      d_.jobs->Unwatch(watch);
    }
  }
  return Assignments(node_id);
}

Status AgentService::ReportStatus(const store::Task& task, const protocol::TaskStatusReport& b) {
  RM_ASSIGN_OR_RETURN(TaskReport r, ReadReport(task, b));
  return d_.jobs->ReportTask(task.id, r);
}

protocol::TaskReportsReply AgentService::ReportStatuses(const store::Node& node, const protocol::TaskReports& batch) {
  protocol::TaskReportsReply reply;
  reply.results.resize(batch.reports.size());
  std::vector<std::pair<int64_t, TaskReport>> valid;
  std::vector<size_t> where;  // valid[i] answers batch.reports[where[i]]
  auto refuse = [&](size_t i, const Status& st) { reply.results[i] = {StatusCodeName(st.code()), st.message()}; };
  // Each task's state once, and each of its phases once, in a body: a tick
  // has no more to say, and a body of repeats must not make a thousand events.
  std::set<std::pair<int64_t, std::string>> seen;
  for (size_t i = 0; i < batch.reports.size(); ++i) {
    const protocol::TaskReport& one = batch.reports[i];
    const std::string what = one.status.phase.empty() ? "state" : "phase " + one.status.phase.substr(0, 16);
    if (!seen.insert({one.task_id, what}).second) {
      refuse(i, InvalidArgument(fmt::format("reports[{}]: task {}'s {} is already in this body", i, one.task_id, what)));
      continue;
    }
    auto task = d_.store->GetTask(one.task_id);
    if (!task.ok()) {
      refuse(i, task.status());
      continue;
    }
    // Each report is fenced by its node as the single route's are: a node
    // reports on its own tasks only.
    if (task->node_id != node.id) {
      refuse(i, FailedPrecondition(fmt::format("task {} is not assigned to node {}", task->id, node.name)));
      continue;
    }
    auto r = ReadReport(*task, one.status);
    if (!r.ok()) {
      refuse(i, r.status());
      continue;
    }
    valid.emplace_back(task->id, std::move(*r));
    where.push_back(i);
  }
  std::vector<Status> done = d_.jobs->ReportTasks(valid);
  for (size_t k = 0; k < done.size(); ++k) {
    if (!done[k].ok()) refuse(where[k], done[k]);
  }
  return reply;
}

StatusOr<TaskReport> AgentService::ReadReport(const store::Task& task, const protocol::TaskStatusReport& b) {
  TaskReport r;
  r.node_id = task.node_id;
  RM_RETURN_IF_ERROR(InRange("attempt", b.attempt, 0, INT32_MAX));
  r.attempt = static_cast<int>(b.attempt);
  r.state = b.state;
  const protocol::TaskExitInfo exit = b.exit.value_or(protocol::TaskExitInfo{});
  RM_RETURN_IF_ERROR(InRange("exit_code", exit.exit_code, -1, 255));
  r.exit_code = static_cast<int>(exit.exit_code);
  RM_RETURN_IF_ERROR(InRange("signal", exit.signal, 0, 128));
  r.signal = static_cast<int>(exit.signal);
  // Cut at a character's start: half of one is not text the store keeps.
  size_t cut = std::min<size_t>(exit.message.size(), 4096);
  while (cut > 0 && cut < exit.message.size() && (static_cast<unsigned char>(exit.message[cut]) & 0xC0) == 0x80) --cut;
  r.message = exit.message.substr(0, cut);
  if (!b.phase.empty() && !IsAgentPhase(b.phase)) {
    return InvalidArgument(fmt::format("phase: \"{}\" is not one of staging, pulling, starting, uploading",
                                       b.phase.substr(0, 40)));
  }
  r.phase = b.phase;
  return r;
}

StatusOr<protocol::ShipReply> AgentService::ShipOutput(const store::Task& task, const protocol::OutputChunk& c,
                                                      std::string_view data) {
  const bool is_logs = c.kind == protocol::OutputKind::kLogs;
  RM_RETURN_IF_ERROR(InRange("attempt", c.attempt, 0, INT32_MAX));
  RM_RETURN_IF_ERROR(InRange("offset", c.offset, 0, INT64_MAX / 2));
  if (task.attempt != c.attempt) {
    return FailedPrecondition(fmt::format("task {} is on attempt {}, not {}", task.id, task.attempt, c.attempt));
  }
  // An agent ships everything before it reports an exit, so a task that has
  // ended (lost, say) gets no more: 409 tells the agent to drop the rest.
  if (store::IsTerminal(task.state)) {
    return FailedPrecondition(
        fmt::format("task {} has ended ({}): no more output is kept", task.id, store::StateName(task.state)));
  }
  LogStore* to = is_logs ? d_.logs : d_.metrics;
  if (!to) return Unavailable("this server keeps no task output");
  RM_ASSIGN_OR_RETURN(int64_t size, to->Append(task.job_id, task.rank, static_cast<int>(c.attempt), c.offset, data));
  // Trainer records once: not again for a piece resent or refused at its offset.
  if (!is_logs && d_.monitor && size == c.offset + static_cast<int64_t>(data.size()) && !data.empty()) {
    IngestTrainerRecords(d_.monitor, task.id, d_.clock->NowMs(), data);
  }
  return protocol::ShipReply{size};
}

}  // namespace ringmaster::server
