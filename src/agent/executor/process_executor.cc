#include "agent/executor/process_executor.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sys/sysmacros.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/executor/safe_fs.h"
#include "agent/executor/shim.h"
#include "common/files.h"
#include "common/log.h"

extern char** environ;

namespace ringmaster::agent {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMetricsFile = "metrics.jsonl";
constexpr const char* kInstanceFile = "sandbox-instance";
constexpr const char* kRootLock = ".lock";           // in the sandbox root
constexpr const char* kInstanceLock = "agent.lock";  // in an agent's sandbox dir, held while it runs
constexpr const char* kRuntimeDir = "runtime";

pid_t ReadPid(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return 0;
  try {
    return static_cast<pid_t>(std::stol(*text));
  } catch (...) {
    return 0;
  }
}

// True if `pid` is a live (non-zombie) process whose command line mentions `dir`,
// so a recycled pid is never mistaken for our shim.
bool ShimAlive(pid_t pid, const std::string& dir) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto rp = line.rfind(')');
  if (rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] == 'Z') return false;
  std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  return cmdline.find(dir) != std::string::npos;
}

std::optional<TaskExit> ReadExit(const std::string& dir) {
  auto text = ReadFile(dir + "/" + kExitFile);
  if (!text.ok()) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(*text);
    TaskExit e{j.value("exit_code", -1), j.value("signal", 0), j.value("message", "")};
    // Stopped past its disk limit: that is why it ended, whatever it exited with.
    if (auto why = ReadFile(dir + "/" + kDiskStopFile); why.ok()) e.message = *why + (e.message.empty() ? "" : "; " + e.message);
    return e;
  } catch (...) {
    return TaskExit{-1, 0, "unreadable exit status"};
  }
}

void WriteExit(const std::string& dir, const TaskExit& e) {
  nlohmann::json j = {{"exit_code", e.exit_code}, {"signal", e.signal}, {"message", e.message}};
  (void)WriteFileAtomic(dir + "/" + kExitFile, j.dump(), 0600);
}

// Every task's user must be able to reach the sandbox root: each directory
// above it needs the execute bit for others. What does not exist yet is
// made 0711 later.
Status CheckTraversable(const std::string& path) {
  fs::path p;
  for (const auto& part : fs::path(path)) {
    p /= part;
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::Ok();
      return Internal(fmt::format("stat {}: {}", p.string(), std::strerror(errno)));
    }
    if (!(st.st_mode & S_IXOTH)) {
      return FailedPrecondition(fmt::format("tasks' users cannot reach {}: {} is mode {:04o} (needs o+x)", path,
                                            p.string(), st.st_mode & 07777));
    }
  }
  return Status::Ok();
}

// This agent's sandbox subdirectory name: random once, then kept in its data dir.
StatusOr<std::string> InstanceId(const std::string& state_dir) {
  const std::string file = state_dir + "/" + kInstanceFile;
  if (auto text = ReadFile(file); text.ok()) {
    std::string id = *text;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    if (id.size() == 16 && id.find_first_not_of("0123456789abcdef") == std::string::npos) return id;
  }
  std::random_device rd;
  std::string id = fmt::format("{:08x}{:08x}", rd(), rd());
  RM_RETURN_IF_ERROR(WriteFileAtomic(file, id + "\n", 0600));
  return id;
}

