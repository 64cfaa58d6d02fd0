// Monitoring routes: a node's and a job's usage series from the embedded
// time series (monitor::Monitor), and /metrics for Prometheus in the text
// exposition format. Node usage is for any user (like GET /api/v1/nodes, which
// shows each node's use already); a job's usage only for its owner and
// admins; /metrics, which names every user's jobs, only for admin and
// metrics tokens (a metrics token reaches nothing else).
#include <algorithm>

#include <fmt/format.h>

#include "server/api.h"
#include "server/auth.h"

namespace ringmaster::server {

using nlohmann::json;

namespace {

constexpr int64_t kMaxSinceS = 31 * 86400;
constexpr int64_t kLatestAgeMs = 30'000;  // older samples are not "now" for /metrics

json Points(const std::vector<monitor::Point>& points) {
  json out = json::array();
  for (const auto& p : points) out.push_back({p.t_ms, p.avg, p.max});
  return out;
}

struct Window {
  int64_t since_ms = 0;
  int64_t step_ms = 0;
};

StatusOr<Window> WindowOf(const Api& api, const http::Request& req) {
  RM_ASSIGN_OR_RETURN(int64_t since, IntParam(req, "since", 300, 1, kMaxSinceS));
  RM_ASSIGN_OR_RETURN(int64_t step, IntParam(req, "step", 0, 0, 86400));
  Window w;
  w.since_ms = api.clock->NowMs() - since * 1000;
  w.step_ms = step * 1000;
  return w;
}

std::string Label(int64_t v) { return std::to_string(v); }

}  // namespace

void HttpMetrics::Observe(const http::AccessRecord& r) {
  // Only routes the server has: a path or method a client makes up is "other",
  // so no request can grow the label set.
  const std::string route = r.route ? *r.route : "other";
  const std::string method = r.route ? r.method : "other";
  std::lock_guard<std::mutex> l(mu_);
  Route& x = routes_[{route, method}];
  if (!x.latency) {
    x.latency = std::make_unique<monitor::Histogram>(
        std::vector<double>{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30});
  }
  ++x.codes[r.status];
  x.latency->Observe(r.ms / 1000.0);
}

void HttpMetrics::Write(monitor::Exposition& out) const {
  std::lock_guard<std::mutex> l(mu_);
  out.Family("ringmaster_http_requests_total", monitor::MetricType::kCounter, "API requests answered, by route, method and status code.");
  for (const auto& [key, x] : routes_) {
    for (const auto& [code, n] : x.codes) {
      out.Sample("ringmaster_http_requests_total", {{"route", key.first}, {"method", key.second}, {"code", std::to_string(code)}},
                 static_cast<double>(n));
    }
  }
  out.Family("ringmaster_http_request_duration_seconds", monitor::MetricType::kHistogram,
             "API request latency, from the request's head to its last byte, by route and method.");
  for (const auto& [key, x] : routes_) {
    out.Histogram("ringmaster_http_request_duration_seconds", {{"route", key.first}, {"method", key.second}},
                  x.latency->Snapshot());
  }
}

void AddMonitorRoutes(Api& api) {
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};
  http::RouteOptions metrics{0, http::Pool::kApi, true, access::kMetrics};

  api.http->Route("GET", "/api/v1/nodes/{id}/usage", read, Json([&api](const http::Request& req, const Caller&) -> StatusOr<Reply> {
    const int64_t id = PathId(req);
    RM_ASSIGN_OR_RETURN(store::Node node, api.store->GetNode(id));
    RM_ASSIGN_OR_RETURN(Window w, WindowOf(api, req));
    json series = json::object();
    const std::string prefix = fmt::format("node/{}/", id);
    int64_t step = 0;  // a node's series are sampled together: one step for all
    for (const std::string& key : api.monitor->series().Keys(prefix)) {
      std::string name = key.substr(prefix.size());
      std::replace(name.begin(), name.end(), '/', '_');  // gpu/0/util -> gpu_0_util
      int64_t used = 0;
      series[name] = Points(api.monitor->series().Query(key, w.since_ms, w.step_ms, &used));
      if (name == "cpu" || step == 0) step = used;
    }
    return Reply{200, {{"node", node.name}, {"id", id}, {"since_ms", w.since_ms}, {"step_ms", step},
                       {"points", "[time_ms, mean, max] per step"}, {"series", series}}};
  }));

