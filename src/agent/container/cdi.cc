// CDI spec files: the strict parser and the registry of a node's specs.
// The edits' application to runc and Docker is in cdi_apply.cc.
#include "agent/container/cdi.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/files.h"
#include "common/json_limits.h"  // Printable
#include "common/log.h"
#include "common/yaml_depth.h"
#include "common/yaml_scan.h"

namespace ringmaster::agent {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxSpecBytes = 4 << 20;    // nvidia-ctk's specs are tens of KB, a few hundred with MIG
constexpr int kMaxFlowDepth = 32;            // brackets, counted before yaml-cpp's scanner reads a line of them
constexpr int kMaxDepth = 16;                // a spec nests 7 deep (devices[].containerEdits.mounts[].options)
constexpr int64_t kMaxNodes = 1'000'000;     // YAML aliases must not multiply the work
constexpr int kOldestMinor = 3, kNewestMinor = 8;  // cdiVersion 0.3.0 .. 0.8.0

bool IsLetter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsAlnum(char c) { return IsLetter(c) || (c >= '0' && c <= '9'); }

// CDI's names: a vendor or class starts with a letter, a device name with a
// letter or digit; inside, letters, digits, `_ - .` (and `:` in device
// names); both end with a letter or digit.
bool IsCdiName(std::string_view s, bool device) {
  if (s.empty() || !(device ? IsAlnum(s[0]) : IsLetter(s[0])) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [device](char c) {
    return IsAlnum(c) || c == '_' || c == '-' || c == '.' || (device && c == ':');
  });
}

std::string Quote(std::string_view s) { return "\"" + Printable(s) + "\""; }

const char* KindOf(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "null";
    default: return "a scalar";
  }
}

// Reads one spec: every field checked, errors naming their path; the
// features a cdiVersion must be new enough for are noted as it goes.
class SpecReader {
 public:
  StatusOr<CdiSpec> Read(const YAML::Node& root, const std::string& path);

 private:
  Status Count(const std::string& field) {
    if (++nodes_ > kMaxNodes) return InvalidArgument(fmt::format("{}: the spec expands to more than {} nodes (YAML aliases?)", field, kMaxNodes));
    return Status::Ok();
  }
  // A mapping with only `allowed` keys, each once.
  Status Keys(const YAML::Node& n, const std::string& field, std::initializer_list<std::string_view> allowed);
  StatusOr<std::string> String(const YAML::Node& n, const std::string& field);
  StatusOr<std::string> AbsolutePath(const YAML::Node& n, const std::string& field);
  StatusOr<int64_t> Int(const YAML::Node& n, const std::string& field, int64_t lo, int64_t hi);
  // A list (null = empty), each element read by `each(element, "field[i]")`.
  template <typename F>
  Status List(const YAML::Node& n, const std::string& field, F each);
  StatusOr<std::vector<std::string>> Strings(const YAML::Node& n, const std::string& field);
  StatusOr<std::vector<std::string>> Env(const YAML::Node& n, const std::string& field);
  StatusOr<CdiEdits> Edits(const YAML::Node& n, const std::string& field);
  Status Annotations(const YAML::Node& n, const std::string& field);
  void Needs(int version, std::string field) {
    if (version > needs_minor_) needs_minor_ = version, needs_field_ = std::move(field);
  }

  int64_t nodes_ = 0;
  int needs_minor_ = kOldestMinor;
  std::string needs_field_;
  std::string path_;
};

