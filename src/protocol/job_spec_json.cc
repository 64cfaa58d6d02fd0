// JobSpec as the server stores it (JobSpecToJson's text in the jobs table)
// and reads it back: the seam between a validated spec and the database.
// Parsing what users submit is job_spec.cc.
#include "protocol/job_spec.h"

#include <charconv>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "common/json_limits.h"
#include "common/units.h"

namespace ringmaster::protocol {
namespace {

// A string of a stored spec that a task is given: execve stops at a NUL.
void CheckStoredArg(const std::string& s, const std::string& field) {
  if (s.find('\0') != std::string::npos) throw std::runtime_error(field + ": contains a NUL byte");
}

// An integer of a stored spec. nlohmann's value<int>() casts a float or a
// huge number unchecked (undefined behaviour); a damaged record must fail
// its job, nothing else.
template <typename Int>
Int StoredInt(const nlohmann::json& obj, const char* key, Int fallback) {
  if (!obj.is_object() || !obj.contains(key)) return fallback;
  const nlohmann::json& v = obj.at(key);
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max())
                        : v.is_number_integer() && v.get<int64_t>() >= std::numeric_limits<Int>::min() &&
                              v.get<int64_t>() <= std::numeric_limits<Int>::max();
  if (!fits) throw std::runtime_error(fmt::format("{}: {} is not an integer in range", key, Printable(v.dump(), 64)));
  return static_cast<Int>(v.get<int64_t>());
}

}  // namespace

nlohmann::json JobSpecToJson(const JobSpec& s) {
  nlohmann::json resources = {{"cpu", FormatCpu(s.cpu_milli)}, {"memory", s.memory_bytes},
                              {"gpu", s.gpus}};
  if (!s.gpu_types.empty()) resources["gpu_type"] = s.gpu_types;
  if (!s.gpu_throughput.empty()) resources["gpu_throughput"] = s.gpu_throughput;
  resources["pids"] = s.pids;
  if (s.disk_bytes > 0) resources["disk"] = s.disk_bytes;
  if (s.io != JobSpec::Io{}) {
    nlohmann::json io = nlohmann::json::object();
    for (const auto& [k, v] : {std::pair{"read_bps", s.io.read_bps}, std::pair{"write_bps", s.io.write_bps},
                               std::pair{"read_iops", s.io.read_iops}, std::pair{"write_iops", s.io.write_iops}}) {
      if (v > 0) io[k] = v;
    }
    resources["io"] = io;
  }
  nlohmann::json j = {{"name", s.name},           {"kind", s.kind},
                      {"command", s.command},     {"env", s.env},
                      {"resources", resources},   {"replicas", s.replicas},
                      {"max_restarts", s.max_restarts}, {"priority", s.priority},
                      {"keep_checkpoints", s.keep_checkpoints}};
  if (!s.image.empty()) j["image"] = s.image;
  if (!s.executor.empty()) j["executor"] = s.executor;
  if (!s.network.empty()) j["network"] = s.network;
  if (!s.working_dir.empty()) j["working_dir"] = s.working_dir;
  if (s.elastic()) j["elastic"] = {{"min", s.min_replicas}, {"max", s.max_replicas}};
  if (!s.roles.empty()) {
    nlohmann::json roles = nlohmann::json::array();
    for (const JobRole& r : s.roles) roles.push_back({{"name", r.name}, {"count", r.count}});
    j["roles"] = roles;
  }
  if (s.autoscale) {
    const JobSpec::Autoscale& a = *s.autoscale;
    j["autoscale"] = {{"metric", a.metric},
                      {"scale_up_above", a.scale_up_above},
                      {"scale_down_below", a.scale_down_below},
                      {"window", std::to_string(a.window_ms / 1000)},
                      {"cooldown", std::to_string(a.cooldown_ms / 1000)}};
  }
  if (!s.node_selector.empty()) j["node_selector"] = s.node_selector;
  if (s.time_limit_ms > 0) j["time_limit"] = std::to_string(s.time_limit_ms / 1000);  // seconds
  if (s.command.empty()) j.erase("command");  // a notebook's: as its spec said (none)
  if (s.notebook()) j["idle_timeout"] = std::to_string(s.idle_timeout_ms / 1000);  // seconds; "0" = never
  if (!s.inputs.empty()) {
    nlohmann::json ins = nlohmann::json::array();
    for (const auto& in : s.inputs) ins.push_back({{"from", in.from}, {"to", in.to}});
    j["inputs"] = ins;
  }
  j["outputs"] = s.outputs;
  return j;
}

namespace {

// A duration stored as a string of seconds (0 to 366 days); throws naming `name`.
int64_t StoredSeconds(const nlohmann::json& j, const char* name) {
  const std::string text = j[name].get<std::string>();
  int64_t seconds = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (ec != std::errc() || end != text.data() + text.size() || seconds < 0 || seconds > 366LL * 86400) {
    throw std::runtime_error(std::string(name) + ": not a number of seconds up to 366 days");
  }
  return seconds;
}

}  // namespace

