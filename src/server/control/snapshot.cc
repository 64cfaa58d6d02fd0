#include "server/control/snapshot.h"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "common/strings.h"

namespace ringmaster::server {

using protocol::JobSpec;

using store::Task;

double TaskService(const Task& t, int64_t until_ms) {
  if (t.started_ms <= 0 || until_ms <= t.started_ms) return 0;
  return static_cast<double>(until_ms - t.started_ms) / 1000 * scheduler::Devices({t.cpu_milli, t.memory_bytes, t.gpus});
}

std::vector<scheduler::NodeState> BuildNodeStates(const std::vector<store::Node>& nodes,
                                                  const std::vector<NodeLive>& live,
                                                  const std::vector<Task>& placed, const OverlayPlan& overlay) {
  std::map<int64_t, std::vector<const Task*>> on;
  for (const Task& t : placed) on[t.node_id].push_back(&t);
  std::vector<scheduler::NodeState> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const store::Node& n = nodes[i];
    const NodeLive& l = live[i];
    scheduler::NodeState s;
    s.id = n.id;
    s.name = n.name;
    s.ready = l.ready && !n.cordoned;
    if (n.cordoned) s.cordoned = l.cordoned;
    s.capacity = {n.cpu_milli, n.memory_bytes, n.gpu_count};
    s.gpu_model = n.gpu_model;
    // Measured over a window, not one heartbeat's reading: a spike does not steer placement.
    s.cpu_util = l.cpu_util.value_or(n.cpu_util);
    s.gpu_util = l.gpu_util.value_or(0.0);
    const auto labels = nlohmann::json::parse(n.labels_json, nullptr, /*allow_exceptions=*/false);
    if (labels.is_object()) {
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string()) s.labels[k] = v.get<std::string>();
      }
    }
    s.memory_util = n.memory_bytes > 0 ? static_cast<double>(n.memory_used_bytes) / static_cast<double>(n.memory_bytes) : 0;
    s.executors = Split(n.executors, ',');
    s.overlay = n.network != "host" && n.overlay_block >= 0;
    // Pools: every task gets a port of its node's range (like Nomad's dynamic
    // ports), its own GPU indices, and an address of its node's overlay block.
    s.port_lo = n.port_lo;
    s.port_hi = n.port_hi;
    s.gpu_indices = true;
    if (s.overlay) {
      s.overlay_network = n.network;
      if (auto block = net::Block(overlay.subnet, overlay.block_prefix, n.overlay_block)) {
        if (auto first = net::TaskAddress(*block, 2)) {
          s.address_first = *first;
          s.address_count = static_cast<int>((uint64_t{1} << (32 - block->prefix)) - 3);
        }
      }
    }
    for (const Task* t : on[n.id]) {
      s.allocated.cpu_milli += t->cpu_milli;
      s.allocated.memory_bytes += t->memory_bytes;
      s.allocated.gpus += t->gpus;
      if (t->port > 0) s.ports_used.insert(t->port);
      for (const std::string& g : Split(t->gpu_indices, ',')) s.gpus_used.insert(std::atoi(g.c_str()));
      if (auto a = net::ParseIpv4(t->overlay_ip)) s.addresses_used.insert(*a);
    }
    out.push_back(std::move(s));
  }
  return out;
}

scheduler::JobRequest RequestFor(const store::Job& j, const JobSpec& spec, const std::string& user) {
  scheduler::JobRequest r;
  r.job_id = j.id;
  r.replicas = j.replicas;
  r.per_task = {spec.cpu_milli, spec.memory_bytes, spec.gpus};
  r.gpu_types = spec.gpu_types;
  r.throughput = spec.gpu_throughput;
  r.node_selector = spec.node_selector;
  if (!spec.executor.empty()) {
    r.executors = {spec.executor};
  } else if (spec.network == "overlay") {
    r.executors = {"runc"};  // the overlay joins runc containers (docs/cluster.md)
  } else if (!spec.image.empty()) {
    r.executors = {"runc", "docker"};
  } else {
    r.executors = {"process"};
  }
  r.needs_overlay = spec.network == "overlay";
  // An image run by runc joins the overlay unless it asked for the host's network or none.
  r.joins_overlay = !spec.image.empty() && (spec.network.empty() || spec.network == "overlay") &&
                    (spec.executor.empty() || spec.executor == "runc");
  r.user = user;
  r.priority = j.priority;
  r.submit_ms = j.created_ms;
  r.expected_runtime_ms = spec.time_limit_ms;
  r.attained_service_s = j.service_s;  // ended runs; BuildRunningJob adds the current one
  r.rank_by_measured_use = spec.autoscale.has_value();
  return r;
}

RunningSnapshot BuildRunningJob(scheduler::JobRequest request, std::vector<const Task*> tasks, int64_t now_ms,
                            int64_t steady_now_ms, const std::map<int64_t, int64_t>& running_since_steady) {
  RunningSnapshot g;
  scheduler::RunningJob& rj = g.job;
  rj.request = std::move(request);
  std::sort(tasks.begin(), tasks.end(), [](const Task* a, const Task* b) { return a->rank < b->rank; });
  int64_t started = 0;
  // How long the gang has run, on the steady clock where this server saw it
  // start (the wall clock's times only after a restart, never negative).
  int64_t ran_ms = INT64_MAX;
  bool all_running = true;
  for (const Task* t : tasks) {
    rj.node_ids.push_back(t->node_id);
    scheduler::ReplicaSlot slot;
    slot.port = t->port;
    for (const std::string& idx : Split(t->gpu_indices, ',')) slot.gpus.push_back(std::atoi(idx.c_str()));
    slot.address = net::ParseIpv4(t->overlay_ip).value_or(0);
    rj.slots.push_back(std::move(slot));
    started = std::max(started, t->started_ms);
    auto since = running_since_steady.find(t->id);
    ran_ms = std::min(ran_ms, since != running_since_steady.end() ? steady_now_ms - since->second
                                                                  : std::max<int64_t>(0, now_ms - t->started_ms));
    all_running = all_running && t->state == store::State::kRunning;
    if (t->state == store::State::kRunning) rj.request.attained_service_s += TaskService(*t, now_ms);
  }
  rj.started_ms = all_running ? started : now_ms;
  g.all_running = all_running;
  g.ran_ms = ran_ms;
  return g;
}

}  // namespace ringmaster::server
