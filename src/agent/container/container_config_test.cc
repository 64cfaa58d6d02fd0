// The container runtimes' configurations and the out-of-memory verdict, as
// data: what a task's container may and may not do is decided here.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "agent/container/docker/docker_runtime.h"
#include "agent/container/runc/runc_runtime.h"
#include "agent/node/cgroups.h"

namespace ringmaster::agent {
namespace {

TaskLaunch Launch() {
  TaskLaunch l;
  l.key = "7.2";
  l.argv = {"python3", "train.py"};
  l.identity.uid = 200003;
  l.identity.gid = 200003;
  l.identity.switch_user = true;
  l.network = "host";
  l.gpus = {1};
  l.image = {"torch", std::string(64, 'a'), "/cache/rootfs.tar", {"/cache/rootfs"}, {}};
  return l;
}

ContainerTask Task(const TaskLaunch& l) {
  ContainerTask t;
  t.key = l.key;
  t.id = "rm-inst-7.2";
  t.task_dir = "/var/lib/agent/tasks/7.2";
  t.launch = &l;
  t.env = {{"RINGMASTER_RANK", "0"}, {"PATH", "/usr/bin"}};
  t.cwd = "/sandboxes/inst/7.2/work";
  t.binds = {{"/sandboxes/inst/7.2", false}, {"/sandboxes/inst/runtime", true}};
  t.devices = {{"/dev/nvidia1", "/dev/nvidia1", 195, 1}};
  t.cgroup_parent = "/ringmaster/inst/7.2";
  t.labels = {{"ringmaster.key", "7.2"}};
  return t;
}

// Whether a seccomp profile refuses `call` whatever its arguments.
bool Denies(const nlohmann::json& profile, const std::string& call) {
  for (const auto& r : profile["syscalls"]) {
    if (r.contains("args") || r["action"] != "SCMP_ACT_ERRNO") continue;
    for (const auto& n : r["names"]) {
      if (n == call) return true;
    }
  }
  return false;
}

TEST(RuncConfig, RunsAsTheTaskUserWithNothingToEscapeWith) {
  const TaskLaunch l = Launch();
  const auto c = RuncRuntime::Config(Task(l), "/var/lib/agent/tasks/7.2/rootfs/merged", "/usr/bin/tini-static");
  const auto& p = c["process"];
  EXPECT_EQ(p["user"]["uid"], 200003);
  EXPECT_EQ(p["user"]["gid"], 200003);
  EXPECT_TRUE(p["noNewPrivileges"].get<bool>());
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"}) {
    EXPECT_TRUE(p["capabilities"][set].empty()) << set;
  }
  EXPECT_EQ(p["args"], nlohmann::json({"/dev/init", "--", "python3", "train.py"}));
  EXPECT_EQ(c["linux"]["cgroupsPath"], "/ringmaster/inst/7.2/task");
  // Only the task's own GPU, and the device cgroup denies everything else.
  EXPECT_EQ(c["linux"]["devices"].size(), 1u);
  EXPECT_EQ(c["linux"]["devices"][0]["minor"], 1);
  EXPECT_FALSE(c["linux"]["resources"]["devices"][0]["allow"].get<bool>());
  // Host network: no network namespace, but never the host's /sys.
  bool net = false;
  for (const auto& ns : c["linux"]["namespaces"]) net = net || ns["type"] == "network";
  EXPECT_FALSE(net);
  int binds = 0;
  for (const auto& m : c["mounts"]) {
    if (m["destination"] == "/sys") EXPECT_EQ(m["type"], "sysfs");
    if (m["type"] == "bind") {
      ++binds;
      const std::string src = m["source"];
      EXPECT_TRUE(src == "/sandboxes/inst/7.2" || src == "/sandboxes/inst/runtime" || src == "/etc/hosts" ||
                  src == "/etc/resolv.conf" || src == "/usr/bin/tini-static")
          << src;
    }
  }
  EXPECT_GE(binds, 3);
  // Namespaces, mounts and io_uring refused from inside.
  for (const char* call : {"unshare", "mount", "io_uring_setup", "io_uring_enter", "io_uring_register"}) {
    EXPECT_TRUE(Denies(c["linux"]["seccomp"], call)) << call;
  }
}

TEST(RuncConfig, NetworkNoneGetsANamespaceOfItsOwn) {
  TaskLaunch l = Launch();
  l.network = "none";
  const auto c = RuncRuntime::Config(Task(l), "/r");
  bool net = false;
  for (const auto& ns : c["linux"]["namespaces"]) net = net || ns["type"] == "network";
  EXPECT_TRUE(net);
  EXPECT_EQ(c["process"]["args"], nlohmann::json({"python3", "train.py"}));  // no init given
}

TEST(RuncConfig, AJobsNetworkIsJoinedByPath) {
  TaskLaunch l = Launch();
  l.network = "job";
  l.netns = "/var/lib/ringmaster/agent/netns/rmj-5-1";
  const auto c = RuncRuntime::Config(Task(l), "/r");
  int nets = 0;
  for (const auto& ns : c["linux"]["namespaces"]) {
    if (ns["type"] != "network") continue;
    ++nets;
    EXPECT_EQ(ns["path"], l.netns);
  }
  EXPECT_EQ(nets, 1);
  EXPECT_FALSE(c.contains("hooks"));
}

TEST(DockerConfig, UnprivilegedWithItsCgroupBelowTheTasks) {
  const TaskLaunch l = Launch();
  const auto c = DockerRuntime::Config(Task(l), DockerRuntime::ImageRef(l.image));
  EXPECT_EQ(c["Image"], "ringmaster/torch:" + std::string(64, 'a'));
  EXPECT_EQ(c["User"], "200003:200003");
  EXPECT_EQ(c["Entrypoint"], nlohmann::json::array());
  const auto& h = c["HostConfig"];
  EXPECT_FALSE(h["Privileged"].get<bool>());
  EXPECT_EQ(h["CapDrop"], nlohmann::json({"ALL"}));
  ASSERT_EQ(h["SecurityOpt"].size(), 2u);
  EXPECT_EQ(h["SecurityOpt"][0], "no-new-privileges");
  // Our profile, not the daemon's default (which lets io_uring through before Docker 25).
  const std::string seccomp = h["SecurityOpt"][1];
  ASSERT_EQ(seccomp.rfind("seccomp=", 0), 0u) << seccomp;
  EXPECT_TRUE(Denies(nlohmann::json::parse(seccomp.substr(8)), "io_uring_setup"));
  EXPECT_TRUE(Denies(nlohmann::json::parse(seccomp.substr(8)), "unshare"));
  EXPECT_EQ(h["CgroupParent"], "/ringmaster/inst/7.2");
  EXPECT_EQ(h["NetworkMode"], "host");
  EXPECT_TRUE(h["Init"].get<bool>());
  EXPECT_EQ(h["Binds"], nlohmann::json({"/sandboxes/inst/7.2:/sandboxes/inst/7.2:rw",
                                         "/sandboxes/inst/runtime:/sandboxes/inst/runtime:ro"}));
  EXPECT_EQ(h["Devices"][0]["PathOnHost"], "/dev/nvidia1");
  EXPECT_EQ(c["Labels"]["ringmaster.key"], "7.2");
}

TEST(DockerConfig, TheDaemonMustUseTheCgroupfsDriver) {
  EXPECT_TRUE(DockerRuntime::CheckDaemon({{"CgroupDriver", "cgroupfs"}, {"CgroupVersion", "2"}}).ok());
  EXPECT_TRUE(DockerRuntime::CheckDaemon({{"CgroupDriver", "cgroupfs"}, {"CgroupVersion", "1"}}).ok());
  const Status st = DockerRuntime::CheckDaemon({{"CgroupDriver", "systemd"}, {"CgroupVersion", "2"}});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  // One line that says how to fix the daemon.
  EXPECT_NE(st.message().find("\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"] in /etc/docker/daemon.json"),
            std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
}

// CDI edits for the task's GPU 1, resolved, as EditsForGpus returns them:
// the spec's own (env, nvidiactl, nvidia-modeset, the driver's library, an
// ldcache hook, a gid) then the device's (nvidia1, from a test directory).
CdiEdits GpuEdits() {
  CdiEdits e;
  e.env = {"NVIDIA_VISIBLE_DEVICES=void", "CDI_ONLY=yes"};
  e.device_nodes = {{.path = "/dev/nvidiactl", .type = "c", .major = 195, .minor = 255, .permissions = "rw"},
                    {.path = "/dev/nvidia-modeset", .type = "c", .major = 195, .minor = 254, .file_mode = 0100660},
                    {.path = "/dev/nvidia1", .host_path = "/tmp/fake/nvidia1", .type = "c", .major = 195, .minor = 1}};
  e.mounts = {{"/usr/lib/x86_64-linux-gnu/libcuda.so.535", "/usr/lib/x86_64-linux-gnu/libcuda.so.535", "",
               {"ro", "nosuid", "nodev", "bind"}},
              {"/opt/cuda", "/usr", "", {"ro", "rbind"}}};
  e.hooks = {{"createContainer", "/usr/bin/nvidia-ctk", {"nvidia-ctk", "hook", "update-ldcache"}, {"A=1"}, 30, "/etc/cdi/nvidia.yaml"}};
  e.additional_gids = {44};
  e.specs = {"/etc/cdi/nvidia.yaml"};
  return e;
}

TEST(RuncConfig, CdiEditsAreAppliedAsACdiRuntimeWould) {
  TaskLaunch l = Launch();
  l.network = "overlay";
  l.network_hook = {"/usr/bin/ringmaster", "net-attach"};
  ContainerTask t = Task(l);
  t.env["NVIDIA_VISIBLE_DEVICES"] = "1";
  t.devices.push_back({"/dev/nvidiactl", "/dev/nvidiactl", 195, 255});
  t.cdi = GpuEdits();
  const auto c = RuncRuntime::Config(t, "/r");
  std::map<std::string, int> env;
  for (const auto& v : c["process"]["env"]) ++env[v.get<std::string>()];
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES=void"], 1);  // replaced, not added
  EXPECT_EQ(env.count("NVIDIA_VISIBLE_DEVICES=1"), 0u);
  EXPECT_EQ(env["CDI_ONLY=yes"], 1);
  EXPECT_EQ(env["RINGMASTER_RANK=0"], 1);
  // Each device node once, the CDI one where both name a path; owned by the task's user.
  std::map<std::string, nlohmann::json> devices;
  for (const auto& d : c["linux"]["devices"]) EXPECT_TRUE(devices.emplace(d["path"], d).second) << d;
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices["/dev/nvidia-modeset"]["minor"], 254);
  EXPECT_EQ(devices["/dev/nvidia-modeset"]["fileMode"], 0660);
  EXPECT_EQ(devices["/dev/nvidia-modeset"]["uid"], 200003);
  EXPECT_EQ(devices["/dev/nvidia1"]["type"], "c");
  // Deny all, the task's own allows, then CDI's: modeset with CDI's default rwm, nvidiactl as the spec says.
  const auto& rules = c["linux"]["resources"]["devices"];
  EXPECT_FALSE(rules[0]["allow"].get<bool>());
  std::map<int, std::set<std::string>> access;  // minor -> the allow rules' access
  for (const auto& r : rules) {
    if (r["allow"].get<bool>()) access[r.value("minor", -1)].insert(r.value("access", ""));
  }
  EXPECT_EQ(access[254], std::set<std::string>{"rwm"});
  EXPECT_EQ(access[255], std::set<std::string>{"rw"});
  EXPECT_EQ(access[1], (std::set<std::string>{"rw", "rwm"}));
  // The library mounted read-only; /usr (a parent) before it; /proc and /dev still first.
  std::vector<std::string> order;
  for (const auto& m : c["mounts"]) order.push_back(m["destination"]);
  auto at = [&](const std::string& d) { return std::find(order.begin(), order.end(), d) - order.begin(); };
  ASSERT_LT(at("/usr/lib/x86_64-linux-gnu/libcuda.so.535"), static_cast<long>(order.size()));
  EXPECT_LT(at("/usr"), at("/usr/lib/x86_64-linux-gnu/libcuda.so.535"));
  EXPECT_LT(at("/dev"), at("/dev/pts"));
  EXPECT_EQ(at("/proc"), 0);
  for (const auto& m : c["mounts"]) {
    if (m["destination"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.535") {
      EXPECT_EQ(m["options"], nlohmann::json({"ro", "nosuid", "nodev", "bind"}));
      EXPECT_FALSE(m.contains("type"));
    }
  }
  // The hook joins the overlay's, which stays.
  ASSERT_EQ(c["hooks"]["createRuntime"].size(), 1u);
  ASSERT_EQ(c["hooks"]["createContainer"].size(), 1u);
  EXPECT_EQ(c["hooks"]["createContainer"][0], nlohmann::json({{"path", "/usr/bin/nvidia-ctk"},
                                                              {"args", {"nvidia-ctk", "hook", "update-ldcache"}},
                                                              {"env", {"A=1"}}, {"timeout", 30}}));
  EXPECT_EQ(c["process"]["user"]["additionalGids"], nlohmann::json({44}));
  // Without CDI edits nothing of it appears.
  const auto plain = RuncRuntime::Config(Task(l), "/r");
  EXPECT_FALSE(plain["hooks"].contains("createContainer"));
  EXPECT_EQ(plain["linux"]["devices"].size(), 1u);
}

TEST(DockerConfig, CdiDevicesMountsAndEnvButNoHooks) {
  const TaskLaunch l = Launch();
  ContainerTask t = Task(l);
  t.cdi = GpuEdits();
  const auto c = DockerRuntime::Config(t, DockerRuntime::ImageRef(l.image));
  const auto& h = c["HostConfig"];
  std::map<std::string, nlohmann::json> devices;
  for (const auto& d : h["Devices"]) EXPECT_TRUE(devices.emplace(d["PathInContainer"], d).second) << d;
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices["/dev/nvidia1"]["PathOnHost"], "/tmp/fake/nvidia1");  // CDI's replaced the executor's
  EXPECT_EQ(devices["/dev/nvidia1"]["CgroupPermissions"], "rwm");
  EXPECT_EQ(devices["/dev/nvidiactl"]["CgroupPermissions"], "rw");
  ASSERT_EQ(h["Mounts"].size(), 2u);
  EXPECT_EQ(h["Mounts"][0], nlohmann::json({{"Type", "bind"}, {"Source", "/usr/lib/x86_64-linux-gnu/libcuda.so.535"},
                                            {"Target", "/usr/lib/x86_64-linux-gnu/libcuda.so.535"}, {"ReadOnly", true}}));
  EXPECT_EQ(h["GroupAdd"], nlohmann::json({"44"}));
  int cdi_only = 0;
  for (const auto& v : c["Env"]) cdi_only += v == "CDI_ONLY=yes";
  EXPECT_EQ(cdi_only, 1);
  EXPECT_EQ(c.dump().find("nvidia-ctk"), std::string::npos);  // the hook has nowhere to go
}

TEST(OutOfMemory, OnlyTheOomKillerSaysSo) {
  CgroupUsage u;
  u.memory_failcnt = 1000;  // limit hits: page cache reclaim, not an OOM kill
  EXPECT_EQ(OutOfMemoryReason(u, false, -1, SIGKILL, 64 << 20), "");
  EXPECT_EQ(OutOfMemoryReason(u, false, 137, 0, 64 << 20), "");
  EXPECT_EQ(OutOfMemoryReason(u, true, 137, 0, 64 << 20), "out of memory (limit 64Mi)");
  EXPECT_EQ(OutOfMemoryReason(u, true, 0, 0, 64 << 20), "");  // it survived a helper's kill
  u.oom_kills = 1;
  EXPECT_EQ(OutOfMemoryReason(u, false, -1, SIGKILL, 1 << 30), "out of memory (limit 1Gi)");
  EXPECT_EQ(OutOfMemoryReason(u, true, -1, SIGKILL, 0), "");  // no limit, no verdict
}

// The overlay runc mounts, for real: the top layer wins, and a stack whose
// paths pass one page of mount options still mounts (by short names).
TEST(RuncOverlay, StacksLayersTopFirstEvenPastAPageOfOptions) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (mount)";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("rm-overlay-{}", getpid());
  fs::remove_all(dir);
  std::vector<std::string> layers;
  size_t joined = 0;
  for (int i = 0; i < 60; ++i) {
    const fs::path l = dir / "store" / fmt::format("{:064x}-{}", i, std::string(40, 'l'));
    fs::create_directories(l);
    std::ofstream(l / "who") << i;
    std::ofstream(l / fmt::format("only-{}", i)) << i;
    layers.push_back(l.string());
    joined += l.string().size() + 1;
  }
  ASSERT_GT(joined, kMaxOverlayOptionBytes);
  for (size_t n : {size_t{2}, layers.size()}) {
    const fs::path run = dir / fmt::format("run-{}", n);
    for (const char* d : {"upper", "work", "merged"}) fs::create_directories(run / d);
    std::vector<std::string> stack(layers.begin(), layers.begin() + n);
    stack.push_back(layers[0]);  // a layer an image repeats: the kernel takes a dir once
    const Status s = MountOverlay(stack, (run / "upper").string(), (run / "work").string(), (run / "merged").string());
    ASSERT_TRUE(s.ok()) << n << " layers: " << s.ToString();
    {
      std::ifstream who(run / "merged" / "who");
      EXPECT_EQ(std::string(std::istreambuf_iterator<char>(who), {}), "0") << n << " layers";
    }
    EXPECT_TRUE(fs::exists(run / "merged" / fmt::format("only-{}", n - 1))) << n << " layers";
    EXPECT_FALSE(fs::exists(run / "merged" / fmt::format("only-{}", n))) << n << " layers";
    EXPECT_EQ(umount2((run / "merged").c_str(), 0), 0);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ringmaster::agent
