// The Executor contract: one suite, run unchanged on every backend. "fake"
// (FakeExecutor) is a unit test; "process", "runc" and "docker" run real
// tasks under the shim (the ringmaster binary) and are integration tests:
// runc and docker need root, and docker a dockerd, which this process starts
// once for all its docker cases (one CTest entry). A backend the host cannot
// offer is skipped, saying why. Tasks are scripts the fake plays by hand.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/container/docker/docker_runtime.h"
#include "agent/container/docker/testing/dockerd.h"
#include "agent/container/runc/runc_runtime.h"
#include "agent/executor/fake_executor.h"
#include "agent/executor/process_executor.h"
#include "common/files.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A file's text; "" when it cannot be read.
std::string Text(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? *text : "";
}

// What a task does: writes `output`, then exits with `exit_code`, or, when
// `forever`, runs until stopped (ignoring SIGTERM when `ignore_term`).
struct Script {
  std::string output;
  int exit_code = 0;
  bool forever = false;
  bool ignore_term = false;
};

class ExecutorContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    auto users = TaskUsers::Create({});
    ASSERT_TRUE(users.ok()) << users.status().ToString();
    users_ = *users;
    dir_ = fs::temp_directory_path() / ("rm-exec-contract-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    chmod(dir_.c_str(), 0755);  // task users pass through to their sandboxes
    const std::string& backend = GetParam();
    if (backend != "fake" && backend != "process" && geteuid() != 0) GTEST_SKIP() << backend << " needs root";
    if (backend == "runc") {
      auto runc = RuncRuntime::Find("runc");
      if (!runc.ok()) GTEST_SKIP() << "no runc: " << runc.status().ToString();
      runc_ = *runc;
      ASSERT_TRUE(BuildImage(dir_ / "image").ok());
    }
    if (backend == "docker") {
      std::string why_not;
      dockerd_ = testing::ProcessDockerd(&why_not);
      if (!why_not.empty()) GTEST_SKIP() << why_not;
      ASSERT_TRUE(BuildImage(dir_ / "image").ok());
    }
    Restart();
    ASSERT_NE(exec_, nullptr);
  }
  void TearDown() override {
    if (exec_) {
      for (const auto& [key, meta] : exec_->Recover()) {
        (void)exec_->Stop(key, 0ms);
        WaitExit(key);
        exec_->Release(key);
      }
    }
    exec_.reset();
    fs::remove_all(dir_);
  }

  Status BuildImage(const fs::path& at) {
    fs::create_directories(at);
    chmod(at.c_str(), 0755);
    image_.name = "rmcontract";
    image_.digest = std::string(64, 'c');
    image_.tar = (at / "rootfs.tar").string();
    image_.layers = {(at / "rootfs").string()};
    image_.env = {{"PATH", "/bin:/usr/bin"}};
    return testing::BuildImageTar(at, image_.tar);
  }

  // A new executor over the same node: what an agent restart sees.
  void Restart() {
    exec_.reset();
    fake_ = nullptr;
    if (GetParam() == "fake") {
      FakeExecutorOptions o;
      o.sandbox_dir = (dir_ / "sandboxes").string();
      auto f = std::make_unique<FakeExecutor>(o, fake_node_);
      fake_node_ = f->node();
      fake_ = f.get();
      exec_ = std::move(f);
      return;
    }
    Make(dir_ / "agent", dir_ / "runc");
  }

  // A ProcessExecutor of the backend with its data dir at `state`, runc's
  // state at `runc_root`, and runc's upper dirs in `scratch` ("" = the task's control dir).
  void Make(const fs::path& state, const fs::path& runc_root, const std::string& scratch = "") {
    ProcessExecutorOptions o;
    o.state_dir = state.string();
    o.sandbox_root = (dir_ / "sandboxes").string();
    o.shim_binary = RINGMASTER_BIN;
    o.disk_check_interval = 100ms;
    o.disk_stop_grace = 1s;
    if (GetParam() == "runc") o.runtimes["runc"] = std::make_shared<RuncRuntime>(runc_, runc_root.string(), scratch);
    if (GetParam() == "docker") {
      o.runtimes["docker"] = std::make_shared<DockerRuntime>(dockerd_->socket(), RINGMASTER_BIN);
    }
    auto e = ProcessExecutor::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    exec_ = std::move(*e);
  }

  TaskLaunch Launch(const std::string& key, const Script& s) {
    TaskLaunch l;
    l.key = key;
    l.identity = users_.Resolve(7, "alice").value();
    l.meta_json = R"({"task_id": 7, "key": ")" + key + "\"}";
    l.env = {{"PATH", "/bin:/usr/bin"}, {"OUT", s.output}};
    std::string script = "printf '%s' \"$OUT\"; ";
    if (s.ignore_term) script = "trap '' TERM; " + script;
    script += s.forever ? "while :; do sleep 0.05; done" : "exit " + std::to_string(s.exit_code);
    l.argv = {"/bin/sh", "-c", script};
    if (GetParam() == "runc" || GetParam() == "docker") {
      l.runtime = GetParam();
      l.image = image_;
      l.network = "none";
    }
    return l;
  }

  // Starts `launch`, which does what `s` says (the fake is told to).
  Status Begin(const TaskLaunch& launch, const Script& s) {
    RM_RETURN_IF_ERROR(exec_->Start(launch));
    if (fake_) {
      if (s.ignore_term) fake_->IgnoreTerm(launch.key);
      fake_->Write(launch.key, TaskOutput::kLog, s.output);
      if (!s.forever) fake_->Finish(launch.key, TaskExit{s.exit_code, 0, ""});
    }
    return Status::Ok();
  }
  Status Begin(const std::string& key, const Script& s) { return Begin(Launch(key, s), s); }

  // Polls until the task ends; fails the test past `limit` (a hang guard).
  TaskExit WaitExit(const std::string& key, std::chrono::seconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto x = exec_->Poll(key)) return *x;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "task " << key << " did not end";
    return {};
  }

  std::string Log(const std::string& key) {
    auto chunk = exec_->ReadOutput(key, TaskOutput::kLog, 0, 1 << 20);
    return chunk.ok() ? chunk->data : "";
  }

  void WaitForOutput(const std::string& key, const std::string& text) {
    for (int i = 0; i < 3000 && Log(key).find(text) == std::string::npos; ++i) std::this_thread::sleep_for(20ms);
    ASSERT_NE(Log(key).find(text), std::string::npos) << "task " << key << " never wrote " << text;
  }

  fs::path dir_;
  TaskUsers users_;
  std::string runc_;
  testing::Dockerd* dockerd_ = nullptr;
  TaskLaunch::Image image_;
  std::unique_ptr<Executor> exec_;
  FakeExecutor* fake_ = nullptr;
  std::shared_ptr<FakeExecutor::Node> fake_node_;
};