// An exclusive flock on `name` in `dir` (made 0600 if missing); Unavailable
// when another holder has it and !wait.
StatusOr<UniqueFd> LockFile(int dir, const char* name, bool wait) {
  UniqueFd fd(openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return Internal(fmt::format("open {}: {}", name, std::strerror(errno)));
  if (fchmod(fd.get(), 0600) != 0) return Internal(fmt::format("chmod {}: {}", name, std::strerror(errno)));
  while (flock(fd.get(), LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return Unavailable(fmt::format("{} is locked", name));
    return Internal(fmt::format("flock {}: {}", name, std::strerror(errno)));
  }
  return fd;
}

std::vector<std::string> Entries(int dir) {
  std::vector<std::string> names;
  int copy = fcntl(dir, F_DUPFD_CLOEXEC, 0);
  DIR* d = copy >= 0 ? fdopendir(copy) : nullptr;
  if (!d) {
    if (copy >= 0) close(copy);
    return names;
  }
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  closedir(d);
  return names;
}

// Removes the sandbox dirs of agents that are gone (their lock is free) and
// left no task behind, only their staged runtime: so agents started on fresh
// data dirs (tests, demos) do not pile up copies of the tools under the root.
// REQUIRES: the sandbox root's lock is held.
void RemoveIdleInstances(int root, const std::string& own) {
  for (const std::string& name : Entries(root)) {
    if (name == own || name.size() != 16 || name.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    UniqueFd dir(openat(root, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) continue;
    bool idle = true;
    for (const std::string& e : Entries(dir.get())) idle = idle && (e == kRuntimeDir || e == kInstanceLock);
    if (!idle) continue;  // sandboxes of tasks that may still run, or be re-adopted
    auto lock = LockFile(dir.get(), kInstanceLock, /*wait=*/false);
    if (!lock.ok()) continue;  // its agent runs
    if (Status st = RemoveTree(root, name); !st.ok()) {
      spdlog::warn("agent: removing the idle sandbox dir {} of a gone agent: {}", name, st.ToString());
    }
  }
}

std::string Parent(const std::string& path) { return fs::path(path).parent_path().string(); }
std::string Base(const std::string& path) { return fs::path(path).filename().string(); }

// `dir` first on a colon-separated search path.
std::string Prepend(const std::string& dir, const std::string& path) { return path.empty() ? dir : dir + ":" + path; }

}  // namespace

StatusOr<std::unique_ptr<ProcessExecutor>> ProcessExecutor::Create(ProcessExecutorOptions o) {
  if (o.state_dir.empty() || o.state_dir[0] != '/') return InvalidArgument("the agent's data dir must be an absolute path");
  const bool root = geteuid() == 0;
  if (o.sandbox_root.empty()) o.sandbox_root = root ? kDefaultSandboxRoot : o.state_dir + "/sandboxes";
  if (o.sandbox_root[0] != '/') return InvalidArgument("--sandbox-root: " + o.sandbox_root + " is not an absolute path");
  // The agent's own files stay private, whatever the umask.
  RM_RETURN_IF_ERROR(MakeDirs(o.state_dir, 0700));
  RM_RETURN_IF_ERROR(MakeDirs(o.state_dir + "/tasks", 0700));
  if (root) {
    if (Status st = CheckTraversable(o.sandbox_root); !st.ok()) return st.Annotate("--sandbox-root");
  }
  auto root_fd = OpenTrustedDir(o.sandbox_root, /*create=*/true, 0711);
  if (!root_fd.ok()) return root_fd.status().Annotate("--sandbox-root " + o.sandbox_root);
  if (root) {
    if (Status st = CheckTraversable(o.sandbox_root); !st.ok()) return st.Annotate("--sandbox-root");
  }
  RM_ASSIGN_OR_RETURN(std::string instance, InstanceId(o.state_dir));
  std::unique_ptr<ProcessExecutor> e(new ProcessExecutor(o));
  e->disk_ = std::make_unique<DiskGuard>(o.disk_check_interval, [raw = e.get()](const std::string& key, int64_t used,
                                                                                  int64_t limit) { raw->StopForDisk(key, used, limit); });
  e->sandbox_dir_ = o.sandbox_root + "/" + instance;
  e->instance_ = instance;
  std::string no_limits = !o.limits ? "--no-limits" : !root ? "the agent is not root" : "";
  if (no_limits.empty()) {
    auto cg = Cgroups::Detect({instance, o.cgroup_root, o.sandbox_root});
    if (cg.ok()) {
      e->cgroups_ = std::move(*cg);
      spdlog::info("agent: tasks' limits: cgroup v{} at {}{}", e->cgroups_->Version(), o.cgroup_root,
                   e->cgroups_->io_device().empty() ? " (no io limits: the sandbox root is on no block device)"
                                                    : ", io limits on disk " + e->cgroups_->io_device());
    } else {
      no_limits = cg.status().message();
      spdlog::warn("agent: tasks' limits are not enforced: {}", no_limits);
    }
  }
  if (!o.runtimes.empty() && !e->cgroups_) {
    return FailedPrecondition("container executors need the tasks' cgroup limits, which are off: " + no_limits +
                              " (run the agent as root, with cgroup v1 or v2 at --cgroup-root)");
  }
  {
    // Agents sharing the root set up one at a time, so none removes another's
    // directory between its creation and its lock.
    auto root_lock = LockFile(root_fd->get(), kRootLock, /*wait=*/true);
    if (!root_lock.ok()) return root_lock.status().Annotate("--sandbox-root " + o.sandbox_root);
    RemoveIdleInstances(root_fd->get(), instance);
    // 0711: task users pass through to their own sandbox, and list nothing.
    auto dir = OpenTrustedDir(e->sandbox_dir_, /*create=*/true, 0711);
    if (!dir.ok()) return dir.status().Annotate("--sandbox-root");
    auto lock = LockFile(dir->get(), kInstanceLock, /*wait=*/false);
    if (!lock.ok()) {
      if (lock.status().code() == StatusCode::kUnavailable) {
        return FailedPrecondition(fmt::format("another agent is running with the data dir {}", o.state_dir));
      }
      return lock.status();
    }
    e->instance_lock_ = std::move(*lock);
  }
  if (!o.runtime_from.empty()) {
    auto rt = StageRuntime(o.runtime_from, e->sandbox_dir_ + "/" + kRuntimeDir);
    if (!rt.ok()) return rt.status().Annotate("staging the runtime for tasks");
    e->runtime_ = *rt;
  }
  return e;
}

static bool SameBoot(const std::string& dir);

std::string ProcessExecutor::TaskDir(const std::string& key) const { return options_.state_dir + "/tasks/" + key; }

int ProcessExecutor::ExitFd(const std::string& key) {
  const std::string dir = TaskDir(key);
  const pid_t shim = ReadPid(dir + "/" + kShimPidFile);
  if (!SameBoot(dir) || !ShimAlive(shim, dir)) return -1;
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, shim, 0));
  // The pid could have been recycled between the check and the open: check again.
  if (fd >= 0 && !ShimAlive(shim, dir)) {
    close(fd);
    return -1;
  }
  return fd;
}

std::map<std::string, std::string> TaskGpuEnv(const TaskLaunch& launch) {
  // RINGMASTER_GPUS: the node's indices. CUDA counts the devices it can see:
  // all of the node's for a process (in PCI order, as nvidia-smi numbers
  // them), only its own in a container.
  std::string host, local;
  for (size_t i = 0; i < launch.gpus.size(); ++i) {
    const std::string sep = i ? "," : "";
    host += sep + std::to_string(launch.gpus[i]);
    local += sep + std::to_string(i);
  }
  return {{"RINGMASTER_GPUS", host},
          {"NVIDIA_VISIBLE_DEVICES", host.empty() ? "void" : host},
          {"CUDA_VISIBLE_DEVICES", launch.runtime == "process" ? host : local},
          {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}};
}

std::vector<std::string> ProcessExecutor::Runtimes() const {
  std::vector<std::string> out = {"process"};
  for (const auto& [name, r] : options_.runtimes) out.push_back(name);
  return out;
}

std::map<int, DeviceNode> ProcessExecutor::GpuDevices() const {
  std::map<int, DeviceNode> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.gpu_device_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 6 || name.compare(0, 6, "nvidia") != 0 ||
        name.find_first_not_of("0123456789", 6) != std::string::npos) {
      continue;
    }
    struct stat st {};
    if (stat(entry.path().c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    const int index = std::atoi(name.c_str() + 6);
    out[index] = DeviceNode{entry.path().string(), "/dev/" + name, static_cast<int>(major(st.st_rdev)),
                            static_cast<int>(minor(st.st_rdev))};
  }
  return out;
}

Status ProcessExecutor::PrepareContainer(const TaskLaunch& launch, const std::string& sandbox,
                                         const std::map<int, DeviceNode>& gpus, int64_t disk_bytes, ShimSpec* spec,
                                         std::vector<std::string>* writable) {
  auto it = options_.runtimes.find(launch.runtime);
  if (it == options_.runtimes.end()) return InvalidArgument("this node has no " + launch.runtime + " executor");
  ContainerTask t;
  t.key = launch.key;
  t.id = "rm-" + instance_ + "-" + launch.key;
  t.task_dir = TaskDir(launch.key);
  t.launch = &launch;
  // The image's environment, then the task's (which wins), with the
  // platform's tools first on the image's search paths.
  t.env = launch.image.env;
  for (const auto& [k, v] : spec->env) {
    if (k != "PATH" && k != "PYTHONPATH") t.env[k] = v;
  }
  if (!t.env.count("PATH")) t.env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  // The job's own search paths (the agent passes a container task no host ones).
  if (auto p = launch.env.find("PATH"); p != launch.env.end()) t.env["PATH"] = p->second;
  if (auto p = launch.env.find("PYTHONPATH"); p != launch.env.end()) t.env["PYTHONPATH"] = Prepend(p->second, t.env["PYTHONPATH"]);
  if (!runtime_.bin_dir.empty()) t.env["PATH"] = Prepend(runtime_.bin_dir, t.env["PATH"]);
  if (!runtime_.python_dir.empty()) t.env["PYTHONPATH"] = Prepend(runtime_.python_dir, t.env["PYTHONPATH"]);
  if (t.env["PYTHONPATH"].empty()) t.env.erase("PYTHONPATH");
  t.cwd = spec->working_dir;
  t.binds.push_back({sandbox, false});
  const std::string tools = sandbox_dir_ + "/" + kRuntimeDir;
  if (!runtime_.bin_dir.empty() || !runtime_.python_dir.empty()) t.binds.push_back({tools, true});
  for (int g : launch.gpus) {
    auto d = gpus.find(g);
    if (d == gpus.end()) return FailedPrecondition(fmt::format("GPU {} has no device node in {}", g, options_.gpu_device_dir));
    t.devices.push_back(d->second);
  }
  if (!launch.gpus.empty()) {
    for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
      const std::string path = options_.gpu_device_dir + "/" + name;
      struct stat st {};
      if (stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
        t.devices.push_back({path, std::string("/dev/") + name, static_cast<int>(major(st.st_rdev)),
                             static_cast<int>(minor(st.st_rdev))});
      }
    }
  }
  // What else the GPUs need in a container (the driver's libraries, more
  // device nodes, hooks), from the site's CDI specs.
  if (!launch.gpus.empty() && options_.cdi) {
    RM_ASSIGN_OR_RETURN(t.cdi, options_.cdi->EditsForGpus(launch.gpus, options_.gpu_uuids));
  }
  t.cgroup_parent = cgroups_->PathOf(launch.key);
  t.disk_bytes = disk_bytes;
  t.labels = {{"ringmaster.agent", instance_}, {"ringmaster.key", launch.key}};
  for (const char* k : {"RINGMASTER_JOB_ID", "RINGMASTER_TASK_ID", "RINGMASTER_ATTEMPT", "RINGMASTER_RANK"}) {
    if (auto v = launch.env.find(k); v != launch.env.end()) {
      std::string label = "ringmaster." + std::string(k + 11);  // RINGMASTER_JOB_ID -> ringmaster.job_id
      for (char& c : label) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      t.labels[label] = v->second;
    }
  }
  spec->env = t.env;
  RM_ASSIGN_OR_RETURN(ContainerRuntime::Command cmd, it->second->Prepare(t));
  spec->argv = cmd.argv;
  spec->cleanup = cmd.cleanup;
  *writable = cmd.writable;
  spec->as_root = true;
  spec->runtime = launch.runtime;
  spec->container_id = t.id;
  spec->make_dirs.clear();  // made in the sandbox by Start, as the task's user
  return Status::Ok();
}

