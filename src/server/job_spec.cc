#include "server/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <regex>
#include <set>

#include <fmt/format.h>

#include "common/units.h"

namespace ringmaster::server {
namespace {

std::string Quote(const YAML::Node& n) {
  if (n.IsScalar()) return "\"" + n.Scalar() + "\"";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}

Status CheckKeys(const YAML::Node& map, const std::string& prefix, const std::set<std::string>& allowed) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return InvalidArgument(fmt::format("{}{}: unknown field (expected one of: {})", prefix, key, list));
    }
  }
  return Status::Ok();
}

StatusOr<std::string> GetString(const YAML::Node& n, const std::string& field) {
  if (!n.IsScalar()) return InvalidArgument(fmt::format("{}: must be a string, got {}", field, Quote(n)));
  return n.Scalar();
}

StatusOr<int64_t> GetInt(const YAML::Node& n, const std::string& field, int64_t lo, int64_t hi) {
  if (!n.IsScalar()) return InvalidArgument(fmt::format("{}: must be an integer, got {}", field, Quote(n)));
  static const std::regex kInt(R"(^[+-]?[0-9]+$)");
  if (!std::regex_match(n.Scalar(), kInt)) {
    return InvalidArgument(fmt::format("{}: {} is not an integer", field, Quote(n)));
  }
  int64_t v;
  try {
    v = std::stoll(n.Scalar());
  } catch (...) {
    return InvalidArgument(fmt::format("{}: {} is out of range", field, Quote(n)));
  }
  if (v < lo || v > hi) {
    return InvalidArgument(fmt::format("{}: must be between {} and {}, got {}", field, lo, hi, v));
  }
  return v;
}

Status ParseResources(const YAML::Node& r, JobSpec* spec) {
  if (!r.IsMap()) return InvalidArgument("resources: must be a mapping, got " + Quote(r));
  RM_RETURN_IF_ERROR(CheckKeys(r, "resources.", {"cpu", "memory", "gpu", "gpu_type", "gpu_throughput"}));
  if (r["cpu"]) {
    const YAML::Node& c = r["cpu"];
    if (!c.IsScalar()) return InvalidArgument("resources.cpu: must be a number, got " + Quote(c));
    if (!c.Scalar().empty() && c.Scalar()[0] == '-') {
      return InvalidArgument(fmt::format("resources.cpu: must be > 0, got {}", c.Scalar()));
    }
    auto milli = ParseCpuMilli(c.Scalar());
    if (!milli) {
      return InvalidArgument(fmt::format("resources.cpu: {} is not a CPU quantity (use e.g. 2, 0.5 or 500m)",
                                         Quote(c)));
    }
    if (*milli <= 0) return InvalidArgument(fmt::format("resources.cpu: must be > 0, got {}", c.Scalar()));
    spec->cpu_milli = *milli;
  }
  if (r["memory"]) {
    const YAML::Node& m = r["memory"];
    if (!m.IsScalar()) return InvalidArgument("resources.memory: must be a size, got " + Quote(m));
    auto bytes = ParseBytes(m.Scalar());
    if (!bytes) {
      return InvalidArgument(fmt::format("resources.memory: {} is not a size (use e.g. 512Mi or 4Gi)", Quote(m)));
    }
    if (*bytes <= 0) return InvalidArgument(fmt::format("resources.memory: must be > 0, got {}", m.Scalar()));
    spec->memory_bytes = *bytes;
  }
  if (r["gpu"]) {
    RM_ASSIGN_OR_RETURN(int64_t g, GetInt(r["gpu"], "resources.gpu", 0, 64));
    spec->gpus = static_cast<int>(g);
  }
  if (r["gpu_type"]) {
    const YAML::Node& t = r["gpu_type"];
    if (t.IsSequence()) {
      for (size_t i = 0; i < t.size(); ++i) {
        RM_ASSIGN_OR_RETURN(std::string one, GetString(t[i], fmt::format("resources.gpu_type[{}]", i)));
        if (one.empty()) return InvalidArgument(fmt::format("resources.gpu_type[{}]: must not be empty", i));
        spec->gpu_types.push_back(one);
      }
      if (spec->gpu_types.empty()) return InvalidArgument("resources.gpu_type: an empty list accepts no GPU");
    } else {
      RM_ASSIGN_OR_RETURN(std::string one, GetString(t, "resources.gpu_type"));
      if (!one.empty()) spec->gpu_types.push_back(one);
    }
    if (spec->gpus == 0) return InvalidArgument("resources.gpu_type: set, but resources.gpu is 0");
  }
  if (r["gpu_throughput"]) {
    const YAML::Node& t = r["gpu_throughput"];
    if (!t.IsMap()) return InvalidArgument("resources.gpu_throughput: must map GPU types to speeds, got " + Quote(t));
    for (auto it = t.begin(); it != t.end(); ++it) {
      const std::string type = it->first.Scalar();
      const std::string field = "resources.gpu_throughput." + type;
      double v = 0;
      try {
        size_t used = 0;
        v = it->second.IsScalar() ? std::stod(it->second.Scalar(), &used) : -1;
        if (used != it->second.Scalar().size()) v = -1;
      } catch (...) {
        v = -1;
      }
      if (!(v > 0)) return InvalidArgument(fmt::format("{}: must be a number > 0, got {}", field, Quote(it->second)));
      spec->gpu_throughput[type] = v;
    }
    if (spec->gpus == 0) return InvalidArgument("resources.gpu_throughput: set, but resources.gpu is 0");
  }
  return Status::Ok();
}