TEST_P(ExecutorContract, OffersTheRuntimeItRuns) {
  const std::string want = GetParam() == "fake" ? "process" : GetParam();
  const auto runtimes = exec_->Runtimes();
  EXPECT_NE(std::find(runtimes.begin(), runtimes.end(), want), runtimes.end());
}

TEST_P(ExecutorContract, ATaskEndsWithItsExitCodeAndItsOutput) {
  ASSERT_TRUE(Begin("1.1", Script{"hello contract\n", 3}).ok());
  TaskExit e = WaitExit("1.1");
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(Log("1.1"), "hello contract\n");
}

TEST_P(ExecutorContract, OutputIsReadByOffset) {
  ASSERT_TRUE(Begin("1.1", Script{"0123456789abcde\n"}).ok());
  EXPECT_EQ(WaitExit("1.1").exit_code, 0);
  auto mid = exec_->ReadOutput("1.1", TaskOutput::kLog, 4, 6);
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  EXPECT_EQ(mid->data, "456789");
  EXPECT_EQ(mid->size, 16);
  auto end = exec_->ReadOutput("1.1", TaskOutput::kLog, 16, 100);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(end->data, "");
  EXPECT_EQ(end->size, 16);
}

TEST_P(ExecutorContract, AKeyStartsOnce) {
  ASSERT_TRUE(Begin("1.1", Script{"", 0, true}).ok());
  EXPECT_EQ(exec_->Start(Launch("1.1", Script{})).code(), StatusCode::kAlreadyExists);
}

