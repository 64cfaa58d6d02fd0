#include "protocol/samples.h"

#include <cmath>

#include <fmt/format.h>

namespace ringmaster::protocol {

using nlohmann::json;

json ToJson(const NodeSample& s) {
  json gpus = json::array();
  for (const GpuSample& g : s.gpus) {
    gpus.push_back({{"index", g.index}, {"util", g.util}, {"memory_used_bytes", g.memory_used_bytes},
                    {"power_w", g.power_w}, {"temperature_c", g.temperature_c}});
  }
  json tasks = json::array();
  for (const TaskSample& t : s.tasks) {
    json x = {{"task", t.task_id}, {"attempt", t.attempt}};
    if (t.cpu_cores >= 0) x["cpu_cores"] = t.cpu_cores;
    if (t.memory_bytes >= 0) x["memory_bytes"] = t.memory_bytes;
    if (t.pids >= 0) x["pids"] = t.pids;
    if (t.oom_kills >= 0) x["oom_kills"] = t.oom_kills;
    if (t.gpu_util >= 0) x["gpu_util"] = t.gpu_util;
    tasks.push_back(std::move(x));
  }
  return {{"t", s.t_ms},
          {"cpu", s.cpu},
          {"memory_used_bytes", s.memory_used_bytes},
          {"disk_used_bytes", s.disk_used_bytes},
          {"disk_read_bps", s.disk_read_bps},
          {"disk_write_bps", s.disk_write_bps},
          {"net_rx_bps", s.net_rx_bps},
          {"net_tx_bps", s.net_tx_bps},
          {"gpus", std::move(gpus)},
          {"tasks", std::move(tasks)}};
}

json ToJson(const std::vector<NodeSample>& samples) {
  json out = json::array();
  for (const NodeSample& s : samples) out.push_back(ToJson(s));
  return out;
}

namespace {

constexpr double kMaxRate = 1e15;  // bytes per second: anything above is not a measurement
constexpr int64_t kMaxBytes = int64_t{1} << 60;

struct Fields {
  const json& obj;
  std::string where;

  Status Number(const char* name, double lo, double hi, double* out, bool required = true) const {
    auto it = obj.find(name);
    if (it == obj.end()) {
      if (!required) return Status::Ok();
      return InvalidArgument(fmt::format("{}.{}: missing", where, name));
    }
    if (!it->is_number()) return InvalidArgument(fmt::format("{}.{}: must be a number", where, name));
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi) {
      return InvalidArgument(fmt::format("{}.{}: must be within [{}, {}]", where, name, lo, hi));
    }
    *out = v;
    return Status::Ok();
  }
  Status Int(const char* name, int64_t lo, int64_t hi, int64_t* out, bool required = true) const {
    auto it = obj.find(name);
    if (it == obj.end()) {
      if (!required) return Status::Ok();
      return InvalidArgument(fmt::format("{}.{}: missing", where, name));
    }
    if (!it->is_number_integer()) return InvalidArgument(fmt::format("{}.{}: must be an integer", where, name));
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) return InvalidArgument(fmt::format("{}.{}: must be within [{}, {}]", where, name, lo, hi));
    *out = v;
    return Status::Ok();
  }
  StatusOr<const json*> Array(const char* name, size_t max) const {
    auto it = obj.find(name);
    if (it == obj.end()) return static_cast<const json*>(nullptr);
    if (!it->is_array()) return InvalidArgument(fmt::format("{}.{}: must be an array", where, name));
    if (it->size() > max) return InvalidArgument(fmt::format("{}.{}: at most {} entries", where, name, max));
    return &*it;
  }
};

}  // namespace

