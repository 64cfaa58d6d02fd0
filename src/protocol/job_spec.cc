#include "protocol/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cctype>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "common/json_limits.h"
#include "common/units.h"
#include "common/yaml_depth.h"
#include "common/yaml_scan.h"
#include "protocol/image_ref.h"
#include "common/files_key.h"

namespace ringmaster::protocol {
namespace {

std::string YamlError(const YAML::Exception& e) {
  if (e.mark.is_null()) return fmt::format("spec: not valid YAML or JSON: {}", Printable(e.msg, 200));
  return fmt::format("spec: not valid YAML or JSON: line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1,
                     Printable(e.msg, 200));
}

// ---- Reading the document into a JobSpec.

std::string Quote(const YAML::Node& n) {
  if (n.IsScalar()) return "\"" + Printable(n.Scalar()) + "\"";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

bool IsJobName(std::string_view s) {  // [A-Za-z0-9][A-Za-z0-9._-]{0,62}
  if (s.empty() || s.size() > 63 || !(IsAlpha(s[0]) || IsDigit(s[0]))) return false;
  for (char c : s) {
    if (!(IsAlpha(c) || IsDigit(c) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

bool IsVariableName(std::string_view s) {  // [A-Za-z_][A-Za-z0-9_]*
  if (s.empty() || IsDigit(s[0])) return false;
  for (char c : s) {
    if (!(IsAlpha(c) || IsDigit(c) || c == '_')) return false;
  }
  return true;
}

// `[+-]?[0-9]+`, read without overflow.
struct Int {
  enum { kOk, kNotAnInteger, kOutOfRange } result = kNotAnInteger;
  int64_t value = 0;
};
Int ToInt(std::string_view s) {
  Int out;
  const bool plus = !s.empty() && s[0] == '+';
  if (plus) s.remove_prefix(1);  // from_chars takes '-' only
  const std::string_view digits = !plus && !s.empty() && s[0] == '-' ? s.substr(1) : s;
  if (digits.empty() || !IsDigit(digits[0])) return out;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out.value);
  if (end != s.data() + s.size()) return out;
  out.result = ec == std::errc::result_out_of_range ? Int::kOutOfRange : Int::kOk;
  return out;
}

// A size (`4Gi`, `512Mi`, bytes) of at least `least`, which `why` explains.
StatusOr<int64_t> GetSize(const YAML::Node& n, const std::string& field, int64_t least, const char* why) {
  if (!n.IsScalar()) return InvalidArgument(fmt::format("{}: must be a size, got {}", field, Quote(n)));
  auto bytes = ParseBytes(n.Scalar());
  if (!bytes) return InvalidArgument(fmt::format("{}: {} is not a size (use e.g. 512Mi or 4Gi)", field, Quote(n)));
  if (*bytes <= 0) return InvalidArgument(fmt::format("{}: must be > 0, got {}", field, Printable(n.Scalar())));
  if (*bytes < least) {
    return InvalidArgument(fmt::format("{}: {} is below {} ({})", field, Printable(n.Scalar()), why, FormatBytes(least)));
  }
  return *bytes;
}

class SpecReader {
 public:
  StatusOr<JobSpec> Read(const YAML::Node& root);

 private:
  // The scalar's text, once it is counted against kMaxSpecExpandedBytes and
  // found fit to hand to a task: valid UTF-8 (it must dump as JSON) and no
  // NUL (execve would cut the string there). REQUIRES: n.IsScalar().
  StatusOr<std::string> Text(const YAML::Node& n, const std::string& field);
  StatusOr<std::string> GetString(const YAML::Node& n, const std::string& field);
  StatusOr<int64_t> GetInt(const YAML::Node& n, const std::string& field, int64_t lo, int64_t hi);
  // A key of a user's mapping (env, node_selector, gpu_throughput), with
  // the same checks as Text; refused when it appeared before in `seen`.
  StatusOr<std::string> Key(const YAML::Node& key, const std::string& map_field, std::set<std::string>* seen);
  Status CheckKeys(const YAML::Node& map, const std::string& prefix, const std::set<std::string>& allowed);
  Status ReadRoles(const YAML::Node& map, JobSpec* spec);
  Status ReadAutoscale(const YAML::Node& a, JobSpec* spec);
  Status ReadInputs(const YAML::Node& ins, JobSpec* spec);
  StatusOr<std::string> RelativePath(std::string path, const std::string& field);
  Status ReadResources(const YAML::Node& r, JobSpec* spec);
  Status ReadIo(const YAML::Node& io, JobSpec::Io* out);

  size_t expanded_ = 0;
};

StatusOr<std::string> SpecReader::Text(const YAML::Node& n, const std::string& field) {
  const std::string& s = n.Scalar();
  // Counted before anything else is done with it: 100k aliases of one 100 KB
  // string are 10 GB of work.
  expanded_ += s.size();
  if (expanded_ > kMaxSpecExpandedBytes) {
    return InvalidArgument(fmt::format("spec: expands to more than {} MiB (YAML aliases?)",
                                       kMaxSpecExpandedBytes >> 20));
  }
  if (const size_t bad = InvalidUtf8At(s); bad != std::string::npos) {
    return InvalidArgument(fmt::format("{}: not valid UTF-8 (byte 0x{:02x} at offset {})", field,
                                       static_cast<unsigned char>(s[bad]), bad));
  }
  if (s.find('\0') != std::string::npos) return InvalidArgument(field + ": contains a NUL byte");
  return s;
}

StatusOr<std::string> SpecReader::GetString(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) return InvalidArgument(fmt::format("{}: must be a string, got {}", field, Quote(n)));
  return Text(n, field);
}

StatusOr<int64_t> SpecReader::GetInt(const YAML::Node& n, const std::string& field, int64_t lo, int64_t hi) {
  if (!n.IsScalar()) return InvalidArgument(fmt::format("{}: must be an integer, got {}", field, Quote(n)));
  const Int v = ToInt(n.Scalar());
  if (v.result == Int::kOutOfRange) return InvalidArgument(fmt::format("{}: {} is out of range", field, Quote(n)));
  if (v.result != Int::kOk) return InvalidArgument(fmt::format("{}: {} is not an integer", field, Quote(n)));
  if (v.value < lo || v.value > hi) {
    return InvalidArgument(fmt::format("{}: must be between {} and {}, got {}", field, lo, hi, v.value));
  }
  return v.value;
}

StatusOr<std::string> SpecReader::Key(const YAML::Node& key, const std::string& map_field,
                                      std::set<std::string>* seen) {
  if (!key.IsScalar()) return InvalidArgument(fmt::format("{}: keys must be strings, got {}", map_field, Quote(key)));
  RM_ASSIGN_OR_RETURN(std::string k, Text(key, fmt::format("{}.{}", map_field, Printable(key.Scalar()))));
  if (!seen->insert(k).second) return InvalidArgument(fmt::format("{}.{}: given twice", map_field, Printable(k)));
  return k;
}

Status SpecReader::CheckKeys(const YAML::Node& map, const std::string& prefix,
                             const std::set<std::string>& allowed) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument(
          fmt::format("{}{}: unknown field (expected one of: {})", prefix, Printable(key), list));
    }
    if (!seen.insert(key).second) return InvalidArgument(fmt::format("{}{}: given twice", prefix, key));
  }
  return Status::Ok();
}

Status SpecReader::ReadIo(const YAML::Node& io, JobSpec::Io* out) {
  if (!io.IsMap()) return InvalidArgument("resources.io: must be a mapping, got " + Quote(io));
  RM_RETURN_IF_ERROR(CheckKeys(io, "resources.io.", {"read_bps", "write_bps", "read_iops", "write_iops"}));
  for (const auto& [key, dest] : {std::pair{"read_bps", &out->read_bps}, std::pair{"write_bps", &out->write_bps}}) {
    if (!io[key]) continue;
    const YAML::Node& n = io[key];
    const std::string field = std::string("resources.io.") + key;
    auto bytes = n.IsScalar() ? ParseBytes(n.Scalar()) : std::nullopt;
    if (!bytes) return InvalidArgument(fmt::format("{}: {} is not a size per second (use e.g. 100Mi)", field, Quote(n)));
    if (*bytes < kMinIoBytesPerSecond) {
      return InvalidArgument(fmt::format("{}: must be at least {} per second, got {}", field,
                                         FormatBytes(kMinIoBytesPerSecond), Printable(n.Scalar())));
    }
    *dest = *bytes;
  }
  for (const auto& [key, dest] : {std::pair{"read_iops", &out->read_iops}, std::pair{"write_iops", &out->write_iops}}) {
    if (!io[key]) continue;
    RM_ASSIGN_OR_RETURN(*dest, GetInt(io[key], std::string("resources.io.") + key, kMinIops, kMaxIops));
  }
  return Status::Ok();
}

Status SpecReader::ReadResources(const YAML::Node& r, JobSpec* spec) {
  if (!r.IsMap()) return InvalidArgument("resources: must be a mapping, got " + Quote(r));
  RM_RETURN_IF_ERROR(CheckKeys(r, "resources.", {"cpu", "memory", "disk", "gpu", "gpu_type", "gpu_throughput", "pids", "io"}));
  if (r["io"]) RM_RETURN_IF_ERROR(ReadIo(r["io"], &spec->io));
  if (r["pids"]) {
    RM_ASSIGN_OR_RETURN(spec->pids, GetInt(r["pids"], "resources.pids", 16, kMaxPids));
  }
  if (r["cpu"]) {
    const YAML::Node& c = r["cpu"];
    if (!c.IsScalar()) return InvalidArgument("resources.cpu: must be a number, got " + Quote(c));
    if (!c.Scalar().empty() && c.Scalar()[0] == '-') {
      return InvalidArgument(fmt::format("resources.cpu: must be > 0, got {}", Printable(c.Scalar())));
    }
    auto milli = ParseCpuMilli(c.Scalar());
    if (!milli) {
      return InvalidArgument(fmt::format("resources.cpu: {} is not a CPU quantity (use e.g. 2, 0.5 or 500m)",
                                         Quote(c)));
    }
    if (*milli <= 0) {
      return InvalidArgument(fmt::format("resources.cpu: must be > 0, got {}", Printable(c.Scalar())));
    }
    spec->cpu_milli = *milli;
  }
  if (r["memory"]) {
    // It is the task's limit: below this, no runtime starts (runc cannot make its cgroup).
    RM_ASSIGN_OR_RETURN(spec->memory_bytes, GetSize(r["memory"], "resources.memory", kMinMemoryBytes,
                                                    "the least a task can start in"));
  }
  if (r["disk"]) {
    RM_ASSIGN_OR_RETURN(spec->disk_bytes, GetSize(r["disk"], "resources.disk", kMinDiskBytes,
                                                  "the least a task's files need"));
  }
  if (r["gpu"]) {
    RM_ASSIGN_OR_RETURN(int64_t g, GetInt(r["gpu"], "resources.gpu", 0, 64));
    spec->gpus = static_cast<int>(g);
  }
  if (r["gpu_type"]) {
    const YAML::Node& t = r["gpu_type"];
    if (t.IsSequence()) {
      size_t i = 0;
      for (auto it = t.begin(); it != t.end(); ++it, ++i) {
        RM_ASSIGN_OR_RETURN(std::string one, GetString(*it, fmt::format("resources.gpu_type[{}]", i)));
        if (one.empty()) return InvalidArgument(fmt::format("resources.gpu_type[{}]: must not be empty", i));
        spec->gpu_types.push_back(std::move(one));
      }
      if (spec->gpu_types.empty()) return InvalidArgument("resources.gpu_type: an empty list accepts no GPU");
    } else {
      RM_ASSIGN_OR_RETURN(std::string one, GetString(t, "resources.gpu_type"));
      if (!one.empty()) spec->gpu_types.push_back(std::move(one));
    }
    if (spec->gpus == 0) return InvalidArgument("resources.gpu_type: set, but resources.gpu is 0");
  }
  if (r["gpu_throughput"]) {
    const YAML::Node& t = r["gpu_throughput"];
    if (!t.IsMap()) return InvalidArgument("resources.gpu_throughput: must map GPU types to speeds, got " + Quote(t));
    std::set<std::string> seen;
    for (auto it = t.begin(); it != t.end(); ++it) {
      RM_ASSIGN_OR_RETURN(std::string type, Key(it->first, "resources.gpu_throughput", &seen));
      if (type.empty()) return InvalidArgument("resources.gpu_throughput: GPU types must be non-empty strings");
      const std::string field = "resources.gpu_throughput." + Printable(type);
      double v = -1;
      const YAML::Node speed = it->second;
      if (speed.IsScalar()) {
        std::string_view s = speed.Scalar();
        if (!s.empty() && s[0] == '+') s.remove_prefix(1);
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        // inf would be stored as JSON null; the spec must read back as it was given.
        if (s.empty() || s[0] == '-' || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) v = -1;
      }
      if (!(v > 0)) return InvalidArgument(fmt::format("{}: must be a number > 0, got {}", field, Quote(speed)));
      spec->gpu_throughput[type] = v;
    }
    if (spec->gpus == 0) return InvalidArgument("resources.gpu_throughput: set, but resources.gpu is 0");
  }
  return Status::Ok();
}

// A duration: digits with an optional unit (s, m, h, d), between 1 s and max_s.
StatusOr<int64_t> DurationMs(const YAML::Node& t, const std::string& field, int64_t max_s) {
  const std::string_view text = t.IsScalar() ? std::string_view(t.Scalar()) : std::string_view();
  size_t digits = 0;
  while (digits < text.size() && IsDigit(text[digits])) ++digits;
  const std::string_view unit = text.substr(digits);
  if (digits == 0 || !(unit.empty() || unit == "s" || unit == "m" || unit == "h" || unit == "d")) {
    return InvalidArgument(fmt::format("{}: {} is not a duration (use e.g. 90m, 2h or 3600)", field, Quote(t)));
  }
  const int64_t unit_s = unit == "d" ? 86400 : unit == "h" ? 3600 : unit == "m" ? 60 : 1;
  const Int parsed = ToInt(text.substr(0, digits));
  const int64_t n = parsed.result == Int::kOk ? parsed.value : -1;
  if (n <= 0 || n > max_s / unit_s) {
    const std::string most = max_s % 86400 == 0 ? fmt::format("{}d", max_s / 86400) : fmt::format("{}s", max_s);
    return InvalidArgument(fmt::format("{}: must be between 1s and {}, got {}", field, most, Printable(text)));
  }
  return n * unit_s * 1000;
}

// A finite number >= 0 (a percentage, a rate).
StatusOr<double> NonNegative(const YAML::Node& n, const std::string& field) {
  double v = -1;
  if (n.IsScalar()) {
    std::string_view s = n.Scalar();
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || s[0] == '-' || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) v = -1;
  }
  if (!(v >= 0)) return InvalidArgument(fmt::format("{}: must be a number >= 0, got {}", field, Quote(n)));
  return v;
}

Status SpecReader::ReadAutoscale(const YAML::Node& a, JobSpec* spec) {
  if (!a.IsMap()) return InvalidArgument("autoscale: must be a mapping (metric, scale_up_above, scale_down_below, window, cooldown), got " + Quote(a));
  RM_RETURN_IF_ERROR(CheckKeys(a, "autoscale.", {"metric", "scale_up_above", "scale_down_below", "window", "cooldown"}));
  if (!spec->elastic()) return InvalidArgument("autoscale: needs an elastic job (replicas: {min: N, max: M} with M > N)");
  JobSpec::Autoscale as;
  if (!a["metric"]) return InvalidArgument("autoscale.metric: missing (cpu, gpu, memory or samples_per_s)");
  RM_ASSIGN_OR_RETURN(as.metric, GetString(a["metric"], "autoscale.metric"));
  if (as.metric != "cpu" && as.metric != "gpu" && as.metric != "memory" && as.metric != "samples_per_s") {
    return InvalidArgument(fmt::format("autoscale.metric: must be cpu, gpu, memory or samples_per_s, got \"{}\"",
                                       Printable(as.metric)));
  }
  if (as.metric == "gpu" && spec->gpus == 0) return InvalidArgument("autoscale.metric: gpu, but resources.gpu is 0");
  if (a["scale_up_above"]) {
    RM_ASSIGN_OR_RETURN(as.scale_up_above, NonNegative(a["scale_up_above"], "autoscale.scale_up_above"));
  }
  if (a["scale_down_below"]) {
    RM_ASSIGN_OR_RETURN(as.scale_down_below, NonNegative(a["scale_down_below"], "autoscale.scale_down_below"));
  }
  if (as.scale_down_below >= as.scale_up_above) {
    return InvalidArgument(fmt::format("autoscale.scale_down_below: must be below scale_up_above ({}), got {}",
                                       as.scale_up_above, as.scale_down_below));
  }
  if (a["window"]) {
    RM_ASSIGN_OR_RETURN(as.window_ms, DurationMs(a["window"], "autoscale.window", 86400));
  }
  if (a["cooldown"]) {
    RM_ASSIGN_OR_RETURN(as.cooldown_ms, DurationMs(a["cooldown"], "autoscale.cooldown", 86400));
  }
  spec->autoscale = as;
  return Status::Ok();
}

// `replicas: {chief: 1, ps: 1, worker: 2}`: roles (job_roles.h). {worker: N}
// alone is replicas: N.
Status SpecReader::ReadRoles(const YAML::Node& map, JobSpec* spec) {
  if (map.size() == 0) return InvalidArgument("replicas: an empty mapping (give a count, roles or {min, max})");
  std::vector<JobRole> roles;
  std::set<std::string> seen;
  int64_t total = 0;
  for (auto it = map.begin(); it != map.end(); ++it) {
    RM_ASSIGN_OR_RETURN(std::string name, Key(it->first, "replicas", &seen));
    RM_ASSIGN_OR_RETURN(int64_t n, GetInt(it->second, "replicas." + Printable(name, 40), 1, kMaxReplicas));
    total += n;
    roles.push_back({Printable(name, 40), static_cast<int>(n)});
  }
  if (total > kMaxReplicas) {
    return InvalidArgument(fmt::format("replicas: {} tasks in all, more than {}", total, kMaxReplicas));
  }
  RM_ASSIGN_OR_RETURN(roles, CheckRoles(std::move(roles)));
  spec->replicas = static_cast<int>(total);
  if (roles.size() == 1 && roles[0].name == "worker") return Status::Ok();  // replicas: N, for any kind
  if (spec->kind != "distributed") {
    return InvalidArgument(fmt::format("replicas: roles need kind: distributed, not {}", spec->kind));
  }
  spec->roles = std::move(roles);
  return Status::Ok();
}

StatusOr<JobSpec> SpecReader::Read(const YAML::Node& root) {
  if (!root.IsMap()) return InvalidArgument("spec: must be a mapping of fields, got " + Quote(root));
  RM_RETURN_IF_ERROR(CheckKeys(root, "", {"name", "kind", "command", "env", "image", "resources", "replicas",
                                          "max_restarts", "priority", "time_limit", "node_selector", "working_dir", "keep_checkpoints",
                                          "inputs", "outputs", "executor", "network", "autoscale", "idle_timeout"}));
  JobSpec spec;
  if (root["name"]) {
    RM_ASSIGN_OR_RETURN(spec.name, GetString(root["name"], "name"));
    if (!IsJobName(spec.name)) {
      return InvalidArgument(fmt::format(
          "name: \"{}\" is not a valid name (letters, digits, '.', '_', '-'; at most 63)", Printable(spec.name)));
    }
  }
  if (root["kind"]) {
    RM_ASSIGN_OR_RETURN(spec.kind, GetString(root["kind"], "kind"));
    if (spec.kind != "dev" && spec.kind != "train" && spec.kind != "distributed") {
      return InvalidArgument(fmt::format("kind: \"{}\" is not a job kind (expected dev, train or distributed)",
                                         Printable(spec.kind)));
    }
  }
  const YAML::Node& cmd = root["command"];
  if (!cmd && spec.kind != "dev") {
    return InvalidArgument("command: required (a string run by /bin/sh, or a list of arguments)");
  }
  if (!cmd) {
    // kind dev without a command: a notebook (JobSpec::notebook).
  } else if (cmd.IsScalar()) {
    RM_ASSIGN_OR_RETURN(std::string line, Text(cmd, "command"));
    if (line.empty()) return InvalidArgument("command: must not be empty");
    if (line.size() > kMaxArgBytes) {
      return InvalidArgument(fmt::format("command: {} bytes, longer than one argument can be ({}); put the script "
                                         "in a file", line.size(), kMaxArgBytes));
    }
    spec.command = {"/bin/sh", "-c", std::move(line)};
  } else if (cmd.IsSequence()) {
    size_t i = 0;
    for (auto it = cmd.begin(); it != cmd.end(); ++it, ++i) {
      const std::string field = fmt::format("command[{}]", i);
      RM_ASSIGN_OR_RETURN(std::string arg, GetString(*it, field));
      if (arg.size() > kMaxArgBytes) {
        return InvalidArgument(
            fmt::format("{}: {} bytes, longer than one argument can be ({})", field, arg.size(), kMaxArgBytes));
      }
      spec.command.push_back(std::move(arg));
    }
    if (spec.command.empty()) return InvalidArgument("command: must not be an empty list");
    if (spec.command[0].empty()) return InvalidArgument("command[0]: the program must not be empty");
  } else {
    return InvalidArgument("command: must be a string or a list of strings, got " + Quote(cmd));
  }
  if (root["env"]) {
    const YAML::Node& env = root["env"];
    if (!env.IsMap()) return InvalidArgument("env: must be a mapping of NAME: value, got " + Quote(env));
    std::set<std::string> seen;
    for (auto it = env.begin(); it != env.end(); ++it) {
      const YAML::Node k = it->first;  // a handle; `it->` is a proxy that dies with the expression
      if (!k.IsScalar() || !IsVariableName(k.Scalar())) {
        return InvalidArgument(
            fmt::format("env.{}: not a valid variable name", k.IsScalar() && !k.Scalar().empty()
                                                                  ? Printable(k.Scalar()) : "?"));
      }
      RM_ASSIGN_OR_RETURN(std::string key, Key(k, "env", &seen));
      const std::string field = "env." + Printable(key);
      RM_ASSIGN_OR_RETURN(std::string value, GetString(it->second, field));
      if (key.size() + 1 + value.size() > kMaxArgBytes) {
        return InvalidArgument(fmt::format("{}: {} bytes with its name, longer than one variable can be ({})", field,
                                           key.size() + 1 + value.size(), kMaxArgBytes));
      }
      spec.env[key] = std::move(value);
    }
  }
  if (root["image"]) {
    RM_ASSIGN_OR_RETURN(spec.image, GetString(root["image"], "image"));
    if (spec.image.empty()) return InvalidArgument("image: must not be empty (leave it out to run the command as a process)");
    if (StatusOr<ImageRef> ref = ParseImageRef(spec.image); !ref.ok()) {
      return InvalidArgument(fmt::format("image: \"{}\" is not an image reference ({}; e.g. torch, "
                                         "registry.example:5000/lab/torch:2.1 or name@sha256:<64 hex>)",
                                         Printable(spec.image, 80), ref.status().message()));
    }
  }
  if (root["executor"]) {
    RM_ASSIGN_OR_RETURN(spec.executor, GetString(root["executor"], "executor"));
    if (spec.executor != "" && spec.executor != "process" && spec.executor != "runc" && spec.executor != "docker") {
      return InvalidArgument(fmt::format("executor: \"{}\" is not an executor (expected process, runc or docker)",
                                         Printable(spec.executor, 40)));
    }
  }
  if (spec.executor == "process" && !spec.image.empty()) {
    return InvalidArgument("executor: process runs no image; drop image: or choose runc or docker");
  }
  if ((spec.executor == "runc" || spec.executor == "docker") && spec.image.empty()) {
    return InvalidArgument(fmt::format("image: required with executor: {} (e.g. image: base)", spec.executor));
  }
  if (root["network"]) {
    RM_ASSIGN_OR_RETURN(spec.network, GetString(root["network"], "network"));
    if (spec.network != "host" && spec.network != "none" && spec.network != "overlay") {
      return InvalidArgument(fmt::format("network: \"{}\" is not a network mode (expected overlay, host or none)",
                                         Printable(spec.network, 40)));
    }
  }
  if (spec.network == "overlay" && spec.image.empty()) {
    return InvalidArgument("network: overlay joins containers; add image: (e.g. image: torch)");
  }
  if (spec.network == "overlay" && !spec.executor.empty() && spec.executor != "runc") {
    return InvalidArgument(fmt::format("network: overlay runs under runc, not executor: {}", spec.executor));
  }
  if (root["resources"]) RM_RETURN_IF_ERROR(ReadResources(root["resources"], &spec));
  if (root["replicas"] && root["replicas"].IsMap() && !root["replicas"]["min"] && !root["replicas"]["max"]) {
    RM_RETURN_IF_ERROR(ReadRoles(root["replicas"], &spec));
  } else if (root["replicas"] && root["replicas"].IsMap()) {
    const YAML::Node& r = root["replicas"];
    RM_RETURN_IF_ERROR(CheckKeys(r, "replicas.", {"min", "max"}));
    if (!r["min"] || !r["max"]) return InvalidArgument("replicas: an elastic range needs both min and max");
    RM_ASSIGN_OR_RETURN(int64_t lo, GetInt(r["min"], "replicas.min", 1, kMaxReplicas));
    RM_ASSIGN_OR_RETURN(int64_t hi, GetInt(r["max"], "replicas.max", 1, kMaxReplicas));
    if (hi < lo) return InvalidArgument(fmt::format("replicas.max: must be >= replicas.min ({}), got {}", lo, hi));
    if (spec.kind != "distributed") {
      return InvalidArgument(fmt::format("replicas: an elastic range needs kind: distributed, not {}", spec.kind));
    }
    spec.replicas = static_cast<int>(lo);
    if (hi > lo) {  // {min: 4, max: 4} is a fixed size, as it reads back from the store
      spec.min_replicas = static_cast<int>(lo);
      spec.max_replicas = static_cast<int>(hi);
    }
  } else if (root["replicas"]) {
    RM_ASSIGN_OR_RETURN(int64_t r, GetInt(root["replicas"], "replicas", 1, kMaxReplicas));
    spec.replicas = static_cast<int>(r);
  }
  if (spec.kind == "dev" && spec.replicas != 1) {
    return InvalidArgument(fmt::format("replicas: a dev job has exactly 1 replica, got {}", spec.replicas));
  }
  if (root["keep_checkpoints"]) {
    RM_ASSIGN_OR_RETURN(int64_t k, GetInt(root["keep_checkpoints"], "keep_checkpoints", 0, 1000));
    spec.keep_checkpoints = static_cast<int>(k);
  }
  if (root["max_restarts"]) {
    RM_ASSIGN_OR_RETURN(int64_t r, GetInt(root["max_restarts"], "max_restarts", 0, kMaxRestarts));
    spec.max_restarts = static_cast<int>(r);
  }
  if (root["priority"]) {
    RM_ASSIGN_OR_RETURN(int64_t p, GetInt(root["priority"], "priority", -kMaxPriority, kMaxPriority));
    spec.priority = static_cast<int>(p);
  }
  if (root["node_selector"]) {
    const YAML::Node& sel = root["node_selector"];
    if (!sel.IsMap()) return InvalidArgument("node_selector: must map label names to values, got " + Quote(sel));
    std::set<std::string> seen;
    for (auto it = sel.begin(); it != sel.end(); ++it) {
      if (!it->first.IsScalar() || it->first.Scalar().empty()) {
        return InvalidArgument("node_selector: label names must be non-empty strings");
      }
      RM_ASSIGN_OR_RETURN(std::string key, Key(it->first, "node_selector", &seen));
      RM_ASSIGN_OR_RETURN(spec.node_selector[key], GetString(it->second, "node_selector." + Printable(key)));
    }
  }
  if (root["time_limit"]) {
    RM_ASSIGN_OR_RETURN(spec.time_limit_ms, DurationMs(root["time_limit"], "time_limit", 366 * 86400));
  }
  if (spec.notebook() && (!spec.image.empty() || (!spec.executor.empty() && spec.executor != "process"))) {
    return InvalidArgument(fmt::format("{}: a notebook (kind: dev with no command) runs on the process executor for now",
                                       spec.image.empty() ? "executor" : "image"));
  }
  if (root["idle_timeout"]) {
    if (!spec.notebook()) return InvalidArgument("idle_timeout: only a notebook (kind: dev with no command) has one");
    const YAML::Node& t = root["idle_timeout"];
    if (t.IsScalar() && t.Scalar() == "0") {
      spec.idle_timeout_ms = 0;
    } else {
      RM_ASSIGN_OR_RETURN(spec.idle_timeout_ms, DurationMs(t, "idle_timeout", 366 * 86400));
    }
  }
  if (root["autoscale"]) RM_RETURN_IF_ERROR(ReadAutoscale(root["autoscale"], &spec));
  if (root["working_dir"]) {
    RM_ASSIGN_OR_RETURN(spec.working_dir, GetString(root["working_dir"], "working_dir"));
    if (spec.working_dir.empty() || spec.working_dir[0] != '/') {
      return InvalidArgument(
          fmt::format("working_dir: \"{}\" must be an absolute path", Printable(spec.working_dir)));
    }
    if (!IsDisplayText(spec.working_dir)) {
      return InvalidArgument(fmt::format("working_dir: \"{}\" has control characters", Printable(spec.working_dir)));
    }
    if (spec.working_dir.size() > kMaxPathBytes) {
      return InvalidArgument(fmt::format("working_dir: {} bytes, longer than a path can be ({})",
                                         spec.working_dir.size(), kMaxPathBytes));
    }
  }
  if (root["inputs"]) RM_RETURN_IF_ERROR(ReadInputs(root["inputs"], &spec));
  if (root["outputs"]) {
    const YAML::Node& outs = root["outputs"];
    if (!outs.IsSequence()) return InvalidArgument("outputs: must be a list of paths in the task's work directory, got " + Quote(outs));
    if (outs.size() > kMaxOutputs) return InvalidArgument(fmt::format("outputs: {} entries, more than {}", outs.size(), kMaxOutputs));
    spec.outputs.clear();
    size_t i = 0;
    for (auto it = outs.begin(); it != outs.end(); ++it, ++i) {
      const std::string field = fmt::format("outputs[{}]", i);
      RM_ASSIGN_OR_RETURN(std::string path, GetString(*it, field));
      RM_ASSIGN_OR_RETURN(path, RelativePath(path, field));
      spec.outputs.push_back(std::move(path));
    }
  }
  if (spec.name.empty()) spec.name = spec.kind;
  return spec;
}

Status SpecReader::ReadInputs(const YAML::Node& ins, JobSpec* spec) {
  if (!ins.IsSequence()) return InvalidArgument("inputs: must be a list of files paths or {from, to} mappings, got " + Quote(ins));
  if (ins.size() > kMaxInputs) return InvalidArgument(fmt::format("inputs: {} entries, more than {}", ins.size(), kMaxInputs));
  size_t i = 0;
  std::set<std::string> targets;
  for (auto it = ins.begin(); it != ins.end(); ++it, ++i) {
    const std::string field = fmt::format("inputs[{}]", i);
    JobInput in;
    if (it->IsMap()) {
      RM_RETURN_IF_ERROR(CheckKeys(*it, field + ".", {"from", "to"}));
      if (!(*it)["from"]) return InvalidArgument(field + ".from: required (a files path, e.g. datasets/fashion-mnist)");
      RM_ASSIGN_OR_RETURN(in.from, GetString((*it)["from"], field + ".from"));
      if ((*it)["to"]) {
        RM_ASSIGN_OR_RETURN(in.to, GetString((*it)["to"], field + ".to"));
      }
    } else {
      RM_ASSIGN_OR_RETURN(in.from, GetString(*it, field));
    }
    const std::string from_field = it->IsMap() ? field + ".from" : field;
    while (!in.from.empty() && in.from.back() == '/') in.from.pop_back();
    if (Status st = ValidateFilesKey(in.from); !st.ok()) {
      return InvalidArgument(fmt::format("{}: {}", from_field, st.message()));
    }
    if (in.to.empty()) in.to = in.from.substr(in.from.rfind('/') + 1);
    RM_ASSIGN_OR_RETURN(in.to, RelativePath(in.to, it->IsMap() ? field + ".to" : field));
    if (in.to == "checkpoints" || in.to.rfind("checkpoints/", 0) == 0) {
      return InvalidArgument(fmt::format("{}: checkpoints/ is where the job's checkpoint is staged; stage inputs elsewhere", field));
    }
    for (const std::string& other : targets) {
      // One inside the other: the second would land in (or over) the first.
      const auto within = [](const std::string& a, const std::string& b) {
        return a == b || (b.size() > a.size() && b.compare(0, a.size(), a) == 0 && b[a.size()] == '/');
      };
      if (within(other, in.to) || within(in.to, other)) {
        return InvalidArgument(fmt::format("{}: a second input staged at {} (overlaps {})", field, Printable(in.to), Printable(other)));
      }
    }
    targets.insert(in.to);
    spec->inputs.push_back(std::move(in));
  }
  return Status::Ok();
}

// A path inside the task's work directory: relative, no "." or ".." or empty
// segments (a trailing '/' is dropped), no backslash, at most 1,024 bytes.
StatusOr<std::string> SpecReader::RelativePath(std::string path, const std::string& field) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("{}: \"{}\" {}", field, Printable(path, 200), why));
  };
  if (path.empty()) return bad("is empty");
  if (path.size() > 1024) return bad("is longer than 1024 bytes");
  if (path[0] == '/') return bad("must be relative to the task's work directory");
  if (path.find('\\') != std::string::npos) return bad("holds a backslash");
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    const std::string_view seg(path.data() + start, slash - start);
    if (seg.empty() || seg == "." || seg == "..") return bad("holds an empty, \".\" or \"..\" segment");
    start = slash + 1;
  }
  // The rules of a files path too (no control characters, segments of at
  // most 250 bytes): outputs are uploaded under their names.
  if (Status st = ValidateFilesKey(path); !st.ok()) return InvalidArgument(fmt::format("{}: {}", field, st.message()));
  return path;
}