TEST_P(ExecutorContract, PollSaysRunningUntilStopEndsItWithinItsGrace) {
  ASSERT_TRUE(Begin("1.1", Script{"ready\n", 0, true}).ok());
  WaitForOutput("1.1", "ready");
  EXPECT_FALSE(exec_->Poll("1.1").has_value());
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(exec_->Stop("1.1", 60s).ok());
  TaskExit e = WaitExit("1.1", 120s);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 60s) << "SIGTERM ends it before the grace";
  EXPECT_TRUE(e.signal != 0 || e.exit_code != 0) << "a stopped task did not succeed";
  EXPECT_TRUE(exec_->Stop("1.1", 1s).ok()) << "Stop is idempotent";
}

TEST_P(ExecutorContract, StopKillsATaskThatIgnoresTermOnceTheGraceHasPassed) {
  ASSERT_TRUE(Begin("1.1", Script{"ready\n", 0, true, true}).ok());
  WaitForOutput("1.1", "ready");
  ASSERT_TRUE(exec_->Stop("1.1", 300ms).ok());
  TaskExit e = WaitExit("1.1");
  EXPECT_TRUE(e.signal == SIGKILL || e.exit_code == 128 + SIGKILL) << e.exit_code << " " << e.signal;
}

TEST_P(ExecutorContract, StopOfAnUnknownTaskIsNotFound) {
  EXPECT_EQ(exec_->Stop("9.9", 1s).code(), StatusCode::kNotFound);
}