StatusOr<JobSpec> ParseRoot(const YAML::Node& root) {
  if (!root.IsMap()) return InvalidArgument("spec: must be a mapping of fields, got " + Quote(root));
  RM_RETURN_IF_ERROR(CheckKeys(root, "", {"name", "kind", "command", "env", "image", "resources", "replicas",
                                          "max_restarts", "priority", "time_limit", "node_selector", "working_dir"}));
  JobSpec spec;
  if (root["name"]) {
    RM_ASSIGN_OR_RETURN(spec.name, GetString(root["name"], "name"));
    static const std::regex kName(R"(^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$)");
    if (!std::regex_match(spec.name, kName)) {
      return InvalidArgument(fmt::format(
          "name: \"{}\" is not a valid name (letters, digits, '.', '_', '-'; at most 63)", spec.name));
    }
  }
  if (root["kind"]) {
    RM_ASSIGN_OR_RETURN(spec.kind, GetString(root["kind"], "kind"));
    if (spec.kind != "dev" && spec.kind != "train" && spec.kind != "distributed") {
      return InvalidArgument(
          fmt::format("kind: \"{}\" is not a job kind (expected dev, train or distributed)", spec.kind));
    }
  }
  const YAML::Node& cmd = root["command"];
  if (!cmd) return InvalidArgument("command: required (a string run by /bin/sh, or a list of arguments)");
  if (cmd.IsScalar()) {
    if (cmd.Scalar().empty()) return InvalidArgument("command: must not be empty");
    spec.command = {"/bin/sh", "-c", cmd.Scalar()};
  } else if (cmd.IsSequence()) {
    if (cmd.size() == 0) return InvalidArgument("command: must not be an empty list");
    for (size_t i = 0; i < cmd.size(); ++i) {
      RM_ASSIGN_OR_RETURN(std::string arg, GetString(cmd[i], fmt::format("command[{}]", i)));
      spec.command.push_back(std::move(arg));
    }
    if (spec.command[0].empty()) return InvalidArgument("command[0]: the program must not be empty");
  } else {
    return InvalidArgument("command: must be a string or a list of strings, got " + Quote(cmd));
  }
  if (root["env"]) {
    const YAML::Node& env = root["env"];
    if (!env.IsMap()) return InvalidArgument("env: must be a mapping of NAME: value, got " + Quote(env));
    static const std::regex kVar(R"(^[A-Za-z_][A-Za-z0-9_]*$)");
    for (auto it = env.begin(); it != env.end(); ++it) {
      std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      if (!std::regex_match(key, kVar)) {
        return InvalidArgument(fmt::format("env.{}: not a valid variable name", key.empty() ? "?" : key));
      }
      RM_ASSIGN_OR_RETURN(spec.env[key], GetString(it->second, "env." + key));
    }
  }
  if (root["image"]) {
    RM_ASSIGN_OR_RETURN(spec.image, GetString(root["image"], "image"));
  }
  if (root["resources"]) RM_RETURN_IF_ERROR(ParseResources(root["resources"], &spec));
  if (root["replicas"] && root["replicas"].IsMap()) {
    const YAML::Node& r = root["replicas"];
    RM_RETURN_IF_ERROR(CheckKeys(r, "replicas.", {"min", "max"}));
    if (!r["min"] || !r["max"]) return InvalidArgument("replicas: an elastic range needs both min and max");
    RM_ASSIGN_OR_RETURN(int64_t lo, GetInt(r["min"], "replicas.min", 1, kMaxReplicas));
    RM_ASSIGN_OR_RETURN(int64_t hi, GetInt(r["max"], "replicas.max", 1, kMaxReplicas));
    if (hi < lo) return InvalidArgument(fmt::format("replicas.max: must be >= replicas.min ({}), got {}", lo, hi));
    if (spec.kind != "distributed") {
      return InvalidArgument(fmt::format("replicas: an elastic range needs kind: distributed, not {}", spec.kind));
    }
    spec.replicas = spec.min_replicas = static_cast<int>(lo);
    spec.max_replicas = static_cast<int>(hi);
  } else if (root["replicas"]) {
    RM_ASSIGN_OR_RETURN(int64_t r, GetInt(root["replicas"], "replicas", 1, kMaxReplicas));
    spec.replicas = static_cast<int>(r);
  }
  if (spec.kind == "dev" && spec.replicas != 1) {
    return InvalidArgument(fmt::format("replicas: a dev job has exactly 1 replica, got {}", spec.replicas));
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
    for (auto it = sel.begin(); it != sel.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      if (key.empty()) return InvalidArgument("node_selector: label names must be non-empty strings");
      RM_ASSIGN_OR_RETURN(spec.node_selector[key], GetString(it->second, "node_selector." + key));
    }
  }
  if (root["time_limit"]) {
    const YAML::Node& t = root["time_limit"];
    static const std::regex kDuration(R"(^([0-9]+)(s|m|h|d)?$)");
    std::smatch m;
    const std::string text = t.IsScalar() ? t.Scalar() : "";
    if (!std::regex_match(text, m, kDuration)) {
      return InvalidArgument(fmt::format("time_limit: {} is not a duration (use e.g. 90m, 2h or 3600)", Quote(t)));
    }
    const int64_t unit_s = m[2] == "d" ? 86400 : m[2] == "h" ? 3600 : m[2] == "m" ? 60 : 1;
    int64_t n = 0;
    try {
      n = std::stoll(m[1]);
    } catch (...) {
      n = -1;
    }
    if (n <= 0 || n > 366LL * 86400 / unit_s) {
      return InvalidArgument(fmt::format("time_limit: must be between 1s and 366d, got {}", text));
    }
    spec.time_limit_ms = n * unit_s * 1000;
  }
  if (root["working_dir"]) {
    RM_ASSIGN_OR_RETURN(spec.working_dir, GetString(root["working_dir"], "working_dir"));
    if (spec.working_dir.empty() || spec.working_dir[0] != '/') {
      return InvalidArgument(fmt::format("working_dir: \"{}\" must be an absolute path", spec.working_dir));
    }
  }
  if (spec.name.empty()) spec.name = spec.kind;
  return spec;
}

}  // namespace