  api.http->Route("GET", "/api/v1/jobs/{id}/usage", read, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    const int64_t id = PathId(req);
    auto job = api.store->GetJob(id);
    if (!job.ok() || (job->user_id != c.user.id && !c.admin())) {
      if (job.ok() || job.status().code() == StatusCode::kNotFound) return NotFound(fmt::format("job {} not found", id));
      return job.status();
    }
    RM_ASSIGN_OR_RETURN(Window w, WindowOf(api, req));
    RM_ASSIGN_OR_RETURN(auto tasks, api.store->ListTasks(id));
    RM_ASSIGN_OR_RETURN(auto nodes, api.store->ListNodes());
    std::map<int64_t, std::string> names;
    for (const auto& n : nodes) names[n.id] = n.name;
    json out = json::array();
    for (const auto& t : tasks) {
      json series = json::object(), steps = json::object();
      const std::string prefix = fmt::format("task/{}/", t.id);
      for (const std::string& key : api.monitor->series().Keys(prefix)) {
        int64_t used = 0;
        const std::string name = key.substr(prefix.size());
        series[name] = Points(api.monitor->series().Query(key, w.since_ms, w.step_ms, &used));
        steps[name] = used;
      }
      out.push_back({{"task", t.id}, {"rank", t.rank}, {"node", t.node_id ? names[t.node_id] : ""},
                     {"state", store::StateName(t.state)}, {"step_ms", steps}, {"series", series}});
    }
    json flags = json::array();
    for (const auto& f : api.monitor->Flags(id)) flags.push_back(FlagJson(f));
    return Reply{200, {{"job", id}, {"since_ms", w.since_ms}, {"points", "[time_ms, mean, max] per step"},
                       {"tasks", out}, {"flags", flags}}};
  }));

  api.http->Route("GET", "/metrics", metrics, [&api](http::Request& req, http::Responder respond) {
    auto body = MetricsText(api);
    if (!body.ok()) return respond(ErrorFor(req, body.status()));
    http::Response r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = std::move(*body);
    respond(std::move(r));
  });
}

json FlagJson(const monitor::Finding& f) {
  json x = {{"kind", f.kind}, {"message", f.message}};
  if (f.rank >= 0) x["rank"] = f.rank;
  return x;
}

json JobUsageJson(Api& api, const std::vector<store::Task>& tasks) {
  const int64_t now = api.clock->NowMs();
  double cpu = 0, gpu = 0;
  int64_t mem = 0;
  int gpu_tasks = 0;
  bool any = false;
  for (const auto& t : tasks) {
    auto s = api.monitor->LatestTask(t.id, now, kLatestAgeMs);
    if (!s) continue;
    any = true;
    cpu += std::max(0.0, s->cpu_cores);
    mem += std::max<int64_t>(0, s->memory_bytes);
    if (s->gpu_util >= 0) {
      gpu += s->gpu_util;
      ++gpu_tasks;
    }
  }
  if (!any) return nullptr;
  json u = {{"cpu_cores", cpu}, {"memory_bytes", mem}};
  if (gpu_tasks > 0) u["gpu_util"] = gpu / gpu_tasks;
  return u;
}