TEST_P(ExecutorContract, PrepareStagesIntoTheWorkDirBeforeTheStart) {
  Script s{"", 0, true};
  TaskLaunch l = Launch("1.1", s);
  l.prepare = [](int work_fd) {
    const int fd = openat(work_fd, "staged", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Internal("openat staged");
    const bool ok = write(fd, "input", 5) == 5;
    close(fd);
    return ok ? Status::Ok() : Internal("write staged");
  };
  ASSERT_TRUE(Begin(l, s).ok());
  auto sandbox = exec_->SandboxOf("1.1");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  EXPECT_EQ(Text(sandbox->dir + "/work/staged"), "input");

  TaskLaunch bad = Launch("2.1", s);
  bad.prepare = [](int) { return Unavailable("the files service is down"); };
  Status st = exec_->Start(bad);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
}

TEST_P(ExecutorContract, ExitFdIsReadableOnceTheTaskEnded) {
  ASSERT_TRUE(Begin("1.1", Script{"ready\n", 0, true}).ok());
  WaitForOutput("1.1", "ready");
  const int fd = exec_->ExitFd("1.1");
  if (fd < 0) GTEST_SKIP() << "this executor has no exit fd (callers poll)";
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "readable while the task runs";
  ASSERT_TRUE(exec_->Stop("1.1", 60s).ok());
  EXPECT_EQ(poll(&p, 1, 60000), 1);
  close(fd);
  EXPECT_TRUE(exec_->Poll("1.1").has_value()) << "ended once its fd said so";
}

TEST_P(ExecutorContract, TasksOutliveTheExecutorAndAreRecoveredWithTheirMeta) {
  ASSERT_TRUE(Begin("1.1", Script{"ready\n", 0, true}).ok());
  ASSERT_TRUE(Begin("2.1", Script{"done\n", 4}).ok());
  WaitForOutput("1.1", "ready");
  EXPECT_EQ(WaitExit("2.1").exit_code, 4);
  Restart();
  ASSERT_NE(exec_, nullptr);
  auto found = exec_->Recover();
  EXPECT_EQ(found, (std::map<std::string, std::string>{{"1.1", R"({"task_id": 7, "key": "1.1"})"},
                                                       {"2.1", R"({"task_id": 7, "key": "2.1"})"}}));
  EXPECT_FALSE(exec_->Poll("1.1").has_value()) << "still running";
  EXPECT_EQ(exec_->Poll("2.1").value_or(TaskExit{}).exit_code, 4);
  EXPECT_EQ(Log("1.1"), "ready\n");
  ASSERT_TRUE(exec_->Stop("1.1", 60s).ok());
  TaskExit e = WaitExit("1.1");
  EXPECT_TRUE(e.signal != 0 || e.exit_code != 0);
}

TEST_P(ExecutorContract, ReleaseForgetsAnEndedTaskAndItsFiles) {
  ASSERT_TRUE(Begin("1.1", Script{"bye\n", 0}).ok());
  WaitExit("1.1");
  auto sandbox = exec_->SandboxOf("1.1");
  ASSERT_TRUE(sandbox.ok()) << sandbox.status().ToString();
  exec_->Release("1.1");
  EXPECT_EQ(exec_->Recover().count("1.1"), 0u);
  EXPECT_EQ(exec_->SandboxOf("1.1").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(sandbox->dir));
  EXPECT_EQ(exec_->ReadOutput("1.1", TaskOutput::kLog, 0, 10).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(Begin("1.1", Script{"again\n", 0}).ok()) << "a released key starts anew";
  WaitExit("1.1");
  EXPECT_EQ(Log("1.1"), "again\n");
}

// The kubelet's ephemeral-storage eviction: a task whose sandbox grows past
// its disk limit is stopped, and its exit names the limit; a task beside it
// within its own limit runs on.
TEST_P(ExecutorContract, ATaskPastItsDiskLimitIsStoppedNamingItAndItsNeighbourRunsOn) {
  if (fake_) GTEST_SKIP() << "the fake keeps no files";
  TaskLaunch big = Launch("1.1", Script{"", 0, true});
  big.argv = {"/bin/sh", "-c", "head -c 64000000 /dev/zero > \"$RINGMASTER_WORK_DIR/fill\"; echo written; sleep 600"};
  big.disk_bytes = 8 << 20;
  TaskLaunch small = Launch("2.1", Script{"", 0, true});
  small.argv = {"/bin/sh", "-c", "head -c 1000000 /dev/zero > \"$RINGMASTER_WORK_DIR/fill\"; echo written; sleep 600"};
  small.disk_bytes = 8 << 20;
  ASSERT_TRUE(exec_->Start(big).ok());
  ASSERT_TRUE(exec_->Start(small).ok());
  const TaskExit e = WaitExit("1.1");
  EXPECT_NE(e.message.find("of its 8Mi disk limit"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.rfind("used ", 0), 0u) << e.message;
  WaitForOutput("2.1", "written");
  std::this_thread::sleep_for(500ms);  // several measurements
  EXPECT_FALSE(exec_->Poll("2.1").has_value()) << exec_->Poll("2.1")->message;
}

// A runc container writing to its root writes to its upper dir, which is
// on a file system of its own the size of its disk limit: the task runs out
// of room (or is stopped), never the node's data dir (a small tmpfs here).
TEST_P(ExecutorContract, AContainerFillingItsRootFillsOnlyItsOwnDisk) {
  if (GetParam() != "runc") GTEST_SKIP() << "runc's upper dir; docker's writable layer is dockerd's";
  const fs::path data = dir_ / "small";
  fs::create_directories(data);
  ASSERT_EQ(mount("tmpfs", data.c_str(), "tmpfs", 0, "size=48m,mode=0755"), 0) << strerror(errno);
  struct Unmount {
    fs::path at;
    ~Unmount() { umount2(at.c_str(), MNT_DETACH); }
  } unmount{data};
  exec_.reset();
  Make(data / "agent", data / "runc", (dir_ / "scratch").string());
  ASSERT_NE(exec_, nullptr);
  auto free_bytes = [&] {
    struct statvfs sv {};
    statvfs(data.c_str(), &sv);
    return static_cast<int64_t>(sv.f_bavail) * static_cast<int64_t>(sv.f_frsize);
  };
  const int64_t before = free_bytes();
  TaskLaunch l = Launch("1.1", Script{"", 0, true});
  l.argv = {"/bin/sh", "-c", "head -c 64000000 /dev/zero > /tmp/fill; echo wrote $?; sleep 600"};
  l.disk_bytes = 8 << 20;
  ASSERT_TRUE(exec_->Start(l).ok());
  const TaskExit e = WaitExit("1.1");
  EXPECT_NE(e.message.find("disk limit"), std::string::npos) << e.message << "\n" << Log("1.1");
  EXPECT_GT(free_bytes(), before - (4 << 20)) << "the task's writes reached the data dir's file system";
  exec_->Release("1.1");
  EXPECT_FALSE(fs::exists(dir_ / "scratch" / ("rm-" + static_cast<ProcessExecutor*>(exec_.get())->instance() + "-1.1.img")));
  exec_.reset();
}

INSTANTIATE_TEST_SUITE_P(Backends, ExecutorContract, ::testing::Values("fake", "process", "runc", "docker"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ringmaster::agent
