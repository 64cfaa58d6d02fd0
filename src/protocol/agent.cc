#include "protocol/agent.h"

#include <fmt/format.h>

#include "protocol/json_fields.h"

namespace ringmaster::protocol {

using nlohmann::json;

const char* OutputRoute(OutputKind kind) { return kind == OutputKind::kLogs ? "logs" : "metrics"; }

namespace {

// Reads each element of the list `key` (absent: none) with `read(element, its path, out)`.
template <typename T, typename Read>
Status ReadList(const FieldReader& f, const char* key, Need need, std::vector<T>* out, Read read) {
  RM_ASSIGN_OR_RETURN(const json* list, f.List(key, need));
  if (!list) return Status::Ok();
  std::vector<T> items(list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    RM_RETURN_IF_ERROR(read((*list)[i], fmt::format("{}[{}]", f.PathOf(key), i), &items[i]));
  }
  *out = std::move(items);
  return Status::Ok();
}

Status ReadGpu(const json& j, const std::string& path, GpuInfo* out) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  auto opt_int = [&](const char* key, std::optional<int64_t>* v) -> Status {
    if (!f.Has(key)) return Status::Ok();
    int64_t x = 0;
    RM_RETURN_IF_ERROR(f.Int(key, &x));
    *v = x;
    return Status::Ok();
  };
  auto opt_string = [&](const char* key, std::optional<std::string>* v) -> Status {
    if (!f.Has(key)) return Status::Ok();
    std::string x;
    RM_RETURN_IF_ERROR(f.String(key, &x));
    *v = std::move(x);
    return Status::Ok();
  };
  RM_RETURN_IF_ERROR(opt_int("index", &out->index));
  RM_RETURN_IF_ERROR(opt_string("model", &out->model));
  RM_RETURN_IF_ERROR(opt_int("memory_bytes", &out->memory_bytes));
  return opt_string("uuid", &out->uuid);
}

Status ReadHeld(const json& j, const std::string& path, HeldTask* out) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.Int("task_id", &out->task_id, Need::kRequired));
  return f.Int("attempt", &out->attempt, Need::kRequired);
}

Status ReadPeer(const json& j, const std::string& path, OverlayPeer* out) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.String("node", &out->node));
  RM_RETURN_IF_ERROR(f.String("address", &out->address, Need::kRequired));
  return f.String("block", &out->block, Need::kRequired);
}

// The overlay field of a reply: null or absent is none.
Status ReadOverlay(const FieldReader& f, const json& obj, std::optional<Overlay>* out) {
  auto it = obj.find("overlay");
  if (it == obj.end() || it->is_null()) {
    out->reset();
    return Status::Ok();
  }
  Overlay o;
  RM_RETURN_IF_ERROR(FromJson(*it, &o, f.PathOf("overlay")));
  *out = std::move(o);
  return Status::Ok();
}

json OverlayJson(const std::optional<Overlay>& o) { return o ? ToJson(*o) : json(); }

}  // namespace

json ToJson(const RegisterRequest& m) {
  json gpus = json::array();
  for (const GpuInfo& g : m.gpus) {
    json x = json::object();
    if (g.index) x["index"] = *g.index;
    if (g.model) x["model"] = *g.model;
    if (g.memory_bytes) x["memory_bytes"] = *g.memory_bytes;
    if (g.uuid) x["uuid"] = *g.uuid;
    gpus.push_back(std::move(x));
  }
  json tasks = json::array();
  for (const HeldTask& t : m.tasks) tasks.push_back({{"task_id", t.task_id}, {"attempt", t.attempt}});
  json out = {{"name", m.name},
          {"cpu_milli", m.cpu_milli},
          {"memory_bytes", m.memory_bytes},
          {"gpus", std::move(gpus)},
          {"agent_version", m.agent_version},
          {"protocol_version", m.protocol_version},
          {"tasks", std::move(tasks)},
          {"fence_after_ms", m.fence_after_ms},
          {"address", m.address},
          {"port_lo", m.port_lo},
          {"port_hi", m.port_hi},
          {"labels", m.labels},
          {"executors", m.executors},
          {"network", m.network}};
  if (m.tunnel_port > 0) out["tunnel_port"] = m.tunnel_port;  // written only when set: older servers see what they knew
  return out;
}