StatusOr<JobSpec> JobSpecFromJson(const std::string& spec_json) {
  // A stored spec is JobSpecToJson's: 3 levels deep, and a few MiB at most
  // (1 MiB of strings, some escaped as \u00XX).
  RM_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(spec_json, {.max_bytes = 16 << 20, .max_depth = 8},
                                                        "stored spec"));
  try {
    JobSpec s;
    s.name = j.value("name", "");
    s.kind = j.value("kind", "train");
    s.command = j.value("command", std::vector<std::string>{});
    s.env = j.value("env", std::map<std::string, std::string>{});
    s.image = j.value("image", "");
    s.executor = j.value("executor", "");
    s.network = j.value("network", "");
    const auto& r = j.at("resources");
    s.cpu_milli = ParseCpuMilli(r.value("cpu", "1")).value_or(1000);
    s.memory_bytes = StoredInt<int64_t>(r, "memory", 512LL << 20);
    s.gpus = StoredInt<int>(r, "gpu", 0);
    s.pids = StoredInt<int64_t>(r, "pids", 4096);
    s.disk_bytes = StoredInt<int64_t>(r, "disk", 0);
    if (r.contains("io")) {
      const auto& io = r["io"];
      s.io.read_bps = StoredInt<int64_t>(io, "read_bps", 0);
      s.io.write_bps = StoredInt<int64_t>(io, "write_bps", 0);
      s.io.read_iops = StoredInt<int64_t>(io, "read_iops", 0);
      s.io.write_iops = StoredInt<int64_t>(io, "write_iops", 0);
    }
    if (r.contains("gpu_type")) {
      const auto& t = r["gpu_type"];  // a string in specs stored before types could be listed
      if (t.is_string() && !t.get<std::string>().empty()) s.gpu_types.push_back(t.get<std::string>());
      if (t.is_array()) s.gpu_types = t.get<std::vector<std::string>>();
    }
    s.gpu_throughput = r.value("gpu_throughput", std::map<std::string, double>{});
    s.replicas = StoredInt<int>(j, "replicas", 1);
    if (j.contains("elastic")) {
      if (!j["elastic"].is_object()) throw std::runtime_error("elastic: not an object");
      s.min_replicas = StoredInt<int>(j["elastic"], "min", s.replicas);
      s.max_replicas = StoredInt<int>(j["elastic"], "max", s.replicas);
    }
    if (j.contains("roles")) {
      if (!j["roles"].is_array()) throw std::runtime_error("roles: not a list");
      for (const auto& r : j["roles"]) s.roles.push_back({r.at("name").get<std::string>(), StoredInt<int>(r, "count", 1)});
    }
    if (j.contains("autoscale")) {
      const auto& a = j["autoscale"];
      if (!a.is_object()) throw std::runtime_error("autoscale: not an object");
      JobSpec::Autoscale as;
      as.metric = a.at("metric").get<std::string>();
      as.scale_up_above = a.at("scale_up_above").get<double>();
      as.scale_down_below = a.at("scale_down_below").get<double>();
      as.window_ms = std::stoll(a.at("window").get<std::string>()) * 1000;
      as.cooldown_ms = std::stoll(a.at("cooldown").get<std::string>()) * 1000;
      s.autoscale = as;
    }
    s.max_restarts = StoredInt<int>(j, "max_restarts", 0);
    s.keep_checkpoints = StoredInt<int>(j, "keep_checkpoints", 3);
    s.priority = StoredInt<int>(j, "priority", 0);
    s.working_dir = j.value("working_dir", "");
    s.node_selector = j.value("node_selector", std::map<std::string, std::string>{});
    if (j.contains("time_limit")) s.time_limit_ms = StoredSeconds(j, "time_limit") * 1000;
    if (j.contains("idle_timeout")) s.idle_timeout_ms = StoredSeconds(j, "idle_timeout") * 1000;
    if (j.contains("inputs")) {
      for (const auto& in : j.at("inputs")) s.inputs.push_back({in.at("from").get<std::string>(), in.at("to").get<std::string>()});
    }
    if (j.contains("outputs")) s.outputs = j.at("outputs").get<std::vector<std::string>>();
    for (size_t i = 0; i < s.command.size(); ++i) CheckStoredArg(s.command[i], fmt::format("command[{}]", i));
    for (const auto& [name, value] : s.env) CheckStoredArg(name + "=" + value, "env." + Printable(name));
    CheckStoredArg(s.working_dir, "working_dir");
    CheckStoredArg(s.image, "image");
    return s;
  } catch (const std::exception& e) {
    return InvalidArgument("stored spec: " + Printable(e.what(), 200));
  }
}

}  // namespace ringmaster::protocol