Status ProcessExecutor::Start(const TaskLaunch& launch) {
  const TaskIdentity& who = launch.identity;
  if (geteuid() == 0 && (!who.switch_user || who.uid == 0 || who.gid == 0)) {
    return PermissionDenied("refusing to run a task as root");
  }
  if (launch.key.empty() || launch.key.find('/') != std::string::npos || launch.key[0] == '.') {
    return InvalidArgument("bad task key \"" + launch.key + "\"");
  }
  const std::string dir = TaskDir(launch.key);
  if (fs::exists(dir)) return AlreadyExists("task " + launch.key + " already exists on this node");
  RM_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  const std::string sandbox = sandbox_dir_ + "/" + launch.key;
  auto prepare = [&]() -> Status {
    RM_ASSIGN_OR_RETURN(UniqueFd parent, OpenTrustedDir(sandbox_dir_));
    RM_RETURN_IF_ERROR(RemoveTree(parent.get(), launch.key));  // a leftover of a crash
    RM_RETURN_IF_ERROR(MakeOwnedDir(parent.get(), launch.key, who.uid, who.gid, 0700).Annotate("sandbox " + sandbox));
    // The work dir, where the task's files are staged (and, without a
    // working_dir of its own, where it runs).
    RM_ASSIGN_OR_RETURN(UniqueFd box, OpenOwnedDir(parent.get(), launch.key, who.uid));
    RM_RETURN_IF_ERROR(MakeOwnedDir(box.get(), "work", who.uid, who.gid, 0700).Annotate("sandbox " + sandbox));
    RM_ASSIGN_OR_RETURN(UniqueFd work, OpenOwnedDir(box.get(), "work", who.uid));
    if (launch.prepare) RM_RETURN_IF_ERROR(launch.prepare(work.get()));
    if (launch.runtime != "process") {
      // A container's shim never becomes the task's user: its dirs are made here.
      for (const char* d : {"checkpoints", "outputs"}) {
        Status st = MakeOwnedDir(work.get(), d, who.uid, who.gid, 0700);
        if (!st.ok() && st.code() != StatusCode::kAlreadyExists) return st.Annotate("sandbox " + sandbox);
      }
    }
    return Status::Ok();
  };
  if (launch.runtime != "process" && !options_.runtimes.count(launch.runtime)) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    return InvalidArgument("this node has no " + launch.runtime + " executor");
  }
  if (Status st = prepare(); !st.ok()) {
    if (auto parent = OpenTrustedDir(sandbox_dir_); parent.ok()) (void)RemoveTree(parent->get(), launch.key);
    std::error_code ec;
    fs::remove_all(dir, ec);
    return st;
  }

  ShimSpec spec;
  spec.argv = launch.argv;
  spec.env = launch.env;
  spec.meta = launch.meta_json;
  spec.identity = who;
  spec.sandbox = sandbox;
  spec.max_log_bytes = options_.max_log_bytes;
  spec.max_procs = options_.max_procs;
  spec.make_dirs = launch.make_dirs;
  spec.working_dir = launch.working_dir.empty() ? sandbox + "/work" : launch.working_dir;
  auto& env = spec.env;
  env["RINGMASTER_METRICS_FILE"] = sandbox + "/" + kMetricsFile;
  // The job's files on this node (the agent stages and uploads them): the
  // platform's, whatever the job's env says.
  env["RINGMASTER_WORK_DIR"] = sandbox + "/work";
  env["RINGMASTER_CHECKPOINT_DIR"] = sandbox + "/work/checkpoints";
  env["RINGMASTER_OUTPUT_DIR"] = sandbox + "/work/outputs";
  spec.make_dirs.push_back(env["RINGMASTER_CHECKPOINT_DIR"]);
  spec.make_dirs.push_back(env["RINGMASTER_OUTPUT_DIR"]);
  if (!env.count("HOME")) env["HOME"] = who.home.empty() ? sandbox : who.home;
  const std::string user = who.account.empty() ? who.user : who.account;
  if (!env.count("USER") && !user.empty()) env["USER"] = user;
  if (!env.count("LOGNAME") && !user.empty()) env["LOGNAME"] = user;
  // The platform's own tools come first, whatever the agent's PATH holds.
  if (!runtime_.bin_dir.empty()) env["PATH"] = Prepend(runtime_.bin_dir, env["PATH"]);
  if (!runtime_.python_dir.empty()) env["PYTHONPATH"] = Prepend(runtime_.python_dir, env["PYTHONPATH"]);
  // The GPUs it holds, by the node's indices; the others are denied to it
  // in its cgroup (and not in its container at all).
  const auto gpus = GpuDevices();
  TaskLimits limits = launch.limits;
  if (!launch.gpus.empty() || !gpus.empty()) {
    for (const auto& [k, v] : TaskGpuEnv(launch)) env[k] = v;
    // A container's runtime allows its devices itself (the defaults and its
    // GPUs, nothing else); a parent that denied some would refuse that.
    for (const auto& [index, d] : gpus) {
      if (launch.runtime == "process" &&
          std::find(launch.gpus.begin(), launch.gpus.end(), index) == launch.gpus.end()) {
        limits.deny_devices.push_back({d.major, d.minor});
      }
    }
  }
  auto fail = [&](Status st) {
    Release(launch.key);
    return st;
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    sandboxes_[launch.key] = TaskSandbox{sandbox, who.uid, who.gid};
  }
  if (cgroups_) {
    if (Status st = cgroups_->Create(launch.key, limits); !st.ok()) return fail(st);
    spec.cgroup_memory_dir = cgroups_->DirOf("memory", launch.key);
    spec.cgroup_cpu_dir = cgroups_->DirOf("cpu", launch.key);
    spec.cgroup_version = cgroups_->Version();
    spec.memory_limit = limits.memory_bytes;
    if (launch.runtime == "process") spec.cgroup_procs = cgroups_->ProcsFiles(launch.key);
  }
  if (launch.runtime == "process" && launch.network == "job") spec.netns = launch.netns;
  if (launch.runtime == "process" && launch.network == "none") spec.own_netns = true;
  // A limit past what the sandbox's file system holds would cap nothing (and
  // no scratch image could be made that size): no task may ask for more than
  // 90% of it.
  int64_t disk = launch.disk_bytes > 0 ? launch.disk_bytes : options_.default_task_disk;
  if (struct statvfs fs {}; disk > 0 && statvfs(sandbox_dir_.c_str(), &fs) == 0) {
    disk = std::min<int64_t>(disk, static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize) / 10 * 9);
  }
  std::vector<std::string> disk_dirs = {sandbox};
  if (launch.runtime != "process") {
    // Written first, so Release finds the container whatever happens next.
    spec.runtime = launch.runtime;
    spec.container_id = "rm-" + instance_ + "-" + launch.key;
    if (Status st = WriteFileAtomic(dir + "/" + kSpecFile, spec.ToJson().dump(), 0600); !st.ok()) return fail(st);
    std::vector<std::string> writable;
    if (Status st = PrepareContainer(launch, sandbox, gpus, disk, &spec, &writable); !st.ok()) return fail(st);
    disk_dirs.insert(disk_dirs.end(), writable.begin(), writable.end());
  }
  if (Status st = WriteFileAtomic(dir + "/" + kSpecFile, spec.ToJson().dump(), 0600); !st.ok()) return fail(st);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::string arg0 = options_.shim_binary, arg1 = "shim";
  std::string arg2 = dir;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, options_.shim_binary.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    Release(launch.key);
    return Internal(fmt::format("cannot start shim {}: {}", options_.shim_binary, std::strerror(rc)));
  }
  // The shim double-forks: this first half exits as soon as the shim proper
  // runs and has recorded its pid, so reaping it here leaves no zombie.
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (ReadPid(dir + "/" + kShimPidFile) <= 0) {
    Release(launch.key);
    return Internal(fmt::format("the shim for task {} did not start (status {})", launch.key, status));
  }
  if (disk > 0) WatchDisk(launch.key, disk, disk_dirs);
  return Status::Ok();
}