StatusOr<std::vector<NodeSample>> ParseSamples(const json& samples) {
  if (!samples.is_array()) return InvalidArgument("samples: must be an array");
  if (samples.size() > kMaxSamplesPerBody) {
    return InvalidArgument(fmt::format("samples: at most {} per heartbeat", kMaxSamplesPerBody));
  }
  std::vector<NodeSample> out;
  out.reserve(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    const json& j = samples[i];
    const std::string where = fmt::format("samples[{}]", i);
    if (!j.is_object()) return InvalidArgument(where + ": must be an object");
    Fields f{j, where};
    NodeSample s;
    RM_RETURN_IF_ERROR(f.Int("t", 0, int64_t{1} << 50, &s.t_ms));
    RM_RETURN_IF_ERROR(f.Number("cpu", 0, 1, &s.cpu));
    RM_RETURN_IF_ERROR(f.Int("memory_used_bytes", 0, kMaxBytes, &s.memory_used_bytes));
    RM_RETURN_IF_ERROR(f.Int("disk_used_bytes", 0, kMaxBytes, &s.disk_used_bytes, false));
    RM_RETURN_IF_ERROR(f.Number("disk_read_bps", 0, kMaxRate, &s.disk_read_bps, false));
    RM_RETURN_IF_ERROR(f.Number("disk_write_bps", 0, kMaxRate, &s.disk_write_bps, false));
    RM_RETURN_IF_ERROR(f.Number("net_rx_bps", 0, kMaxRate, &s.net_rx_bps, false));
    RM_RETURN_IF_ERROR(f.Number("net_tx_bps", 0, kMaxRate, &s.net_tx_bps, false));
    RM_ASSIGN_OR_RETURN(const json* gpus, f.Array("gpus", kMaxGpusPerSample));
    if (gpus) {
      for (size_t k = 0; k < gpus->size(); ++k) {
        const json& g = (*gpus)[k];
        const std::string gw = fmt::format("{}.gpus[{}]", where, k);
        if (!g.is_object()) return InvalidArgument(gw + ": must be an object");
        Fields gf{g, gw};
        GpuSample x;
        int64_t index = 0;
        RM_RETURN_IF_ERROR(gf.Int("index", 0, 1023, &index));
        x.index = static_cast<int>(index);
        RM_RETURN_IF_ERROR(gf.Number("util", 0, 1, &x.util));
        RM_RETURN_IF_ERROR(gf.Int("memory_used_bytes", 0, kMaxBytes, &x.memory_used_bytes, false));
        RM_RETURN_IF_ERROR(gf.Number("power_w", 0, 1e5, &x.power_w, false));
        RM_RETURN_IF_ERROR(gf.Number("temperature_c", -100, 300, &x.temperature_c, false));
        s.gpus.push_back(x);
      }
    }
    RM_ASSIGN_OR_RETURN(const json* tasks, f.Array("tasks", kMaxTasksPerSample));
    if (tasks) {
      for (size_t k = 0; k < tasks->size(); ++k) {
        const json& t = (*tasks)[k];
        const std::string tw = fmt::format("{}.tasks[{}]", where, k);
        if (!t.is_object()) return InvalidArgument(tw + ": must be an object");
        Fields tf{t, tw};
        TaskSample x;
        int64_t attempt = 0;
        RM_RETURN_IF_ERROR(tf.Int("task", 1, INT64_MAX, &x.task_id));
        RM_RETURN_IF_ERROR(tf.Int("attempt", 0, INT32_MAX, &attempt));
        x.attempt = static_cast<int>(attempt);
        RM_RETURN_IF_ERROR(tf.Number("cpu_cores", 0, 1e5, &x.cpu_cores, false));
        RM_RETURN_IF_ERROR(tf.Int("memory_bytes", 0, kMaxBytes, &x.memory_bytes, false));
        RM_RETURN_IF_ERROR(tf.Int("pids", 0, int64_t{1} << 32, &x.pids, false));
        RM_RETURN_IF_ERROR(tf.Int("oom_kills", 0, int64_t{1} << 32, &x.oom_kills, false));
        RM_RETURN_IF_ERROR(tf.Number("gpu_util", 0, 1, &x.gpu_util, false));
        s.tasks.push_back(x);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ringmaster::protocol