Status FromJson(const json& j, RegisterRequest* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.String("name", &out->name));
  RM_RETURN_IF_ERROR(f.Int("cpu_milli", &out->cpu_milli));
  RM_RETURN_IF_ERROR(f.Int("memory_bytes", &out->memory_bytes));
  RM_RETURN_IF_ERROR(ReadList(f, "gpus", Need::kOptional, &out->gpus, ReadGpu));
  RM_RETURN_IF_ERROR(f.String("agent_version", &out->agent_version));
  RM_RETURN_IF_ERROR(f.Int("protocol_version", &out->protocol_version));
  RM_RETURN_IF_ERROR(ReadList(f, "tasks", Need::kOptional, &out->tasks, ReadHeld));
  RM_RETURN_IF_ERROR(f.Int("fence_after_ms", &out->fence_after_ms));
  RM_RETURN_IF_ERROR(f.String("address", &out->address));
  RM_RETURN_IF_ERROR(f.Int("port_lo", &out->port_lo));
  RM_RETURN_IF_ERROR(f.Int("port_hi", &out->port_hi));
  RM_RETURN_IF_ERROR(f.StringMap("labels", &out->labels));
  RM_RETURN_IF_ERROR(f.StringList("executors", &out->executors));
  RM_RETURN_IF_ERROR(f.Int("tunnel_port", &out->tunnel_port));
  return f.String("network", &out->network);
}

json ToJson(const Overlay& m) {
  json peers = json::array();
  for (const OverlayPeer& p : m.peers) peers.push_back({{"node", p.node}, {"address", p.address}, {"block", p.block}});
  return {{"mode", m.mode}, {"subnet", m.subnet}, {"block", m.block}, {"peers", std::move(peers)}};
}

Status FromJson(const json& j, Overlay* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.String("mode", &out->mode));
  RM_RETURN_IF_ERROR(f.String("subnet", &out->subnet, Need::kRequired));
  RM_RETURN_IF_ERROR(f.String("block", &out->block, Need::kRequired));
  return ReadList(f, "peers", Need::kRequired, &out->peers, ReadPeer);
}

json ToJson(const RegisterReply& m) {
  json out = {{"node_id", m.node_id},
          {"overlay", OverlayJson(m.overlay)},
          {"lease_ms", m.lease_ms},
          {"fence_after_ms", m.fence_after_ms},
          {"protocol_version", m.protocol_version}};
  if (!m.tunnel_key.empty()) out["tunnel_key"] = m.tunnel_key;
  return out;
}

Status FromJson(const json& j, RegisterReply* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.Int("node_id", &out->node_id, Need::kRequired));
  RM_RETURN_IF_ERROR(ReadOverlay(f, j, &out->overlay));
  RM_RETURN_IF_ERROR(f.Int("lease_ms", &out->lease_ms));
  RM_RETURN_IF_ERROR(f.Int("fence_after_ms", &out->fence_after_ms));
  RM_RETURN_IF_ERROR(f.String("tunnel_key", &out->tunnel_key));
  return f.Int("protocol_version", &out->protocol_version);
}

json ToJson(const Heartbeat& m) {
  json out = {{"samples", ToJson(m.samples)}, {"fence_after_ms", m.fence_after_ms}};
  if (m.tunnel_port > 0) out["tunnel_port"] = m.tunnel_port;
  return out;
}

Status FromJson(const json& j, Heartbeat* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  if (auto it = j.find("samples"); it != j.end()) {
    auto samples = ParseSamples(*it);
    if (samples.ok()) {
      out->samples = std::move(*samples);
    } else {
      out->samples.clear();
      out->samples_error = samples.status().message();
    }
  }
  RM_RETURN_IF_ERROR(f.Int("tunnel_port", &out->tunnel_port));
  return f.Int("fence_after_ms", &out->fence_after_ms);
}