Status ProcessExecutor::Stop(const std::string& key, std::chrono::milliseconds grace) {
  const std::string dir = TaskDir(key);
  if (!fs::exists(dir)) return NotFound("task " + key + " is not on this node");
  (void)WriteFileAtomic(dir + "/" + kStopFile, "", 0600);  // a shim that has not started the task yet won't
  std::lock_guard<std::mutex> l(mu_);
  auto [it, inserted] = stopping_.try_emplace(key, Stopping{std::chrono::steady_clock::now() + grace});
  SignalLocked(key, it->second);
  return Status::Ok();
}

// The pids a shim recorded mean something only in the boot that recorded
// them: after a reboot they name other processes, which root must not kill.
static bool SameBoot(const std::string& dir) {
  auto recorded = ReadFile(dir + "/" + kBootIdFile);
  const std::string now = BootId();
  return recorded.ok() && !now.empty() && *recorded == now;
}

void ProcessExecutor::SignalLocked(const std::string& key, Stopping& s) {
  const std::string dir = TaskDir(key);
  pid_t pgid = ReadPid(dir + "/" + kTaskPidFile);
  if (pgid <= 0 || ReadExit(dir) || !SameBoot(dir)) return;  // not started, already ended, or another boot's
  if (std::chrono::steady_clock::now() >= s.kill_at) {
    kill(-pgid, SIGKILL);
  } else if (!s.term_sent) {
    kill(-pgid, SIGTERM);
    s.term_sent = true;
  }
}

