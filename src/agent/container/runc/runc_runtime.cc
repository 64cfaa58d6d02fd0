#include "agent/container/runc/runc_runtime.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/container/seccomp_profile.h"
#include "agent/executor/safe_fs.h"
#include "common/files.h"
#include "common/log.h"
#include "common/subprocess.h"

namespace ringmaster::agent {
namespace fs = std::filesystem;
namespace {

std::string Rootfs(const std::string& task_dir) { return task_dir + "/rootfs/merged"; }

// A container's upper dir in the scratch dir: its file system unmounted (the
// loop device goes with it), its files and its image removed.
void RemoveScratch(const std::string& dir) {
  if (umount2(dir.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    spdlog::warn("agent: unmounting {}: {}", dir, std::strerror(errno));
  }
  std::error_code ec;
  fs::remove_all(dir, ec);  // root's own dir: nothing in it is followed
  fs::remove(dir + ".img", ec);
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ":") + p;
  return out;
}

}  // namespace

Status MountOverlay(const std::vector<std::string>& stack, const std::string& upper, const std::string& work,
                    const std::string& merged) {
  if (stack.empty()) return InvalidArgument("overlay: no lower dirs");
  // Images repeat layers (the empty one above all); overlayfs refuses a dir
  // twice. The topmost copy alone gives the same tree: the lower one's
  // entries are all in it.
  std::vector<std::string> layers;
  std::set<std::string> seen;
  for (const std::string& dir : stack) {
    if (seen.insert(dir).second) layers.push_back(dir);
  }
  std::string options = fmt::format("lowerdir={},upperdir={},workdir={}", Join(layers), upper, work);
  // The kernel takes at most a page of options. Past that, each lower dir
  // goes by a short name: /proc/self/fd/N of a descriptor open on it (this
  // thread's own, so no chdir, no shared state), resolved at mount time.
  std::vector<UniqueFd> held;
  if (options.size() > kMaxOverlayOptionBytes) {
    std::vector<std::string> short_names;
    for (const std::string& dir : layers) {
      UniqueFd fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!fd) return Internal(fmt::format("overlay: opening the lower dir {}: {}", dir, std::strerror(errno)));
      short_names.push_back(fmt::format("/proc/self/fd/{}", fd.get()));
      held.push_back(std::move(fd));
    }
    options = fmt::format("lowerdir={},upperdir={},workdir={}", Join(short_names), upper, work);
    if (options.size() > kMaxOverlayOptionBytes) {
      return InvalidArgument(fmt::format("overlay: {} layers are more than one mount can stack", layers.size()));
    }
  }
  if (mount("overlay", merged.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return Internal(fmt::format("runc: mounting the task's root (overlay of {} layers, top {}): {}", layers.size(),
                                layers.front(), std::strerror(errno)));
  }
  return Status::Ok();
}

Status MountScratchImage(const std::string& image, int64_t bytes, const std::string& dir) {
  // Room for ext4's own tables on top of the task's bytes. Sparse: the
  // image takes from its file system what the task writes, no more.
  const int64_t size = bytes + std::max<int64_t>(bytes / 16, int64_t{16} << 20);
  {
    UniqueFd fd(open(image.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return Internal(fmt::format("creating {}: {}", image, std::strerror(errno)));
    if (ftruncate(fd.get(), size) != 0) return Internal(fmt::format("sizing {}: {}", image, std::strerror(errno)));
  }
  // No journal (what it holds ends with the task), no root reserve, an inode
  // per 64 KiB; its zeroed inode tables need no lazy init (noinit_itable).
  RM_RETURN_IF_ERROR(
      RunTool({"mkfs.ext4", "-q", "-F", "-m", "0", "-i", "65536", "-O", "^has_journal", "-E", "nodiscard", image})
          .status());
  return RunTool({"mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime,noinit_itable", image, dir}).status();
}

std::string RuncRuntime::UpperBase(const std::string& id, const std::string& task_dir) const {
  return scratch_dir_.empty() ? task_dir + "/rootfs" : scratch_dir_ + "/" + id;
}

StatusOr<std::string> RuncRuntime::Find(const std::string& runc_binary) {
  std::string path = runc_binary;
  if (path.find('/') == std::string::npos) {
    path.clear();
    const char* env = getenv("PATH");
    std::string dirs = env ? env : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    size_t start = 0;
    while (start <= dirs.size() && path.empty()) {
      size_t colon = dirs.find(':', start);
      if (colon == std::string::npos) colon = dirs.size();
      const std::string candidate = dirs.substr(start, colon - start) + "/" + runc_binary;
      if (candidate[0] == '/' && access(candidate.c_str(), X_OK) == 0) path = candidate;
      start = colon + 1;
    }
    if (path.empty()) return FailedPrecondition(fmt::format("runc executor: {} is not on PATH (apt install runc)", runc_binary));
  }
  path = fs::absolute(path).lexically_normal().string();
  auto v = RunTool({path, "--version"});
  if (!v.ok()) return FailedPrecondition(fmt::format("runc executor: {} --version: {}", path, v.status().message()));
  return path;
}

std::string RuncRuntime::DefaultInit() {
  const char* tini = "/usr/bin/tini-static";
  return access(tini, X_OK) == 0 ? tini : "";
}

nlohmann::json RuncRuntime::Config(const ContainerTask& t, const std::string& rootfs, const std::string& init) {
  using nlohmann::json;
  const TaskLaunch& l = *t.launch;
  json env = json::array();
  for (const auto& [k, v] : t.env) env.push_back(k + "=" + v);
  json groups = json::array();
  for (gid_t g : l.identity.groups) groups.push_back(g);
  const json no_caps = json::array();
  json mounts = json::array({
      {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
      {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"},
       {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
      {{"destination", "/dev/pts"}, {"type", "devpts"}, {"source", "devpts"},
       {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
      {{"destination", "/dev/shm"}, {"type", "tmpfs"}, {"source", "shm"},
       {"options", {"nosuid", "noexec", "nodev", "mode=1777", "size=1g"}}},
      {{"destination", "/dev/mqueue"}, {"type", "mqueue"}, {"source", "mqueue"}, {"options", {"nosuid", "noexec", "nodev"}}},
  });
  const bool own_net = l.network == "none" || l.network == "overlay";
  // A fresh sysfs, read-only: never a bind of the host's (whose submounts,
  // debugfs and tracefs among them, would come along).
  mounts.push_back({{"destination", "/sys"}, {"type", "sysfs"}, {"source", "sysfs"}, {"options", {"nosuid", "noexec", "nodev", "ro"}}});
  mounts.push_back({{"destination", "/sys/fs/cgroup"}, {"type", "cgroup"}, {"source", "cgroup"},
                    {"options", {"nosuid", "noexec", "nodev", "relatime", "ro"}}});
  for (const char* f : {"/etc/hosts", "/etc/resolv.conf"}) {
    if (access(f, R_OK) == 0) mounts.push_back({{"destination", f}, {"type", "bind"}, {"source", f}, {"options", {"rbind", "ro"}}});
  }
  for (const auto& [path, ro] : t.binds) {
    mounts.push_back({{"destination", path}, {"type", "bind"}, {"source", path},
                      {"options", {"rbind", "nosuid", "nodev", ro ? "ro" : "rw"}}});
  }
  json args = l.argv;
  if (!init.empty()) {
    mounts.push_back({{"destination", "/dev/init"}, {"type", "bind"}, {"source", init}, {"options", {"bind", "ro", "nosuid", "nodev"}}});
    args = json::array({"/dev/init", "--"});
    for (const auto& a : l.argv) args.push_back(a);
  }
  json namespaces = json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}});
  if (own_net) namespaces.push_back({{"type", "network"}});
  // The job's own namespace on the node (net/job_network.h), shared with its other tasks here.
  if (l.network == "job") namespaces.push_back({{"type", "network"}, {"path", l.netns}});
  json devices = json::array(), rules = json::array({{{"allow", false}, {"access", "rwm"}}});
  for (const DeviceNode& d : t.devices) {
    devices.push_back({{"path", d.container_path}, {"type", "c"}, {"major", d.major}, {"minor", d.minor},
                       {"fileMode", 0666}, {"uid", 0}, {"gid", 0}});
    rules.push_back({{"allow", true}, {"type", "c"}, {"major", d.major}, {"minor", d.minor}, {"access", "rw"}});
  }
  std::string host = "task-" + t.key;
  for (char& c : host) c = c == '.' ? '-' : c;
  // Open files: 65536, or what this host lets root raise it to.
  rlimit lim{};
  uint64_t nofile = 65536;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_max != RLIM_INFINITY) nofile = std::min<uint64_t>(nofile, lim.rlim_max);
  json config{
      {"ociVersion", "1.0.2"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", l.identity.uid}, {"gid", l.identity.gid}, {"additionalGids", groups}}},
        {"args", args},
        {"env", env},
        {"cwd", t.cwd},
        {"capabilities", {{"bounding", no_caps}, {"effective", no_caps}, {"inheritable", no_caps},
                          {"permitted", no_caps}, {"ambient", no_caps}}},
        {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", nofile}, {"soft", nofile}}}},
        {"noNewPrivileges", true}}},
      {"root", {{"path", rootfs}, {"readonly", false}}},
      {"hostname", host},
      {"mounts", mounts},
      {"linux",
       {{"namespaces", namespaces},
        // The container's cgroup sits below the task's, which holds the limits.
        {"cgroupsPath", t.cgroup_parent + "/task"},
        {"resources", {{"devices", rules}}},
        {"devices", devices},
        {"maskedPaths", {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                         "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                         "/proc/scsi", "/sys/devices/virtual/powercap"}},
        {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}},
        {"seccomp", TaskSeccompProfile()}}}};
  if (l.network == "overlay" && !l.network_hook.empty()) {
    // Once its namespaces exist and before its process runs: the veth, the
    // address, the node's bridge (net::AttachTask). A hook that fails fails the start.
    config["hooks"] = {{"createRuntime", json::array({{{"path", l.network_hook[0]}, {"args", l.network_hook},
                       {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}, {"timeout", 60}}})}};
  }
  ApplyCdiToOci(t.cdi, &config);
  return config;
}

StatusOr<ContainerRuntime::Command> RuncRuntime::Prepare(const ContainerTask& t) {
  const TaskLaunch& l = *t.launch;
  if (l.image.layers.empty()) return FailedPrecondition("runc: the task's image has no unpacked layers on this node");
  RM_RETURN_IF_ERROR(MakeDirs(Rootfs(t.task_dir), 0755));
  // What the task writes outside its sandbox lands in its upper dir, gone
  // with it: off the data dir, and (with a limit) on a file system that
  // holds no more than the limit. Written as root by overlayfs, it would
  // otherwise fill the data dir's file system past its root reserve.
  const std::string upper = UpperBase(t.id, t.task_dir);
  RM_RETURN_IF_ERROR(MakeDirs(upper, 0700));
  if (!scratch_dir_.empty() && t.disk_bytes > 0) {
    if (Status st = MountScratchImage(upper + ".img", t.disk_bytes, upper); !st.ok()) {
      // Still measured with the sandbox (the executor's disk limit), only not capped by the kernel.
      spdlog::warn("agent: task {}: its root's upper dir has no file system of its own: {}", t.key, st.ToString());
    }
  }
  for (const char* d : {"upper", "work"}) RM_RETURN_IF_ERROR(MakeDirs(upper + "/" + d, 0755));
  // The image stays as it is (the lower dirs, shared by every task of it).
  RM_RETURN_IF_ERROR(MountOverlay(l.image.layers, upper + "/upper", upper + "/work", Rootfs(t.task_dir)));
  // runc makes the mount points of what is bound in, inside the root (in
  // the task's upper dir, never the shared image), resolving no symlink out of it.
  RM_RETURN_IF_ERROR(MakeDirs(t.task_dir + "/bundle", 0700));
  RM_RETURN_IF_ERROR(WriteFileAtomic(t.task_dir + "/bundle/config.json", Config(t, Rootfs(t.task_dir), init_).dump(2), 0600));
  Command c;
  c.argv = {runc_, "--root", state_root_, "run", "--bundle", t.task_dir + "/bundle", t.id};
  c.cleanup = {runc_, "--root", state_root_, "delete", "--force", t.id};
  c.writable = {upper + "/upper"};
  return c;
}

void RuncRuntime::Release(const std::string& key, const std::string& id, const std::string& task_dir) {
  (void)key;
  (void)RunTool({runc_, "--root", state_root_, "delete", "--force", id});
  const std::string merged = Rootfs(task_dir);
  if (umount2(merged.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    spdlog::warn("agent: unmounting {}: {}", merged, std::strerror(errno));
  }
  if (!scratch_dir_.empty()) RemoveScratch(UpperBase(id, task_dir));
}

void RuncRuntime::RemoveOrphans(const std::string& instance, const std::set<std::string>& keys) {
  auto list = RunTool({runc_, "--root", state_root_, "list", "-q"});
  if (!list.ok()) return;
  const std::string prefix = "rm-" + instance + "-";
  size_t start = 0;
  while (start < list->size()) {
    size_t nl = list->find('\n', start);
    if (nl == std::string::npos) nl = list->size();
    const std::string id = list->substr(start, nl - start);
    start = nl + 1;
    if (id.rfind(prefix, 0) != 0 || keys.count(id.substr(prefix.size()))) continue;
    spdlog::info("agent: removing container {}, of no task of this agent", id);
    (void)RunTool({runc_, "--root", state_root_, "delete", "--force", id});
  }
  // Upper dirs and images of tasks an agent that crashed left behind.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(scratch_dir_.empty() ? "/nonexistent" : scratch_dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".img") == 0) name.resize(name.size() - 4);
    if (name.rfind(prefix, 0) != 0 || keys.count(name.substr(prefix.size()))) continue;
    RemoveScratch(scratch_dir_ + "/" + name);
  }
}

}  // namespace ringmaster::agent