Status SpecReader::Keys(const YAML::Node& n, const std::string& field, std::initializer_list<std::string_view> allowed) {
  RM_RETURN_IF_ERROR(Count(field));
  if (!n.IsMap()) return InvalidArgument(fmt::format("{}: must be a mapping, got {}", field, KindOf(n)));
  std::set<std::string> seen;
  for (const auto& kv : n) {
    RM_RETURN_IF_ERROR(Count(field));
    if (!kv.first.IsScalar()) return InvalidArgument(fmt::format("{}: a key is {}, not a name", field, KindOf(kv.first)));
    const std::string key = kv.first.Scalar();
    const std::string shown = Printable(key);  // messages stay one line of valid UTF-8
    const std::string at = field.empty() ? shown : field + "." + shown;
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string names;
      for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return InvalidArgument(fmt::format("{}: unknown field (expected one of: {})", at, names));
    }
    if (!seen.insert(key).second) return InvalidArgument(fmt::format("{}: given twice", at));
  }
  return Status::Ok();
}

StatusOr<std::string> SpecReader::String(const YAML::Node& n, const std::string& field) {
  RM_RETURN_IF_ERROR(Count(field));
  if (!n.IsDefined() || n.IsNull()) return InvalidArgument(field + ": missing");
  if (!n.IsScalar()) return InvalidArgument(fmt::format("{}: must be a string, got {}", field, KindOf(n)));
  if (n.Scalar().find('\0') != std::string::npos) return InvalidArgument(field + ": contains a NUL byte");
  return n.Scalar();
}

StatusOr<std::string> SpecReader::AbsolutePath(const YAML::Node& n, const std::string& field) {
  RM_ASSIGN_OR_RETURN(std::string p, String(n, field));
  if (p.empty() || p[0] != '/') return InvalidArgument(fmt::format("{}: {} is not an absolute path", field, Quote(p)));
  return p;
}

StatusOr<int64_t> SpecReader::Int(const YAML::Node& n, const std::string& field, int64_t lo, int64_t hi) {
  RM_ASSIGN_OR_RETURN(std::string s, String(n, field));
  // Decimal, or as YAML writes other bases: 0o17 / 017 (octal: YAML 1.1, as Go's
  // parser reads file modes) and 0x1f.
  std::string_view digits = s;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16, digits.remove_prefix(2);
  } else if (digits.size() > 2 && digits[0] == '0' && digits[1] == 'o') {
    base = 8, digits.remove_prefix(2);
  } else if (digits.size() > 1 && digits[0] == '0') {
    base = 8, digits.remove_prefix(1);
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    return InvalidArgument(fmt::format("{}: {} is not an integer", field, Quote(s)));
  }
  if (v < lo || v > hi) return InvalidArgument(fmt::format("{}: must be {}..{}, got {}", field, lo, hi, v));
  return v;
}

template <typename F>
Status SpecReader::List(const YAML::Node& n, const std::string& field, F each) {
  RM_RETURN_IF_ERROR(Count(field));
  if (!n.IsDefined() || n.IsNull()) return Status::Ok();
  if (!n.IsSequence()) return InvalidArgument(fmt::format("{}: must be a list, got {}", field, KindOf(n)));
  for (size_t i = 0; i < n.size(); ++i) RM_RETURN_IF_ERROR(each(n[i], fmt::format("{}[{}]", field, i)));
  return Status::Ok();
}

StatusOr<std::vector<std::string>> SpecReader::Strings(const YAML::Node& n, const std::string& field) {
  std::vector<std::string> out;
  RM_RETURN_IF_ERROR(List(n, field, [&](const YAML::Node& e, const std::string& at) -> Status {
    RM_ASSIGN_OR_RETURN(std::string s, String(e, at));
    out.push_back(std::move(s));
    return Status::Ok();
  }));
  return out;
}

StatusOr<std::vector<std::string>> SpecReader::Env(const YAML::Node& n, const std::string& field) {
  RM_ASSIGN_OR_RETURN(auto env, Strings(n, field));
  for (size_t i = 0; i < env.size(); ++i) {
    if (env[i].find('=') == std::string::npos || env[i][0] == '=') {
      return InvalidArgument(fmt::format("{}[{}]: {} is not NAME=VALUE", field, i, Quote(env[i])));
    }
  }
  return env;
}