std::optional<TaskExit> ProcessExecutor::Poll(const std::string& key) {
  const std::string dir = TaskDir(key);
  if (auto e = ReadExit(dir)) return e;
  pid_t shim = ReadPid(dir + "/" + kShimPidFile);
  if (!ShimAlive(shim, dir)) {
    if (auto e = ReadExit(dir)) return e;  // it finished between the two reads
    pid_t pgid = ReadPid(dir + "/" + kTaskPidFile);
    if (pgid > 0 && SameBoot(dir)) kill(-pgid, SIGKILL);  // no supervisor left: do not leave strays
    TaskExit lost{-1, 0, "the task's supervisor (shim) died"};
    WriteExit(dir, lost);
    return lost;
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = stopping_.find(key);
  if (it != stopping_.end()) SignalLocked(key, it->second);
  return std::nullopt;
}

StatusOr<TaskSandbox> ProcessExecutor::SandboxOf(const std::string& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = sandboxes_.find(key); it != sandboxes_.end()) return it->second;
  }
  RM_ASSIGN_OR_RETURN(std::string text, ReadFile(TaskDir(key) + "/" + kSpecFile));
  TaskSandbox s;
  try {
    ShimSpec spec = ShimSpec::FromJson(nlohmann::json::parse(text));
    s = TaskSandbox{spec.sandbox, spec.identity.uid, spec.identity.gid};
  } catch (const std::exception& e) {
    return Internal(fmt::format("task {}: unreadable spec: {}", key, e.what()));
  }
  std::lock_guard<std::mutex> l(mu_);
  sandboxes_[key] = s;
  return s;
}