json ToJson(const HeartbeatReply& m) {
  json out = {{"overlay", OverlayJson(m.overlay)}, {"fence_after_ms", m.fence_after_ms}};
  if (!m.samples_refused.empty()) out["samples_refused"] = m.samples_refused;
  return out;
}

Status FromJson(const json& j, HeartbeatReply* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(ReadOverlay(f, j, &out->overlay));
  RM_RETURN_IF_ERROR(f.Int("fence_after_ms", &out->fence_after_ms));
  return f.String("samples_refused", &out->samples_refused);
}

json ToJson(const Assignment& m) {
  const TaskLimits& l = m.limits;
  return {{"task_id", m.task_id},
          {"user", {{"id", m.user_id}, {"name", m.user_name}}},
          {"job_id", m.job_id},
          {"rank", m.rank},
          {"attempt", m.attempt},
          {"desired", m.stop ? "stop" : "run"},
          {"argv", m.argv},
          {"env", m.env},
          {"working_dir", m.working_dir},
          {"image", m.image},
          {"executor", m.executor},
          {"network", m.network},
          {"overlay_address", m.overlay_address},
          {"peers", m.peers},
          {"limits", {{"cpu_milli", l.cpu_milli}, {"memory_bytes", l.memory_bytes}, {"pids", l.pids},
                      {"io_read_bps", l.io_read_bps}, {"io_write_bps", l.io_write_bps},
                      {"io_read_iops", l.io_read_iops}, {"io_write_iops", l.io_write_iops},
                      {"disk_bytes", l.disk_bytes}}},
          {"gpus", m.gpus},
          {"stop_grace_ms", m.stop_grace_ms}};
}

Status FromJson(const json& j, Assignment* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.Int("task_id", &out->task_id, Need::kRequired));
  RM_RETURN_IF_ERROR(f.Int("attempt", &out->attempt, Need::kRequired));
  RM_RETURN_IF_ERROR(f.Int("job_id", &out->job_id));
  RM_RETURN_IF_ERROR(f.Int("rank", &out->rank));
  RM_ASSIGN_OR_RETURN(const json* user, f.Object("user", Need::kRequired));
  FieldReader u(*user, f.PathOf("user"));
  RM_RETURN_IF_ERROR(u.Int("id", &out->user_id, Need::kRequired));
  RM_RETURN_IF_ERROR(u.String("name", &out->user_name));
  std::string desired;
  RM_RETURN_IF_ERROR(f.String("desired", &desired, Need::kRequired));
  out->stop = desired == "stop";
  RM_RETURN_IF_ERROR(f.StringList("argv", &out->argv, Need::kRequired));
  RM_RETURN_IF_ERROR(f.StringMap("env", &out->env, Need::kRequired));
  RM_RETURN_IF_ERROR(f.String("working_dir", &out->working_dir));
  RM_RETURN_IF_ERROR(f.String("image", &out->image));
  RM_RETURN_IF_ERROR(f.String("executor", &out->executor));
  RM_RETURN_IF_ERROR(f.String("network", &out->network));
  RM_RETURN_IF_ERROR(f.String("overlay_address", &out->overlay_address));
  RM_RETURN_IF_ERROR(f.StringList("peers", &out->peers));
  RM_ASSIGN_OR_RETURN(const json* limits, f.Object("limits"));
  if (limits) {
    FieldReader l(*limits, f.PathOf("limits"));
    TaskLimits& x = out->limits;
    RM_RETURN_IF_ERROR(l.Int("cpu_milli", &x.cpu_milli));
    RM_RETURN_IF_ERROR(l.Int("memory_bytes", &x.memory_bytes));
    RM_RETURN_IF_ERROR(l.Int("pids", &x.pids));
    RM_RETURN_IF_ERROR(l.Int("io_read_bps", &x.io_read_bps));
    RM_RETURN_IF_ERROR(l.Int("io_write_bps", &x.io_write_bps));
    RM_RETURN_IF_ERROR(l.Int("io_read_iops", &x.io_read_iops));
    RM_RETURN_IF_ERROR(l.Int("io_write_iops", &x.io_write_iops));
    RM_RETURN_IF_ERROR(l.Int("disk_bytes", &x.disk_bytes));
  }
  RM_RETURN_IF_ERROR(f.IntList("gpus", &out->gpus));
  return f.Int("stop_grace_ms", &out->stop_grace_ms);
}