Status SpecReader::Annotations(const YAML::Node& n, const std::string& field) {
  RM_RETURN_IF_ERROR(Count(field));
  if (n.IsNull()) return Status::Ok();
  if (!n.IsMap()) return InvalidArgument(fmt::format("{}: must be a mapping, got {}", field, KindOf(n)));
  for (const auto& kv : n) {
    RM_ASSIGN_OR_RETURN(std::string key, String(kv.first, field));
    RM_RETURN_IF_ERROR(String(kv.second, field + "." + Printable(key)).status());
  }
  if (n.size() > 0) Needs(6, field);
  return Status::Ok();
}

StatusOr<CdiEdits> SpecReader::Edits(const YAML::Node& n, const std::string& field) {
  CdiEdits e;
  if (n.IsNull()) return e;
  RM_RETURN_IF_ERROR(Keys(n, field, {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt"}));
  if (n["intelRdt"]) return InvalidArgument(field + ".intelRdt: Intel RDT is not supported by this agent");
  RM_ASSIGN_OR_RETURN(e.env, Env(n["env"], field + ".env"));
  RM_RETURN_IF_ERROR(List(n["deviceNodes"], field + ".deviceNodes", [&](const YAML::Node& d, const std::string& at) -> Status {
    RM_RETURN_IF_ERROR(Keys(d, at, {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}));
    CdiDeviceNode node;
    RM_ASSIGN_OR_RETURN(node.path, AbsolutePath(d["path"], at + ".path"));
    if (d["hostPath"]) {
      RM_ASSIGN_OR_RETURN(node.host_path, AbsolutePath(d["hostPath"], at + ".hostPath"));
      Needs(5, at + ".hostPath");
    }
    if (d["type"]) {
      RM_ASSIGN_OR_RETURN(node.type, String(d["type"], at + ".type"));
      if (node.type != "b" && node.type != "c" && node.type != "u" && node.type != "p" && !node.type.empty()) {
        return InvalidArgument(fmt::format("{}.type: {} is not b, c, u or p", at, Quote(node.type)));
      }
    }
    // A major of 0 is "unset" in CDI's own reader too (its fields are omitempty).
    if (d["major"]) {
      RM_ASSIGN_OR_RETURN(int64_t v, Int(d["major"], at + ".major", 0, 0xFFFFFFFF));
      if (v != 0) node.major = v;
    }
    if (d["minor"]) {
      RM_ASSIGN_OR_RETURN(int64_t v, Int(d["minor"], at + ".minor", 0, 0xFFFFFFFF));
      node.minor = v;
    }
    if (d["fileMode"]) {
      RM_ASSIGN_OR_RETURN(int64_t v, Int(d["fileMode"], at + ".fileMode", 0, 0xFFFFFFFF));
      node.file_mode = static_cast<uint32_t>(v);
    }
    if (d["permissions"]) {
      RM_ASSIGN_OR_RETURN(node.permissions, String(d["permissions"], at + ".permissions"));
      if (node.permissions != "none" && node.permissions.find_first_not_of("rwm") != std::string::npos) {
        return InvalidArgument(fmt::format("{}.permissions: {} is not some of r, w, m (or none)", at, Quote(node.permissions)));
      }
    }
    for (const char* id : {"uid", "gid"}) {
      if (!d[id]) continue;
      RM_ASSIGN_OR_RETURN(int64_t v, Int(d[id], at + "." + id, 0, 0xFFFFFFFF));
      (std::string_view(id) == "uid" ? node.uid : node.gid) = static_cast<uint32_t>(v);
    }
    e.device_nodes.push_back(std::move(node));
    return Status::Ok();
  }));
  RM_RETURN_IF_ERROR(List(n["mounts"], field + ".mounts", [&](const YAML::Node& m, const std::string& at) -> Status {
    RM_RETURN_IF_ERROR(Keys(m, at, {"hostPath", "containerPath", "type", "options"}));
    CdiMount mount;
    RM_ASSIGN_OR_RETURN(mount.host_path, String(m["hostPath"], at + ".hostPath"));
    if (mount.host_path.empty()) return InvalidArgument(at + ".hostPath: empty");
    RM_ASSIGN_OR_RETURN(mount.container_path, AbsolutePath(m["containerPath"], at + ".containerPath"));
    if (m["type"]) {
      RM_ASSIGN_OR_RETURN(mount.type, String(m["type"], at + ".type"));
      if (!mount.type.empty()) Needs(4, at + ".type");
    }
    RM_ASSIGN_OR_RETURN(mount.options, Strings(m["options"], at + ".options"));
    e.mounts.push_back(std::move(mount));
    return Status::Ok();
  }));
  RM_RETURN_IF_ERROR(List(n["hooks"], field + ".hooks", [&](const YAML::Node& h, const std::string& at) -> Status {
    RM_RETURN_IF_ERROR(Keys(h, at, {"hookName", "path", "args", "env", "timeout"}));
    CdiHook hook;
    RM_ASSIGN_OR_RETURN(hook.hook_name, String(h["hookName"], at + ".hookName"));
    static constexpr std::string_view kHooks[] = {"prestart", "createRuntime", "createContainer",
                                                  "startContainer", "poststart", "poststop"};
    if (std::find(std::begin(kHooks), std::end(kHooks), hook.hook_name) == std::end(kHooks)) {
      return InvalidArgument(fmt::format("{}.hookName: {} is not one of prestart, createRuntime, createContainer, "
                                         "startContainer, poststart, poststop", at, Quote(hook.hook_name)));
    }
    RM_ASSIGN_OR_RETURN(hook.path, AbsolutePath(h["path"], at + ".path"));
    RM_ASSIGN_OR_RETURN(hook.args, Strings(h["args"], at + ".args"));
    RM_ASSIGN_OR_RETURN(hook.env, Env(h["env"], at + ".env"));
    if (h["timeout"] && !h["timeout"].IsNull()) {
      RM_ASSIGN_OR_RETURN(int64_t t, Int(h["timeout"], at + ".timeout", 1, 86400));
      hook.timeout = static_cast<int>(t);
    }
    hook.spec = path_;
    e.hooks.push_back(std::move(hook));
    return Status::Ok();
  }));
  RM_RETURN_IF_ERROR(List(n["additionalGids"], field + ".additionalGids", [&](const YAML::Node& g, const std::string& at) -> Status {
    RM_ASSIGN_OR_RETURN(int64_t v, Int(g, at, 0, 0xFFFFFFFF));
    if (v != 0) e.additional_gids.push_back(static_cast<uint32_t>(v));  // 0 is ignored, as CDI says
    Needs(7, at);
    return Status::Ok();
  }));
  return e;
}

StatusOr<CdiSpec> SpecReader::Read(const YAML::Node& root, const std::string& path) {
  path_ = path;
  CdiSpec spec;
  spec.path = path;
  if (!root.IsMap()) return InvalidArgument(fmt::format("spec: must be a mapping, got {}", KindOf(root)));
  RM_RETURN_IF_ERROR(Keys(root, "", {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}));
  RM_ASSIGN_OR_RETURN(spec.version, String(root["cdiVersion"], "cdiVersion"));
  std::string_view v = spec.version;
  if (!v.empty() && v[0] == 'v') v.remove_prefix(1);
  int version = -1;  // 0.<version>.0
  if (v.size() == 5 && v.substr(0, 2) == "0." && v.substr(3) == ".0" && v[2] >= '0' && v[2] <= '9') version = v[2] - '0';
  if (version < kOldestMinor || version > kNewestMinor) {
    return InvalidArgument(fmt::format("cdiVersion: {} is not a version this agent reads (0.3.0 to 0.8.0)", Quote(spec.version)));
  }
  RM_ASSIGN_OR_RETURN(spec.kind, String(root["kind"], "kind"));
  const size_t slash = spec.kind.find('/');
  if (slash == std::string::npos || !IsCdiName(spec.kind.substr(0, slash), false) ||
      !IsCdiName(spec.kind.substr(slash + 1), false)) {
    return InvalidArgument(fmt::format("kind: {} is not vendor/class (e.g. nvidia.com/gpu)", Quote(spec.kind)));
  }
  if (spec.kind.find('.', slash) != std::string::npos) Needs(6, "kind");
  if (root["annotations"]) RM_RETURN_IF_ERROR(Annotations(root["annotations"], "annotations"));
  if (root["containerEdits"]) {
    RM_ASSIGN_OR_RETURN(spec.edits, Edits(root["containerEdits"], "containerEdits"));
  }
  if (!root["devices"] || root["devices"].IsNull()) return InvalidArgument("devices: missing");
  std::set<std::string> names;
  RM_RETURN_IF_ERROR(List(root["devices"], "devices", [&](const YAML::Node& d, const std::string& at) -> Status {
    RM_RETURN_IF_ERROR(Keys(d, at, {"name", "annotations", "containerEdits"}));
    CdiDevice device;
    RM_ASSIGN_OR_RETURN(device.name, String(d["name"], at + ".name"));
    if (!IsCdiName(device.name, true)) {
      return InvalidArgument(fmt::format("{}.name: {} is not a device name (letters, digits, _ - . :, starting and "
                                         "ending with a letter or digit)", at, Quote(device.name)));
    }
    if (!IsLetter(device.name[0])) Needs(5, at + ".name");
    if (!names.insert(device.name).second) return InvalidArgument(fmt::format("{}.name: {} is named twice", at, Quote(device.name)));
    if (d["annotations"]) RM_RETURN_IF_ERROR(Annotations(d["annotations"], at + ".annotations"));
    if (!d["containerEdits"]) return InvalidArgument(at + ".containerEdits: missing");
    RM_ASSIGN_OR_RETURN(device.edits, Edits(d["containerEdits"], at + ".containerEdits"));
    if (device.edits.empty()) return InvalidArgument(at + ".containerEdits: a device needs at least one edit");
    spec.devices.push_back(std::move(device));
    return Status::Ok();
  }));
  if (spec.devices.empty()) return InvalidArgument("devices: empty (a spec needs at least one device)");
  if (needs_minor_ > version) {
    return InvalidArgument(fmt::format("cdiVersion: {}, but {} needs 0.{}.0", spec.version, needs_field_, needs_minor_));
  }
  spec.edits.specs = {path};
  return spec;
}

}  // namespace

void CdiEdits::Append(const CdiEdits& o) {
  env.insert(env.end(), o.env.begin(), o.env.end());
  device_nodes.insert(device_nodes.end(), o.device_nodes.begin(), o.device_nodes.end());
  mounts.insert(mounts.end(), o.mounts.begin(), o.mounts.end());
  hooks.insert(hooks.end(), o.hooks.begin(), o.hooks.end());
  additional_gids.insert(additional_gids.end(), o.additional_gids.begin(), o.additional_gids.end());
  for (const std::string& s : o.specs) {
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  }
}

StatusOr<CdiSpec> ParseCdiSpec(std::string_view text, const std::string& path) {
  if (text.size() > kMaxSpecBytes) {
    return InvalidArgument(fmt::format("spec: {} bytes, more than the limit of {}", text.size(), kMaxSpecBytes));
  }
  // Brackets nested past any spec's need: refused before yaml-cpp recurses
  // into them (the same scan as job specs').
  if (const std::optional<int> line = FlowTooDeepAt(text, kMaxFlowDepth)) {
    return InvalidArgument(fmt::format("spec: nested more than {} levels deep (line {})", kMaxFlowDepth, *line));
  }
  const std::string copy(text);
  try {
    // A first pass over the events: one document, nested within bounds. (A
    // second document is refused before anything is built: yaml-cpp finds
    // documents without end in some broken text, e.g. ",\n[".)
    std::istringstream in(copy);
    YAML::Parser parser(in);
    YamlDepthLimit depth(kMaxDepth);
    if (parser.HandleNextDocument(depth) && parser.HandleNextDocument(depth)) {
      return InvalidArgument("spec: more than one YAML document");
    }
    return SpecReader().Read(YAML::Load(copy), path);
  } catch (const YamlTooDeep& e) {
    return InvalidArgument(fmt::format("spec: nested more than {} levels deep (line {})", kMaxDepth, e.line));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("spec: not valid YAML or JSON: line {}, column {}: {}", e.mark.line + 1,
                                       e.mark.column + 1, Printable(e.msg, 200)));
  } catch (const std::exception& e) {  // bad_alloc, yaml-cpp's own conversions
    return InvalidArgument(fmt::format("spec: {}", e.what()));
  }
}

Status ResolveCdiDeviceNodes(CdiEdits* edits) {
  for (CdiDeviceNode& d : edits->device_nodes) {
    // As CDI's runtimes: a node that says its type and number is taken at its word.
    if (!d.type.empty() && (d.major || d.type == "p")) continue;
    struct stat st {};
    const std::string& host = d.HostPath();
    if (stat(host.c_str(), &st) != 0) {
      return FailedPrecondition(fmt::format("CDI device node {}: {}", host, std::strerror(errno)));
    }
    std::string type = S_ISCHR(st.st_mode) ? "c" : S_ISBLK(st.st_mode) ? "b" : S_ISFIFO(st.st_mode) ? "p" : "";
    if (type.empty()) return FailedPrecondition(fmt::format("CDI device node {}: not a device", host));
    if (d.type.empty()) {
      d.type = type;
    } else if (d.type != type && !(d.type == "u" && type == "c")) {
      return FailedPrecondition(fmt::format("CDI device node {}: the spec says type {}, the host's is {}", host, d.type, type));
    }
    if (!d.major && d.type != "p") {
      d.major = static_cast<int64_t>(major(st.st_rdev));
      d.minor = static_cast<int64_t>(minor(st.st_rdev));
    }
  }
  return Status::Ok();
}

CdiRegistry::Summary CdiRegistry::Refresh() {
  std::lock_guard<std::mutex> l(mu_);
  return RefreshLocked();
}

CdiRegistry::Summary CdiRegistry::RefreshLocked() {
  std::map<std::string, File> seen;
  for (size_t priority = 0; priority < dirs_.size(); ++priority) {
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dirs_[priority], ec)) {
      const std::string ext = entry.path().extension().string();
      if (ext == ".yaml" || ext == ".json") names.push_back(entry.path().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      struct stat st {};
      if (stat(name.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      File f;
      f.size = st.st_size;
      f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      f.inode = st.st_ino;
      f.priority = static_cast<int>(priority);
      auto old = files_.find(name);
      if (old != files_.end() && old->second.size == f.size && old->second.mtime_ns == f.mtime_ns &&
          old->second.inode == f.inode) {
        seen[name] = old->second;
        seen[name].priority = f.priority;
        continue;
      }
      auto text = f.size > static_cast<int64_t>(kMaxSpecBytes)
                      ? StatusOr<std::string>(InvalidArgument(fmt::format("{} bytes, more than the limit of {}", f.size, kMaxSpecBytes)))
                      : ReadFile(name);
      auto spec = text.ok() ? ParseCdiSpec(*text, name) : StatusOr<CdiSpec>(text.status());
      if (spec.ok()) {
        f.spec = std::make_shared<const CdiSpec>(std::move(*spec));
      } else {
        f.error = spec.status().message();
      }
      seen[name] = std::move(f);
    }
  }
  files_ = std::move(seen);
  // Every qualified name's owner: the highest priority wins; two specs of
  // the same priority naming one device make it unusable (as in CDI's cache).
  devices_.clear();
  Summary s;
  for (const auto& [name, f] : files_) {
    if (!f.spec) {
      s.problems.push_back(fmt::format("{}: {} (ignored)", name, f.error));
      continue;
    }
    s.loaded.push_back(fmt::format("{}: {}, {} devices (cdiVersion {})", name, f.spec->kind, f.spec->devices.size(), f.spec->version));
    auto& by_name = devices_[f.spec->kind];
    for (size_t i = 0; i < f.spec->devices.size(); ++i) {
      Entry e{f.spec, i, f.priority, false};
      auto [it, fresh] = by_name.emplace(f.spec->devices[i].name, e);
      if (fresh || it->second.priority < f.priority) {
        it->second = e;
      } else if (it->second.priority == f.priority) {
        if (!it->second.conflict) {
          s.problems.push_back(fmt::format("{}={}: named by both {} and {} (neither used)", f.spec->kind,
                                           f.spec->devices[i].name, it->second.spec->path, name));
        }
        it->second.conflict = true;
      }
    }
  }
  std::vector<std::string> reported;
  for (const std::string& p : s.problems) {
    if (std::find(reported_.begin(), reported_.end(), p) == reported_.end()) spdlog::warn("agent: CDI: {}", p);
    reported.push_back(p);
  }
  reported_ = std::move(reported);
  return s;
}

StatusOr<CdiEdits> CdiRegistry::EditsForGpus(const std::vector<int>& gpus, const std::map<int, std::string>& uuids,
                                            std::string_view kind) {
  std::lock_guard<std::mutex> l(mu_);
  RefreshLocked();
  CdiEdits out;
  auto by_name = devices_.find(std::string(kind));
  if (by_name == devices_.end() || gpus.empty()) return out;
  std::vector<const CdiSpec*> applied;
  for (int g : gpus) {
    const Entry* found = nullptr;
    auto uuid = uuids.find(g);
    for (const std::string& name : {uuid != uuids.end() ? uuid->second : std::string(), std::to_string(g)}) {
      auto it = name.empty() ? by_name->second.end() : by_name->second.find(name);
      if (it != by_name->second.end() && !it->second.conflict) {
        found = &it->second;
        break;
      }
    }
    const std::string what = fmt::format("GPU {}{}", g, uuid != uuids.end() ? " (" + uuid->second + ")" : "");
    if (!found) {
      return FailedPrecondition(fmt::format("CDI: no {} device for {} in the specs of {} (regenerate them: "
                                            "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)", kind, what,
                                            fmt::join(dirs_, ", ")));
    }
    const CdiDevice& device = found->spec->devices[found->device];
    // A device named by index must be that GPU's: an index that is not the
    // device's minor number would hand the task another task's GPU.
    // Both ends: the node the container sees and the host's node it is made
    // from (a spec may map /dev/nvidia0 in the container to another GPU).
    const std::string mine = "nvidia" + std::to_string(g);
    auto other_gpu = [&mine](std::string_view p) {
      const std::string_view base = p.substr(p.rfind('/') + 1);
      return base.size() > 6 && base.substr(0, 6) == "nvidia" &&
             base.find_first_not_of("0123456789", 6) == std::string_view::npos && base != mine;
    };
    for (const CdiDeviceNode& d : device.edits.device_nodes) {
      for (const std::string& p : {d.path, d.HostPath()}) {
        if (!other_gpu(p)) continue;
        return FailedPrecondition(fmt::format("CDI: {}={} ({}) is {}, not {}'s /dev/{}", kind, device.name,
                                              found->spec->path, p, what, mine));
      }
    }
    if (std::find(applied.begin(), applied.end(), found->spec.get()) == applied.end()) {
      out.Append(found->spec->edits);
      applied.push_back(found->spec.get());
    }
    out.Append(device.edits);
    out.specs.push_back(found->spec->path);
  }
  std::sort(out.specs.begin(), out.specs.end());
  out.specs.erase(std::unique(out.specs.begin(), out.specs.end()), out.specs.end());
  RM_RETURN_IF_ERROR(ResolveCdiDeviceNodes(&out));
  return out;
}

}  // namespace ringmaster::agent