StatusOr<JobSpec> Parse(const std::string& text) {
  if (text.size() > kMaxSpecBytes) {
    return InvalidArgument(fmt::format("spec: {} bytes, more than the limit of {} ({} MiB)", text.size(),
                                       kMaxSpecBytes, kMaxSpecBytes >> 20));
  }
  const auto too_deep = [](int line) {
    return InvalidArgument(
        fmt::format("spec: nested more than {} levels deep (line {}); a job spec needs 3", kMaxSpecDepth, line));
  };
  if (const std::optional<int> line = FlowTooDeepAt(text, kMaxSpecDepth)) return too_deep(*line);
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    YamlDepthLimit depth(kMaxSpecDepth);
    if (parser.HandleNextDocument(depth) && parser.HandleNextDocument(depth)) {
      return InvalidArgument("spec: more than one YAML document (---): submit one job per spec");
    }
  } catch (const YamlTooDeep& e) {
    return too_deep(e.line);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(YamlError(e));
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(YamlError(e));
  }
  try {
    return SpecReader().Read(root);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("spec: {}", Printable(e.what(), 200)));
  }
}

}  // namespace

StatusOr<JobSpec> ParseJobSpec(const std::string& text) {
  StatusOr<JobSpec> spec = [&]() -> StatusOr<JobSpec> {
    try {
      return Parse(text);
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("spec: out of memory reading it");
    } catch (const std::exception& e) {
      return Internal(fmt::format("spec: {}", Printable(e.what(), 200)));
    }
  }();
  // Every message names the field and quotes the value through Printable;
  // this keeps it so for the ones that quote yaml-cpp: one line, valid UTF-8.
  if (!spec.ok()) return Status(spec.status().code(), Printable(spec.status().message(), 1024));
  return spec;
}

}  // namespace ringmaster::protocol
