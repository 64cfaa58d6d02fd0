// CDI edits applied to a runc config.json (everything a CDI runtime applies)
// and to a Docker create body (what Docker 20.10's Engine API can express).
#include <algorithm>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "agent/container/cdi.h"
#include "common/log.h"

namespace ringmaster::agent {
namespace {

using nlohmann::json;

// Sets NAME=VALUE in a list of them, replacing an earlier NAME.
void SetEnv(json* env, const std::string& entry) {
  if (!env->is_array()) *env = json::array();
  const std::string prefix = entry.substr(0, entry.find('=') + 1);
  auto& list = env->get_ref<json::array_t&>();
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const json& e) { return e.is_string() && e.get_ref<const std::string&>().rfind(prefix, 0) == 0; }),
             list.end());
  list.push_back(entry);
}

// Removes the elements of a JSON array whose `key` is `value`.
void EraseWhere(json* array, const char* key, const std::string& value) {
  if (!array->is_array()) return;
  auto& list = array->get_ref<json::array_t&>();
  list.erase(std::remove_if(list.begin(), list.end(), [&](const json& e) { return e.value(key, "") == value; }), list.end());
}

size_t Depth(const std::string& path) {  // path components, as CDI orders mounts
  return static_cast<size_t>(std::count(path.begin(), path.end(), '/')) - (path.size() > 1 && path.back() == '/');
}

bool Has(const std::vector<std::string>& options, std::initializer_list<const char*> any) {
  return std::any_of(options.begin(), options.end(), [&](const std::string& o) {
    return std::any_of(any.begin(), any.end(), [&](const char* a) { return o == a; });
  });
}

// Something a runtime cannot apply, said once per spec file (not once per task).
void WarnOnce(const std::string& spec, const std::string& what) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> l(mu);
  if (said.insert(spec + "\n" + what).second) spdlog::warn("agent: CDI spec {}: {}", spec, what);
}

std::string SpecOf(const CdiEdits& e) { return e.specs.empty() ? "(unknown)" : fmt::format("{}", fmt::join(e.specs, ", ")); }

}  // namespace

void ApplyCdiToOci(const CdiEdits& e, json* config) {
  if (e.empty()) return;
  json& process = (*config)["process"];
  for (const std::string& v : e.env) SetEnv(&process["env"], v);
  json& linux_ = (*config)["linux"];
  const uint32_t uid = process["user"].value("uid", 0u), gid = process["user"].value("gid", 0u);
  for (const CdiDeviceNode& d : e.device_nodes) {
    EraseWhere(&linux_["devices"], "path", d.path);
    json dev = {{"path", d.path}, {"type", d.type}};
    if (d.type != "p") dev["major"] = d.major.value_or(0), dev["minor"] = d.minor;
    if (d.file_mode) dev["fileMode"] = *d.file_mode & 07777;
    // Unsaid owners are the task's, as CDI's runtimes make them.
    if (d.uid || uid > 0) dev["uid"] = d.uid.value_or(uid);
    if (d.gid || gid > 0) dev["gid"] = d.gid.value_or(gid);
    linux_["devices"].push_back(dev);
    if ((d.type == "c" || d.type == "b" || d.type == "u") && d.permissions != "none") {
      linux_["resources"]["devices"].push_back({{"allow", true}, {"type", d.type == "b" ? "b" : "c"},
                                                {"major", d.major.value_or(0)}, {"minor", d.minor},
                                                {"access", d.permissions.empty() ? "rwm" : d.permissions}});
    }
  }
  if (!e.mounts.empty()) {
    json& mounts = (*config)["mounts"];
    for (const CdiMount& m : e.mounts) {
      EraseWhere(&mounts, "destination", m.container_path);
      json mount = {{"destination", m.container_path}, {"source", m.host_path}, {"options", m.options}};
      if (!m.type.empty()) mount["type"] = m.type;
      mounts.push_back(mount);
    }
    // Parents before children: a mount under another must come after it.
    auto& list = mounts.get_ref<json::array_t&>();
    std::stable_sort(list.begin(), list.end(), [](const json& a, const json& b) {
      return Depth(a.value("destination", "")) < Depth(b.value("destination", ""));
    });
  }
  for (const CdiHook& h : e.hooks) {
    json hook = {{"path", h.path}};
    if (!h.args.empty()) hook["args"] = h.args;
    if (!h.env.empty()) hook["env"] = h.env;
    if (h.timeout) hook["timeout"] = *h.timeout;
    (*config)["hooks"][h.hook_name].push_back(hook);
  }
  for (uint32_t g : e.additional_gids) {
    json& gids = process["user"]["additionalGids"];
    if (!gids.is_array()) gids = json::array();
    if (std::find(gids.begin(), gids.end(), json(g)) == gids.end()) gids.push_back(g);
  }
}

void ApplyCdiToDocker(const CdiEdits& e, json* body) {
  if (e.empty()) return;
  for (const std::string& v : e.env) SetEnv(&(*body)["Env"], v);
  json& host = (*body)["HostConfig"];
  for (const CdiDeviceNode& d : e.device_nodes) {
    if (d.permissions == "none") {
      WarnOnce(SpecOf(e), fmt::format("device node {} without cgroup access is not given to docker containers "
                                      "(the Engine API has no such device)", d.path));
      continue;
    }
    EraseWhere(&host["Devices"], "PathInContainer", d.path);
    host["Devices"].push_back({{"PathOnHost", d.HostPath()}, {"PathInContainer", d.path},
                               {"CgroupPermissions", d.permissions.empty() ? "rwm" : d.permissions}});
  }
  for (const CdiMount& m : e.mounts) {
    const bool bind = m.type.empty() || m.type == "bind" || m.type == "none" || Has(m.options, {"bind", "rbind"});
    if (!bind && m.type != "tmpfs") {
      WarnOnce(SpecOf(e), fmt::format("mount of type {} at {} is not given to docker containers (bind and tmpfs only)",
                                      m.type, m.container_path));
      continue;
    }
    EraseWhere(&host["Mounts"], "Target", m.container_path);
    json mount = {{"Type", bind ? "bind" : "tmpfs"}, {"Target", m.container_path}, {"ReadOnly", Has(m.options, {"ro"})}};
    if (bind) {
      mount["Source"] = m.host_path;
      for (const char* p : {"private", "rprivate", "shared", "rshared", "slave", "rslave"}) {
        if (Has(m.options, {p})) mount["BindOptions"] = {{"Propagation", p}};
      }
    }
    host["Mounts"].push_back(mount);
  }
  if (!e.hooks.empty()) {
    std::map<std::string, int> by_spec;
    for (const CdiHook& h : e.hooks) ++by_spec[h.spec];
    for (const auto& [spec, n] : by_spec) {
      WarnOnce(spec, fmt::format("its {} hook{} (e.g. nvidia-ctk's ldcache update) do not run in docker containers: "
                                 "Docker 20.10's Engine API takes no OCI hooks (the runc executor runs them)",
                                 n, n == 1 ? "" : "s"));
    }
  }
  for (uint32_t g : e.additional_gids) {
    json& groups = host["GroupAdd"];
    if (!groups.is_array()) groups = json::array();
    if (std::find(groups.begin(), groups.end(), json(std::to_string(g))) == groups.end()) groups.push_back(std::to_string(g));
  }
}

}  // namespace ringmaster::agent
