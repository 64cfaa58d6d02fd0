// The ContainerRuntime contract, run unchanged on runc and docker: Prepare
// gives a command that runs the task in its image, Release removes what
// Prepare made, RemoveOrphans removes this agent's containers of unknown
// keys and no others. The commands run here as the shim would run them.
// Needs root; docker needs a dockerd, which this process starts once for all
// its docker cases (one CTest entry). A backend the host cannot offer is
// skipped, saying why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "agent/container/docker/docker_runtime.h"
#include "agent/container/docker/testing/dockerd.h"
#include "agent/container/runc/runc_runtime.h"
#include "agent/executor/task_users.h"
#include "common/files.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A command as the shim runs it: as root, output to a file.
struct Running {
  pid_t pid = -1;
  std::string out;
};

// What it wrote so far ("" before its file is there).
std::string Output(const std::string& out) {
  StatusOr<std::string> text = ReadFile(out);
  return text.ok() ? *text : std::string();
}

Running Spawn(const std::vector<std::string>& argv, const std::string& out) {
  Running r{fork(), out};
  if (r.pid == 0) {
    const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    dup2(in, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return r;
}

// Its exit status once it ended within `limit`; nullopt otherwise.
std::optional<int> Wait(Running& r, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(r.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
  r.pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class ContainerRuntimeContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "containers need root";
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    static int tests = 0;
    instance_ = "ct" + std::to_string(getpid()) + "-" + std::to_string(++tests);
    dir_ = fs::temp_directory_path() / ("rm-runtime-contract-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "image");
    chmod(dir_.c_str(), 0755);
    chmod((dir_ / "image").c_str(), 0755);
    if (GetParam() == "runc") {
      auto runc = RuncRuntime::Find("runc");
      if (!runc.ok()) GTEST_SKIP() << "no runc: " << runc.status().ToString();
      runtime_ = std::make_unique<RuncRuntime>(*runc, (dir_ / "runc").string());
    } else {
      std::string why_not;
      testing::Dockerd* dockerd = testing::ProcessDockerd(&why_not);
      if (!why_not.empty()) GTEST_SKIP() << why_not;
      runtime_ = std::make_unique<DockerRuntime>(dockerd->socket(), RINGMASTER_BIN);
    }
    image_.name = "rmcontract";
    image_.digest = std::string(64, 'd');
    image_.tar = (dir_ / "image" / "rootfs.tar").string();
    image_.layers = {(dir_ / "image" / "rootfs").string()};
    Status built = testing::BuildImageTar(dir_ / "image", image_.tar);
    ASSERT_TRUE(built.ok()) << built.ToString();
    auto users = TaskUsers::Create({});
    ASSERT_TRUE(users.ok()) << users.status().ToString();
    identity_ = users->Resolve(7, "alice").value();
  }

  void TearDown() override {
    for (auto& [key, r] : running_) {
      if (r.pid <= 0) continue;
      kill(r.pid, SIGKILL);
      (void)Wait(r, 10s);
    }
    if (runtime_) {
      runtime_->RemoveOrphans(instance_, {});
      for (const auto& [key, t] : tasks_) runtime_->Release(key, t.id, t.task_dir);
    }
    std::error_code ec;
    for (const auto& [key, t] : tasks_) {  // the cgroups the containers went into, best effort
      for (const auto& h : fs::directory_iterator("/sys/fs/cgroup", ec)) {
        rmdir((h.path().string() + t.cgroup_parent + "/task").c_str());
        rmdir((h.path().string() + t.cgroup_parent).c_str());
      }
    }
    fs::remove_all(dir_);
  }

  // Prepares task `key` running `script` under /bin/sh.
  StatusOr<ContainerRuntime::Command> Prepare(const std::string& key, const std::string& script) {
    auto& launch = launches_[key];
    launch.key = key;
    launch.argv = {"/bin/sh", "-c", script};
    launch.identity = identity_;
    launch.runtime = GetParam();
    launch.image = image_;
    launch.network = "none";
    ContainerTask& t = tasks_[key];
    t.key = key;
    t.id = "rm-" + instance_ + "-" + key;
    t.task_dir = (dir_ / "tasks" / key).string();
    fs::create_directories(t.task_dir);
    t.launch = &launch;
    t.env = {{"PATH", "/bin:/usr/bin"}};
    t.cwd = "/";
    t.cgroup_parent = "/rm-runtime-contract-" + instance_ + "-" + key;
    t.labels = {{"ringmaster.agent", instance_}, {"ringmaster.key", key}};
    return runtime_->Prepare(t);
  }

  // Starts task `key`'s command in the background, then waits for `ready` in its output.
  void StartRunning(const std::string& key, const ContainerRuntime::Command& c) {
    Running& r = running_[key] = Spawn(c.argv, (dir_ / (key + ".out")).string());
    for (int i = 0; i < 3000 && Output(r.out).find("ready") == std::string::npos; ++i) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_NE(Output(r.out).find("ready"), std::string::npos) << Output(r.out);
  }

  std::string instance_;
  fs::path dir_;
  std::unique_ptr<ContainerRuntime> runtime_;
  TaskLaunch::Image image_;
  TaskIdentity identity_;
  std::map<std::string, TaskLaunch> launches_;
  std::map<std::string, ContainerTask> tasks_;
  std::map<std::string, Running> running_;
};

TEST_P(ContainerRuntimeContract, NamesItself) { EXPECT_EQ(runtime_->Name(), GetParam()); }

TEST_P(ContainerRuntimeContract, PrepareGivesACommandThatRunsTheTaskInItsImage) {
  auto c = Prepare("1.1", "echo in the image; exit 5");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_FALSE(c->argv.empty());
  Running r = Spawn(c->argv, (dir_ / "1.1.out").string());
  auto status = Wait(r, 120s);
  ASSERT_TRUE(status.has_value()) << "the task did not end";
  EXPECT_EQ(*status, 5) << Output(r.out);
  EXPECT_NE(Output(r.out).find("in the image"), std::string::npos) << Output(r.out);
  if (!c->cleanup.empty()) {
    Running clean = Spawn(c->cleanup, (dir_ / "1.1.cleanup").string());
    EXPECT_EQ(Wait(clean, 60s), std::optional<int>(0)) << Output(clean.out);
  }
}

TEST_P(ContainerRuntimeContract, ReleaseEndsAndRemovesWhatPrepareMade) {
  auto c = Prepare("1.1", "echo ready; while :; do sleep 0.05; done");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StartRunning("1.1", *c);
  const ContainerTask& t = tasks_["1.1"];
  runtime_->Release("1.1", t.id, t.task_dir);
  EXPECT_TRUE(Wait(running_["1.1"], 60s).has_value()) << "the task outlived its Release";
  runtime_->Release("1.1", t.id, t.task_dir);  // idempotent
  // Nothing of it left: the key prepares again from scratch.
  auto again = Prepare("1.1", "echo again");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Running r = Spawn(again->argv, (dir_ / "again.out").string());
  EXPECT_EQ(Wait(r, 120s), std::optional<int>(0)) << Output(r.out);
  EXPECT_NE(Output(r.out).find("again"), std::string::npos);
}

// runc never asks for the image's tar (it runs the unpacked layers); Docker
// asks only while its dockerd lacks the image, so a node whose tar runc has
// deleted does not pull the image again for every Docker task.
TEST_P(ContainerRuntimeContract, TheImagesTarIsAskedForOnlyWhileTheRuntimeLacksTheImage) {
  int asked = 0;
  image_.fetch_tar = [&asked] {
    ++asked;
    return Status::Ok();
  };
  auto first = Prepare("4.1", "true");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_LE(asked, GetParam() == "docker" ? 1 : 0);
  const int after_first = asked;
  auto second = Prepare("4.2", "true");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(asked, after_first);  // the image is there now
  if (GetParam() != "docker") return;
  // An image this dockerd never had, whose tar cannot be fetched: the task
  // does not start, and says why.
  image_.digest = std::string(64, 'e');
  image_.fetch_tar = [&asked] {
    ++asked;
    return Unavailable("the files service is away");
  };
  auto third = Prepare("4.3", "true");
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("the files service is away"), std::string::npos) << third.status().ToString();
  EXPECT_EQ(asked, after_first + 1);
}

TEST_P(ContainerRuntimeContract, RemoveOrphansRemovesOnlyUnknownKeysOfThisAgent) {
  for (const std::string key : {"1.1", "2.1"}) {
    auto c = Prepare(key, "echo ready; while :; do sleep 0.05; done");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    StartRunning(key, *c);
  }
  runtime_->RemoveOrphans("ct-another-agent", {});
  runtime_->RemoveOrphans(instance_, {"1.1"});
  EXPECT_TRUE(Wait(running_["2.1"], 60s).has_value()) << "the orphan still runs";
  EXPECT_FALSE(Wait(running_["1.1"], 500ms).has_value()) << "a known task was removed";
}

INSTANTIATE_TEST_SUITE_P(Backends, ContainerRuntimeContract, ::testing::Values("runc", "docker"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ringmaster::agent
