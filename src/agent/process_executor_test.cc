// Runs real processes through the real shim (the ringmaster binary).
#include "agent/process_executor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "common/files.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;

class ProcessExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rm_exec_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    exec_ = Make();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ProcessExecutor> Make() { return std::make_unique<ProcessExecutor>(dir_.string(), RINGMASTER_BIN); }

  TaskLaunch Launch(const std::string& key, std::vector<std::string> argv) {
    TaskLaunch l;
    l.key = key;
    l.argv = std::move(argv);
    l.env = {{"PATH", "/usr/bin:/bin"}, {"MARK", key}};
    l.meta_json = R"({"task_id": 7})";
    return l;
  }

  // Polls until the task ends; fails the test if it runs past `limit`
  // (a hang guard, not a timing assertion).
  TaskExit WaitExit(Executor& e, const std::string& key, std::chrono::seconds limit = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto x = e.Poll(key)) return *x;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "task " << key << " did not end";
    return {};
  }

  pid_t TaskPgid(const std::string& key) {
    for (int i = 0; i < 500; ++i) {
      auto text = ReadFile((dir_ / "tasks" / key / "task.pid").string());
      if (text.ok()) return static_cast<pid_t>(std::stol(*text));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

  fs::path dir_;
  std::unique_ptr<ProcessExecutor> exec_;
};

TEST_F(ProcessExecutorTest, RunsACommandCapturingOutputAndExitCode) {
  ASSERT_TRUE(exec_->Start(Launch("1.1", {"/bin/sh", "-c", "echo out $MARK; echo err >&2; exit 3"})).ok());
  TaskExit e = WaitExit(*exec_, "1.1");
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.signal, 0);
  EXPECT_TRUE(e.message.empty());
  auto log = ReadFile(exec_->LogPath("1.1"));
  ASSERT_TRUE(log.ok());
  EXPECT_NE(log->find("out 1.1\n"), std::string::npos);
  EXPECT_NE(log->find("err\n"), std::string::npos);
}

TEST_F(ProcessExecutorTest, StopKillsTheWholeProcessGroup) {
  ASSERT_TRUE(exec_->Start(Launch("2.1", {"/bin/sh", "-c", "sleep 600 & sleep 600 & wait"})).ok());
  pid_t pgid = TaskPgid("2.1");
  ASSERT_GT(pgid, 0);
  EXPECT_EQ(kill(-pgid, 0), 0);
  ASSERT_TRUE(exec_->Stop("2.1", std::chrono::seconds(5)).ok());
  TaskExit e = WaitExit(*exec_, "2.1");
  EXPECT_EQ(e.signal, SIGTERM);
  // The shim reaps the group: nothing of the task is left.
  EXPECT_EQ(kill(-pgid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(ProcessExecutorTest, ATaskIgnoringSigtermIsKilledAfterTheGracePeriod) {
  ASSERT_TRUE(exec_->Start(Launch("3.1", {"/bin/sh", "-c", "trap '' TERM; echo ready; sleep 600"})).ok());
  ASSERT_GT(TaskPgid("3.1"), 0);
  for (int i = 0; i < 500; ++i) {  // wait until the trap is installed
    auto log = ReadFile(exec_->LogPath("3.1"));
    if (log.ok() && log->find("ready") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(exec_->Stop("3.1", std::chrono::milliseconds(300)).ok());
  TaskExit e = WaitExit(*exec_, "3.1");
  EXPECT_EQ(e.signal, SIGKILL);
}

TEST_F(ProcessExecutorTest, ReportsACommandThatCannotStart) {
  ASSERT_TRUE(exec_->Start(Launch("4.1", {"/no/such/program"})).ok());
  TaskExit e = WaitExit(*exec_, "4.1");
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_NE(e.message.find("cannot run \"/no/such/program\": No such file or directory"), std::string::npos) << e.message;

  TaskLaunch bad_dir = Launch("4.2", {"/bin/true"});
  bad_dir.working_dir = "/no/such/dir";
  ASSERT_TRUE(exec_->Start(bad_dir).ok());
  e = WaitExit(*exec_, "4.2");
  EXPECT_NE(e.message.find("cannot enter working_dir /no/such/dir"), std::string::npos) << e.message;
}

TEST_F(ProcessExecutorTest, TasksOutliveTheExecutorAndAreReadopted) {
  ASSERT_TRUE(exec_->Start(Launch("5.1", {"/bin/sh", "-c", "sleep 0.5; echo finished"})).ok());
  ASSERT_GT(TaskPgid("5.1"), 0);
  exec_.reset();  // the agent goes away; the task does not

  auto fresh = Make();
  auto recovered = fresh->Recover();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered["5.1"], R"({"task_id": 7})");
  TaskExit e = WaitExit(*fresh, "5.1");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_NE(ReadFile(fresh->LogPath("5.1"))->find("finished"), std::string::npos);
  fresh->Release("5.1");
  EXPECT_TRUE(fresh->Recover().empty());
}

TEST_F(ProcessExecutorTest, DuplicateKeysAreRefused) {
  ASSERT_TRUE(exec_->Start(Launch("8.1", {"/bin/true"})).ok());
  EXPECT_EQ(exec_->Start(Launch("8.1", {"/bin/true"})).code(), StatusCode::kAlreadyExists);
  WaitExit(*exec_, "8.1");
}

}  // namespace
}  // namespace ringmaster::agent