StatusOr<OutputChunk> ProcessExecutor::ReadOutput(const std::string& key, TaskOutput what, int64_t offset,
                                                  size_t max_bytes) {
  UniqueFd fd;
  if (what == TaskOutput::kLog) {
    // The shim's file, in the agent's private directory.
    fd = UniqueFd(open((TaskDir(key) + "/" + kLogFile).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return NotFound("no output yet");
  } else {
    // The task's file, in its sandbox: anything the task could have made of it.
    RM_ASSIGN_OR_RETURN(TaskSandbox s, SandboxOf(key));
    RM_ASSIGN_OR_RETURN(UniqueFd parent, OpenTrustedDir(Parent(s.dir)));
    auto dir = OpenOwnedDir(parent.get(), Base(s.dir), s.uid);
    if (!dir.ok()) return dir.status().code() == StatusCode::kNotFound ? NotFound("no sandbox") : dir.status();
    auto file = OpenOwnedRegularFile(dir->get(), kMetricsFile, s.uid);
    if (!file.ok()) return file.status().Annotate("$RINGMASTER_METRICS_FILE");
    fd = std::move(*file);
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Internal(fmt::format("stat: {}", std::strerror(errno)));
  OutputChunk out;
  out.size = st.st_size;
  out.data.resize(max_bytes);
  ssize_t n = pread(fd.get(), out.data.data(), max_bytes, offset);
  if (n < 0) return Internal(fmt::format("read: {}", std::strerror(errno)));
  out.data.resize(static_cast<size_t>(n));
  return out;
}

std::map<std::string, std::string> ProcessExecutor::Recover() {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.state_dir + "/tasks", ec)) {
    if (!entry.is_directory()) continue;
    auto text = ReadFile(entry.path().string() + "/" + kSpecFile);
    if (!text.ok()) continue;
    try {
      out[entry.path().filename().string()] = nlohmann::json::parse(*text).value("meta", "");
    } catch (...) {
    }
  }
  std::set<std::string> keys;
  for (const auto& [key, meta] : out) {
    keys.insert(key);
    RewatchDisk(key);
  }
  for (const auto& [name, runtime] : options_.runtimes) runtime->RemoveOrphans(instance_, keys);
  return out;
}

void ProcessExecutor::Release(const std::string& key) {
  disk_->Forget(key);
  if (auto text = ReadFile(TaskDir(key) + "/" + kSpecFile); text.ok()) {
    try {
      const ShimSpec spec = ShimSpec::FromJson(nlohmann::json::parse(*text));
      auto it = options_.runtimes.find(spec.runtime);
      if (it != options_.runtimes.end()) it->second->Release(key, spec.container_id, TaskDir(key));
    } catch (const std::exception& e) {
      spdlog::warn("agent: task {}: unreadable spec: {}", key, e.what());
    }
  }
  if (cgroups_) cgroups_->Remove(key);
  auto sandbox = SandboxOf(key);
  if (sandbox.ok()) {
    auto parent = OpenTrustedDir(Parent(sandbox->dir));
    Status st = parent.ok() ? RemoveTree(parent->get(), Base(sandbox->dir)) : parent.status();
    if (!st.ok()) spdlog::warn("agent: removing the sandbox of task {}: {}", key, st.ToString());
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_.erase(key);
    sandboxes_.erase(key);
  }
  // Only root writes here (a runc task's overlay is unmounted by now, its
  // upper dir holds what the task wrote: removed without following links).
  std::error_code ec;
  fs::remove_all(TaskDir(key), ec);
}

std::optional<LiveUsage> ProcessExecutor::Usage(const std::string& key) {
  // The cgroup's layout is fixed from Create on: no lock needed to read it.
  if (!cgroups_) return std::nullopt;
  return cgroups_->Live(key);  // nullopt when its cgroup is gone
}

}  // namespace ringmaster::agent