StatusOr<std::string> MetricsText(Api& api) {
  using monitor::MetricType;
  monitor::Exposition out;
  const int64_t now = api.clock->NowMs();
  RM_ASSIGN_OR_RETURN(auto nodes, api.store->ListNodes());
  RM_ASSIGN_OR_RETURN(auto users, api.store->ListUsers());
  std::map<int64_t, std::string> user_names;
  for (const auto& u : users) user_names[u.id] = u.name;

  // Nodes and their GPUs: the latest sample of each (none older than kLatestAgeMs).
  out.Family("ringmaster_node_ready", MetricType::kGauge, "1 while the node's lease holds.");
  for (auto& n : nodes) {
    api.jobs->ApplyLive(&n);
    out.Sample("ringmaster_node_ready", {{"node", n.name}}, api.jobs->NodeReady(n) ? 1 : 0);
  }
  struct NodeGauge {
    const char* name;
    const char* help;
    double (*get)(const protocol::NodeSample&);
  };
  const NodeGauge gauges[] = {
      {"ringmaster_node_cpu_ratio", "CPU in use, 0..1 of the node.", [](const protocol::NodeSample& s) { return s.cpu; }},
      {"ringmaster_node_memory_used_bytes", "Memory in use (total less available).",
       [](const protocol::NodeSample& s) { return static_cast<double>(s.memory_used_bytes); }},
      {"ringmaster_node_disk_used_bytes", "Used bytes of the file system holding the agent's data.",
       [](const protocol::NodeSample& s) { return static_cast<double>(s.disk_used_bytes); }},
      {"ringmaster_node_disk_read_bytes_per_second", "Bytes read from block devices per second.",
       [](const protocol::NodeSample& s) { return s.disk_read_bps; }},
      {"ringmaster_node_disk_written_bytes_per_second", "Bytes written to block devices per second.",
       [](const protocol::NodeSample& s) { return s.disk_write_bps; }},
      {"ringmaster_node_network_receive_bytes_per_second", "Bytes received per second, all interfaces but loopback.",
       [](const protocol::NodeSample& s) { return s.net_rx_bps; }},
      {"ringmaster_node_network_transmit_bytes_per_second", "Bytes sent per second, all interfaces but loopback.",
       [](const protocol::NodeSample& s) { return s.net_tx_bps; }},
  };
  std::vector<std::pair<std::string, protocol::NodeSample>> latest;
  for (const auto& n : nodes) {
    if (auto s = api.monitor->LatestNode(n.id, now, kLatestAgeMs)) latest.emplace_back(n.name, std::move(*s));
  }
  for (const NodeGauge& g : gauges) {
    out.Family(g.name, MetricType::kGauge, g.help);
    for (const auto& [name, s] : latest) out.Sample(g.name, {{"node", name}}, g.get(s));
  }
  out.Family("ringmaster_node_memory_bytes", MetricType::kGauge, "The node's memory, as its agent offers it.");
  for (const auto& n : nodes) out.Sample("ringmaster_node_memory_bytes", {{"node", n.name}}, static_cast<double>(n.memory_bytes));

  struct GpuGauge {
    const char* name;
    const char* help;
    double (*get)(const protocol::GpuSample&);
  };
  const GpuGauge gpu_gauges[] = {
      {"ringmaster_gpu_utilisation_ratio", "Share of time a kernel ran on the GPU, 0..1 (NVML).",
       [](const protocol::GpuSample& g) { return g.util; }},
      {"ringmaster_gpu_memory_used_bytes", "GPU memory in use (NVML).",
       [](const protocol::GpuSample& g) { return static_cast<double>(g.memory_used_bytes); }},
      {"ringmaster_gpu_power_watts", "GPU power draw (NVML).", [](const protocol::GpuSample& g) { return g.power_w; }},
      {"ringmaster_gpu_temperature_celsius", "GPU temperature (NVML).",
       [](const protocol::GpuSample& g) { return g.temperature_c; }},
  };
  for (const GpuGauge& g : gpu_gauges) {
    out.Family(g.name, MetricType::kGauge, g.help);
    for (const auto& [name, s] : latest) {
      for (const auto& gpu : s.gpus) out.Sample(g.name, {{"node", name}, {"gpu", Label(gpu.index)}}, g.get(gpu));
    }
  }

  // Tasks placed now, with their latest cgroup sample.
  RM_ASSIGN_OR_RETURN(auto placed, api.store->ListPlacedTasks());
  std::map<int64_t, int64_t> job_user;
  struct TaskRow {
    monitor::Labels labels;
    protocol::TaskSample s;
  };
  std::vector<TaskRow> rows;
  for (const auto& t : placed) {
    auto s = api.monitor->LatestTask(t.id, now, kLatestAgeMs);
    if (!s) continue;
    auto u = job_user.find(t.job_id);
    if (u == job_user.end()) {
      auto j = api.store->GetJob(t.job_id);
      u = job_user.emplace(t.job_id, j.ok() ? j->user_id : 0).first;
    }
    rows.push_back({{{"job", Label(t.job_id)}, {"rank", Label(t.rank)}, {"user", user_names[u->second]}}, *s});
  }
  out.Family("ringmaster_task_cpu_cores", MetricType::kGauge, "CPU time per second of a task's cgroup, in cores.");
  for (const auto& r : rows) {
    if (r.s.cpu_cores >= 0) out.Sample("ringmaster_task_cpu_cores", r.labels, r.s.cpu_cores);
  }
  out.Family("ringmaster_task_memory_bytes", MetricType::kGauge, "Memory of a task's cgroup, less inactive page cache.");
  for (const auto& r : rows) {
    if (r.s.memory_bytes >= 0) out.Sample("ringmaster_task_memory_bytes", r.labels, static_cast<double>(r.s.memory_bytes));
  }
  out.Family("ringmaster_task_pids", MetricType::kGauge, "Processes and threads in a task's cgroup.");
  for (const auto& r : rows) {
    if (r.s.pids >= 0) out.Sample("ringmaster_task_pids", r.labels, static_cast<double>(r.s.pids));
  }
  out.Family("ringmaster_task_oom_kills_total", MetricType::kCounter, "Processes the OOM killer ended in a task's cgroup.");
  for (const auto& r : rows) {
    if (r.s.oom_kills >= 0) out.Sample("ringmaster_task_oom_kills_total", r.labels, static_cast<double>(r.s.oom_kills));
  }

  // Jobs by state and user: every state, so a gauge falls to 0 rather than vanishing.
  RM_ASSIGN_OR_RETURN(auto counts, api.store->CountJobsByUserAndState());
  std::map<std::pair<std::string, std::string>, double> jobs;
  for (const auto& [key, n] : counts) {
    std::string state = store::StateName(key.second);
    std::transform(state.begin(), state.end(), state.begin(), [](unsigned char ch) { return std::tolower(ch); });
    jobs[{state, user_names.count(key.first) ? user_names[key.first] : Label(key.first)}] += static_cast<double>(n);
  }
  out.Family("ringmaster_jobs", MetricType::kGauge, "Jobs by state and user.");
  for (const auto& [key, n] : jobs) out.Sample("ringmaster_jobs", {{"state", key.first}, {"user", key.second}}, n);

  const SchedulerStats st = api.jobs->Stats();
  out.Family("ringmaster_scheduler_queue_length", MetricType::kGauge, "Jobs waiting to be placed at the last pass.");
  out.Sample("ringmaster_scheduler_queue_length", {}, static_cast<double>(st.queue_length));
  out.Family("ringmaster_scheduler_pending_jobs", MetricType::kGauge, "Jobs left pending at the last pass, by the kind of reason.");
  for (const auto& [kind, n] : st.pending_by_reason) {
    out.Sample("ringmaster_scheduler_pending_jobs", {{"reason", kind}}, static_cast<double>(n));
  }
  out.Family("ringmaster_scheduler_passes_total", MetricType::kCounter, "Scheduling passes.");
  out.Sample("ringmaster_scheduler_passes_total", {}, static_cast<double>(st.passes));
  out.Family("ringmaster_scheduler_placements_total", MetricType::kCounter, "Gangs placed.");
  out.Sample("ringmaster_scheduler_placements_total", {}, static_cast<double>(st.placements));
  out.Family("ringmaster_scheduler_preemptions_total", MetricType::kCounter, "Gangs preempted for others.");
  out.Sample("ringmaster_scheduler_preemptions_total", {}, static_cast<double>(st.preemptions));
  out.Family("ringmaster_scheduler_resizes_total", MetricType::kCounter, "Elastic jobs grown or shrunk on measured use.");
  out.Sample("ringmaster_scheduler_resizes_total", {}, static_cast<double>(st.resizes));
  out.Family("ringmaster_scheduler_pass_seconds", MetricType::kHistogram, "Time of one scheduling pass.");
  out.Histogram("ringmaster_scheduler_pass_seconds", {}, st.pass_seconds);

  out.Family("ringmaster_monitor_series", MetricType::kGauge, "Series in the embedded time series.");
  out.Sample("ringmaster_monitor_series", {}, static_cast<double>(api.monitor->series().series()));
  out.Family("ringmaster_monitor_memory_bytes", MetricType::kGauge, "Bytes the embedded time series holds.");
  out.Sample("ringmaster_monitor_memory_bytes", {}, static_cast<double>(api.monitor->series().MemoryBytes()));
  out.Family("ringmaster_monitor_samples_total", MetricType::kCounter, "Node samples received from agents.");
  out.Sample("ringmaster_monitor_samples_total", {}, static_cast<double>(api.monitor->samples_ingested()));
  out.Family("ringmaster_monitor_dropped_total", MetricType::kCounter,
             "Samples refused (out of order, or beyond the series limit).");
  out.Sample("ringmaster_monitor_dropped_total", {}, static_cast<double>(api.monitor->series().dropped()));

  api.http_metrics.Write(out);
  return out.Take();
}

}  // namespace ringmaster::server