json ToJson(const Assignments& m) {
  json tasks = json::array();
  for (const Assignment& a : m.tasks) tasks.push_back(ToJson(a));
  return {{"index", m.index}, {"tasks", std::move(tasks)}};
}

Status FromJson(const json& j, Assignments* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.Uint("index", &out->index));
  return ReadList(f, "tasks", Need::kRequired, &out->tasks,
                  [](const json& e, const std::string& p, Assignment* a) { return FromJson(e, a, p); });
}

json ToJson(const TaskStatusReport& m) {
  json out = {{"node_id", m.node_id}, {"attempt", m.attempt}, {"state", m.state}};
  if (m.exit) {
    out["exit_code"] = m.exit->exit_code;
    out["signal"] = m.exit->signal;
    out["message"] = m.exit->message;
  }
  if (!m.phase.empty()) out["phase"] = m.phase;
  return out;
}

Status FromJson(const json& j, TaskStatusReport* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(f.Int("node_id", &out->node_id));
  RM_RETURN_IF_ERROR(f.Int("attempt", &out->attempt));
  RM_RETURN_IF_ERROR(f.String("state", &out->state));
  if (f.Has("exit_code") || f.Has("signal") || f.Has("message")) {
    TaskExitInfo e;
    RM_RETURN_IF_ERROR(f.Int("exit_code", &e.exit_code));
    RM_RETURN_IF_ERROR(f.Int("signal", &e.signal));
    RM_RETURN_IF_ERROR(f.String("message", &e.message));
    out->exit = std::move(e);
  }
  return f.String("phase", &out->phase);
}

json ToJson(const TaskReports& m) {
  json reports = json::array();
  for (const TaskReport& r : m.reports) {
    json one = ToJson(r.status);
    one["task_id"] = r.task_id;
    reports.push_back(std::move(one));
  }
  return {{"reports", std::move(reports)}};
}

Status FromJson(const json& j, TaskReports* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  // Counted before any is read: a body of a million tiny reports builds nothing.
  if (auto it = j.find("reports"); it != j.end() && it->is_array() && it->size() > kMaxReportsPerBody) {
    return InvalidArgument(fmt::format("{}.reports: at most {} in one body", path, kMaxReportsPerBody));
  }
  FieldReader f(j, path);
  RM_RETURN_IF_ERROR(ReadList(f, "reports", Need::kRequired, &out->reports,
                              [](const json& e, const std::string& p, TaskReport* r) {
                                RM_RETURN_IF_ERROR(FromJson(e, &r->status, p));
                                return FieldReader(e, p).Int("task_id", &r->task_id, Need::kRequired);
                              }));
  return Status::Ok();
}

json ToJson(const TaskReportsReply& m) {
  json results = json::array();
  for (const TaskReportResult& r : m.results) {
    results.push_back(r.code.empty() ? json::object() : json{{"code", r.code}, {"message", r.message}});
  }
  return {{"results", std::move(results)}};
}

Status FromJson(const json& j, TaskReportsReply* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  return ReadList(FieldReader(j, path), "results", Need::kRequired, &out->results,
                  [](const json& e, const std::string& p, TaskReportResult* r) {
                    RM_RETURN_IF_ERROR(ExpectObject(e, p));
                    FieldReader f(e, p);
                    RM_RETURN_IF_ERROR(f.String("code", &r->code));
                    return f.String("message", &r->message);
                  });
}

json ToJson(const ShipReply& m) { return {{"size", m.size}}; }

Status FromJson(const json& j, ShipReply* out, const std::string& path) {
  RM_RETURN_IF_ERROR(ExpectObject(j, path));
  return FieldReader(j, path).Int("size", &out->size);
}

}  // namespace ringmaster::protocol