StatusOr<JobSpec> ParseJobSpec(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("spec: not valid YAML or JSON: line {}, column {}: {}", e.mark.line + 1,
                                       e.mark.column + 1, e.msg));
  }
  try {
    return ParseRoot(root);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("spec: {}", e.what()));
  }
}

nlohmann::json JobSpecToJson(const JobSpec& s) {
  nlohmann::json resources = {{"cpu", FormatCpu(s.cpu_milli)}, {"memory", s.memory_bytes},
                              {"gpu", s.gpus}};
  if (!s.gpu_types.empty()) resources["gpu_type"] = s.gpu_types;
  if (!s.gpu_throughput.empty()) resources["gpu_throughput"] = s.gpu_throughput;
  nlohmann::json j = {{"name", s.name},           {"kind", s.kind},
                      {"command", s.command},     {"env", s.env},
                      {"resources", resources},   {"replicas", s.replicas},
                      {"max_restarts", s.max_restarts}, {"priority", s.priority}};
  if (!s.image.empty()) j["image"] = s.image;
  if (!s.working_dir.empty()) j["working_dir"] = s.working_dir;
  if (s.elastic()) j["elastic"] = {{"min", s.min_replicas}, {"max", s.max_replicas}};
  if (!s.node_selector.empty()) j["node_selector"] = s.node_selector;
  if (s.time_limit_ms > 0) j["time_limit"] = std::to_string(s.time_limit_ms / 1000);  // seconds
  return j;
}

StatusOr<JobSpec> JobSpecFromJson(const std::string& spec_json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(spec_json);
  JobSpec s;
  s.name = j.value("name", "");
  s.kind = j.value("kind", "train");
  s.command = j.value("command", std::vector<std::string>{});
  s.env = j.value("env", std::map<std::string, std::string>{});
  s.image = j.value("image", "");
  const auto& r = j.at("resources");
  s.cpu_milli = ParseCpuMilli(r.value("cpu", "1")).value_or(1000);
  s.memory_bytes = r.value("memory", int64_t{512LL << 20});
  s.gpus = r.value("gpu", 0);
  if (r.contains("gpu_type")) {
    const auto& t = r["gpu_type"];  // a string in specs stored before types could be listed
    if (t.is_string() && !t.get<std::string>().empty()) s.gpu_types.push_back(t.get<std::string>());
    if (t.is_array()) s.gpu_types = t.get<std::vector<std::string>>();
  }
  s.gpu_throughput = r.value("gpu_throughput", std::map<std::string, double>{});
  s.replicas = j.value("replicas", 1);
  if (j.contains("elastic")) {
    s.min_replicas = j["elastic"].value("min", s.replicas);
    s.max_replicas = j["elastic"].value("max", s.replicas);
  }
  s.max_restarts = j.value("max_restarts", 0);
  s.priority = j.value("priority", 0);
  s.working_dir = j.value("working_dir", "");
  s.node_selector = j.value("node_selector", std::map<std::string, std::string>{});
  s.time_limit_ms = std::atoll(j.value("time_limit", std::string("0")).c_str()) * 1000;
  return s;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("stored spec: ") + e.what());
  }
}

}  // namespace ringmaster::server
