// Runs real processes through the real shim (the ringmaster binary). As
// root (CI), tasks run as unprivileged uids from the default range, and the
// tests check what that isolates; the tests that need root skip otherwise.
#include "agent/executor/process_executor.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/executor/shim.h"
#include "common/files.h"

namespace ringmaster::agent {
namespace {

namespace fs = std::filesystem;

bool IsRoot() { return geteuid() == 0; }

class ProcessExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rm_exec_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    chmod(dir_.c_str(), 0755);  // task users pass through to their sandboxes
    auto users = TaskUsers::Create({});
    ASSERT_TRUE(users.ok()) << users.status().ToString();
    users_ = *users;
    exec_ = Make();
  }
  void TearDown() override {
    exec_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<ProcessExecutor> Make(ProcessExecutorOptions o = {}, const std::string& data = "agent") {
    o.state_dir = (dir_ / data).string();
    o.sandbox_root = (dir_ / "sandboxes").string();
    o.shim_binary = RINGMASTER_BIN;
    auto e = ProcessExecutor::Create(o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // User `id` as this node maps it: uid 200000+id when root.
  TaskIdentity Who(int64_t id, const std::string& name = "alice") { return users_.Resolve(id, name).value(); }

  TaskLaunch Launch(const std::string& key, std::vector<std::string> argv, int64_t user = 7) {
    TaskLaunch l;
    l.key = key;
    l.argv = std::move(argv);
    l.env = {{"PATH", "/usr/bin:/bin"}, {"MARK", key}};
    l.identity = Who(user);
    l.meta_json = R"({"task_id": 7})";
    return l;
  }

  // Polls until the task ends; fails the test if it runs past `limit`
  // (a hang guard, not a timing assertion).
  TaskExit WaitExit(Executor& e, const std::string& key, std::chrono::seconds limit = std::chrono::seconds(30)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto x = e.Poll(key)) return *x;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "task " << key << " did not end";
    return {};
  }

  // The whole of a task's output.
  std::string Output(Executor& e, const std::string& key, TaskOutput what = TaskOutput::kLog) {
    auto chunk = e.ReadOutput(key, what, 0, 256 << 20);
    return chunk.ok() ? chunk->data : "";
  }

  // Runs a task to its end; returns its log.
  std::string Run(TaskLaunch launch, TaskExit* exit = nullptr) {
    EXPECT_TRUE(exec_->Start(launch).ok());
    TaskExit e = WaitExit(*exec_, launch.key);
    if (exit) *exit = e;
    return Output(*exec_, launch.key);
  }

  pid_t TaskPgid(const std::string& key) {
    for (int i = 0; i < 500; ++i) {
      auto text = ReadFile(exec_->TaskDir(key) + "/task.pid");
      if (text.ok()) return static_cast<pid_t>(std::stol(*text));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

  void WaitForLine(const std::string& key, const std::string& line) {
    for (int i = 0; i < 1000; ++i) {
      if (Output(*exec_, key).find(line) != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "task " << key << " never printed " << line;
  }

  fs::path dir_;
  TaskUsers users_;
  std::unique_ptr<ProcessExecutor> exec_;
};

TEST_F(ProcessExecutorTest, RunsACommandCapturingOutputAndExitCode) {
  TaskExit e;
  std::string log = Run(Launch("1.1", {"/bin/sh", "-c", "echo out $MARK; echo err >&2; exit 3"}), &e);
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.signal, 0);
  EXPECT_TRUE(e.message.empty());
  EXPECT_NE(log.find("out 1.1\n"), std::string::npos);
  EXPECT_NE(log.find("err\n"), std::string::npos);
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
  WaitForLine("3.1", "ready");  // the trap is installed
  ASSERT_TRUE(exec_->Stop("3.1", std::chrono::milliseconds(300)).ok());
  TaskExit e = WaitExit(*exec_, "3.1");
  EXPECT_EQ(e.signal, SIGKILL);
}

TEST_F(ProcessExecutorTest, ReportsACommandThatCannotStart) {
  const std::string who = Who(7).Describe();
  TaskExit e;
  Run(Launch("4.1", {"/no/such/program"}), &e);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_EQ(e.message, "cannot run \"/no/such/program\" as " + who + ": No such file or directory");

  TaskLaunch bad_dir = Launch("4.2", {"/bin/true"});
  bad_dir.working_dir = "/no/such/dir";
  Run(bad_dir, &e);
  EXPECT_EQ(e.message, "cannot enter working_dir /no/such/dir as " + who + ": No such file or directory");
}

TEST_F(ProcessExecutorTest, AWorkingDirTheTasksUserCannotEnterFailsInOneLine) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to switch uids";
  fs::create_directories(dir_ / "private");
  chmod((dir_ / "private").c_str(), 0700);  // like a checkout in /root
  TaskLaunch l = Launch("4.3", {"/bin/true"});
  l.working_dir = (dir_ / "private").string();
  TaskExit e;
  std::string log = Run(l, &e);
  EXPECT_EQ(e.exit_code, -1);
  EXPECT_EQ(e.message, "cannot enter working_dir " + l.working_dir + " as uid 200007 (user alice): Permission denied");
  EXPECT_NE(log.find("ringmaster: " + e.message + "\n"), std::string::npos) << log;
}

TEST_F(ProcessExecutorTest, ATaskRunsAsItsUsersUidWithNoNewPrivsAndItsOwnSandbox) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to switch uids";
  std::string log = Run(Launch("5.1", {"/bin/sh", "-c",
                                       "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); grep NoNewPrivs /proc/self/status; "
                                       "echo HOME=$HOME USER=$USER pwd=$(pwd); stat -c 'home=%u:%g:%a' \"$HOME\"; "
                                       "grep 'Max processes' /proc/self/limits; echo fds $(ls /proc/self/fd); touch \"$HOME/mine\" && echo wrote"}));
  EXPECT_NE(log.find("uid=200007 gid=200007 groups=200007\n"), std::string::npos) << log;
  EXPECT_NE(log.find("NoNewPrivs:\t1\n"), std::string::npos) << log;
  const std::string sandbox = exec_->sandbox_dir() + "/5.1";
  EXPECT_NE(log.find("HOME=" + sandbox + " USER=alice pwd=" + sandbox + "/work\n"), std::string::npos) << log;
  EXPECT_NE(log.find("home=200007:200007:700\n"), std::string::npos) << log;
  EXPECT_NE(log.find("Max processes             4096                 4096"), std::string::npos) << log;  // the default
  EXPECT_NE(log.find("wrote\n"), std::string::npos) << log;
  // Nothing of the shim's or the agent's: stdin, stdout, stderr and ls's own directory.
  EXPECT_NE(log.find("fds 0 1 2 3\n"), std::string::npos) << log;
  // The agent's own files are not the task's.
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "agent").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(ProcessExecutorTest, DroppingRootCannotBeUndone) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to switch uids";
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const char* script =
      "import os\n"
      "for name, call in [('setuid', lambda: os.setuid(0)), ('setgid', lambda: os.setgid(0)),\n"
      "                   ('setgroups', lambda: os.setgroups([0])), ('seteuid', lambda: os.seteuid(0))]:\n"
      "    try:\n"
      "        call(); print(name, 'worked')\n"
      "    except PermissionError:\n"
      "        print(name, 'refused')\n"
      "print('uid', os.getuid(), os.geteuid(), 'groups', os.getgroups())\n";
  std::string log = Run(Launch("6.1", {"/usr/bin/python3", "-c", script}));
  for (const char* call : {"setuid", "setgid", "setgroups", "seteuid"}) {
    EXPECT_NE(log.find(std::string(call) + " refused\n"), std::string::npos) << log;
  }
  EXPECT_NE(log.find("uid 200007 200007 groups []\n"), std::string::npos) << log;
}

// A process task may not make user namespaces (kernel surface runc and docker
// tasks are denied) nor reach io_uring; ordinary work (threads, fork) goes on.
TEST_F(ProcessExecutorTest, ATaskCannotMakeUserNamespacesNorUseIoUring) {
  if (!fs::exists("/usr/bin/unshare") || !fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no unshare or python3";
  TaskExit e;
  std::string log = Run(Launch("6.2", {"/usr/bin/unshare", "-U", "true"}), &e);
  EXPECT_NE(e.exit_code, 0) << log;
  EXPECT_NE(log.find("Operation not permitted"), std::string::npos) << log;
  const char* script =
      "import ctypes, os, threading\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "params = ctypes.create_string_buffer(120)\n"
      "r = libc.syscall(425, 8, params)\n"
      "print('io_uring_setup', r, os.strerror(ctypes.get_errno()))\n"
      "t = threading.Thread(target=lambda: print('thread ran')); t.start(); t.join()\n"
      "pid = os.fork()\n"
      "if pid == 0: os._exit(0)\n"
      "print('fork', os.waitpid(pid, 0)[1])\n";
  log = Run(Launch("6.3", {"/usr/bin/python3", "-c", script}), &e);
  EXPECT_EQ(e.exit_code, 0) << log;
  EXPECT_NE(log.find("io_uring_setup -1 Operation not permitted\n"), std::string::npos) << log;
  EXPECT_NE(log.find("thread ran\nfork 0\n"), std::string::npos) << log;
}

// `network: none` on the process executor is a network of the task's own with
// only its loopback: not the host's, where it would reach the node's services
// and other jobs without the host-network grant.
TEST_F(ProcessExecutorTest, ANetworkNoneTaskHasItsOwnLoopbackOnly) {
  if (!IsRoot()) GTEST_SKIP() << "needs root for a network namespace";
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no python3";
  const int host = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(host, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(host, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(listen(host, 4), 0);
  socklen_t len = sizeof(sa);
  ASSERT_EQ(getsockname(host, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const std::string port = std::to_string(ntohs(sa.sin_port));
  const std::string script =
      "import socket\n"
      "try:\n"
      "    socket.create_connection(('127.0.0.1', " + port + "), timeout=2); print('reached the host')\n"
      "except OSError as e:\n"
      "    print('refused', e.errno)\n"
      "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
      "c = socket.create_connection(s.getsockname(), timeout=2); print('own loopback up')\n";
  TaskLaunch none = Launch("7.9", {"/usr/bin/python3", "-c", script});
  none.network = "none";
  TaskExit e;
  const std::string log = Run(none, &e);
  close(host);
  EXPECT_EQ(e.exit_code, 0) << log;
  EXPECT_EQ(log.find("reached the host"), std::string::npos) << log;
  EXPECT_NE(log.find("own loopback up"), std::string::npos) << log;
}

TEST_F(ProcessExecutorTest, ATaskCannotReadTheAgentsFilesNorAnotherUsersEnvironment) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to switch uids";
  TaskLaunch bob = Launch("7.1", {"/bin/sh", "-c", "echo running; sleep 600"}, 8);
  bob.env["SECRET"] = "bob-s3cret-value";
  ASSERT_TRUE(exec_->Start(bob).ok());
  WaitForLine("7.1", "running");
  const pid_t bob_pid = TaskPgid("7.1");
  {  // what alice's task tries is there to be had
    std::ifstream env("/proc/" + std::to_string(bob_pid) + "/environ");
    std::string text((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    ASSERT_NE(text.find("SECRET=bob-s3cret-value"), std::string::npos);
  }
  std::string log = Run(Launch("7.2", {"/bin/sh", "-c",
                                       "for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null; done | tr '\\0' '\\n' | "
                                       "grep -c bob-s3cret; "
                                       "cat " + exec_->TaskDir("7.1") + "/spec.json || echo spec refused; "
                                       "ls " + exec_->sandbox_dir() + "/7.1 || echo sandbox refused; "
                                       "ls " + exec_->sandbox_dir() + " || echo listing refused"}));
  EXPECT_NE(log.find("0\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("bob-s3cret-value"), std::string::npos) << log;
  EXPECT_NE(log.find("spec refused"), std::string::npos) << log;
  EXPECT_NE(log.find("sandbox refused"), std::string::npos) << log;
  EXPECT_NE(log.find("listing refused"), std::string::npos) << log;
  ASSERT_TRUE(exec_->Stop("7.1", std::chrono::seconds(1)).ok());
  WaitExit(*exec_, "7.1");
}

TEST_F(ProcessExecutorTest, TheWorkDirIsStagedBeforeTheTaskAndItsFilesDirsAreTheUsers) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to switch uids";
  TaskLaunch l = Launch("8.1", {"/bin/sh", "-c",
                                "stat -c '%u %a' \"$RINGMASTER_WORK_DIR\" \"$RINGMASTER_CHECKPOINT_DIR\" \"$RINGMASTER_OUTPUT_DIR\"; "
                                "cat data/staged.txt; echo changed > data/staged.txt || echo refused; "
                                "touch \"$RINGMASTER_CHECKPOINT_DIR/x\" && echo wrote; pwd"}, 9);
  l.env["RINGMASTER_CHECKPOINT_DIR"] = "/etc";  // the platform's, whatever the job says
  uid_t work_owner = 0;
  l.prepare = [&](int work_fd) -> Status {
    struct stat st {};
    fstat(work_fd, &st);
    work_owner = st.st_uid;
    // As TaskFiles stages an input: a root-owned, read-only file in a dir of the user's.
    if (mkdirat(work_fd, "data", 0755) != 0 || fchownat(work_fd, "data", 200009, 200009, AT_SYMLINK_NOFOLLOW) != 0) {
      return Internal("mkdir data");
    }
    int fd = openat(work_fd, "data/staged.txt", O_WRONLY | O_CREAT | O_EXCL, 0444);
    if (fd < 0) return Internal("create");
    (void)!write(fd, "staged\n", 7);
    close(fd);
    return Status::Ok();
  };
  std::string log = Run(l);
  EXPECT_EQ(work_owner, 200009u);
  EXPECT_NE(log.find("200009 700\n200009 700\n200009 700\n"), std::string::npos) << log;
  EXPECT_NE(log.find("staged\n"), std::string::npos) << log;
  EXPECT_NE(log.find("refused"), std::string::npos) << log;  // an input is read-only
  EXPECT_NE(log.find("wrote"), std::string::npos) << log;
  EXPECT_NE(log.find(exec_->sandbox_dir() + "/8.1/work\n"), std::string::npos) << log;
  auto box = exec_->SandboxOf("8.1");
  ASSERT_TRUE(box.ok()) << box.status().ToString();
  EXPECT_EQ(box->dir, exec_->sandbox_dir() + "/8.1");
  EXPECT_EQ(box->uid, 200009u);

  // A staging that fails fails the start, and leaves nothing behind.
  TaskLaunch bad = Launch("8.2", {"/bin/true"}, 10);
  bad.prepare = [](int) { return Unavailable("the files service is down"); };
  Status st = exec_->Start(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "the files service is down");
  EXPECT_FALSE(fs::exists(exec_->TaskDir("8.2")));
  EXPECT_FALSE(fs::exists(exec_->sandbox_dir() + "/8.2"));
}

TEST_F(ProcessExecutorTest, AMetricsFileTheTaskReplacedIsNotRead) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to switch uids";
  const fs::path secret = dir_ / "admin.token";
  std::ofstream(secret) << "{\"stolen\": \"admin-token\"}\n";
  chmod(secret.c_str(), 0600);
  Run(Launch("9.1", {"/bin/sh", "-c", "echo '{\"loss\": 1}' > $RINGMASTER_METRICS_FILE"}));
  EXPECT_EQ(Output(*exec_, "9.1", TaskOutput::kMetrics), "{\"loss\": 1}\n");

  Run(Launch("9.2", {"/bin/sh", "-c", "ln -s " + secret.string() + " $RINGMASTER_METRICS_FILE"}));
  auto chunk = exec_->ReadOutput("9.2", TaskOutput::kMetrics, 0, 1 << 20);
  ASSERT_FALSE(chunk.ok());
  EXPECT_EQ(chunk.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(chunk.status().message(), "$RINGMASTER_METRICS_FILE: metrics.jsonl is a symlink");

  Run(Launch("9.3", {"/bin/sh", "-c", "mkfifo $RINGMASTER_METRICS_FILE"}));
  chunk = exec_->ReadOutput("9.3", TaskOutput::kMetrics, 0, 1 << 20);  // a hang here would be the bug
  ASSERT_FALSE(chunk.ok());
  EXPECT_EQ(chunk.status().message(), "$RINGMASTER_METRICS_FILE: metrics.jsonl is not a regular file");
}

TEST_F(ProcessExecutorTest, ReleaseRemovesTheSandboxWithoutFollowingPlantedSymlinks) {
  fs::create_directories(dir_ / "outside");
  std::ofstream(dir_ / "outside" / "precious") << "keep";
  const std::string out = (dir_ / "outside").string();
  Run(Launch("10.1", {"/bin/sh", "-c",
                      "ln -s " + out + " $HOME/evil; mkdir -p $HOME/a/b; ln -s " + out + " $HOME/a/b/deeper; "
                      "ln -s " + out + "/precious $HOME/a/file; chmod 000 $HOME/a/b"}));
  const fs::path sandbox = exec_->sandbox_dir() + "/10.1";
  ASSERT_TRUE(fs::is_symlink(sandbox / "evil"));
  exec_->Release("10.1");
  EXPECT_FALSE(fs::exists(fs::symlink_status(sandbox)));
  EXPECT_FALSE(fs::exists(exec_->TaskDir("10.1")));
  EXPECT_EQ(ReadFile((dir_ / "outside" / "precious").string()).value(), "keep");
}

TEST_F(ProcessExecutorTest, ALogIsCutAtItsCapWithAMarkerAndTheTaskNeverBlocks) {
  ProcessExecutorOptions o;
  o.max_log_bytes = 64 << 10;
  exec_.reset();  // one executor per data dir
  exec_ = Make(o);
  TaskExit e;
  // 16 MiB, far beyond the cap and the pipe's buffer: the task must not block.
  std::string log = Run(Launch("11.1", {"/bin/sh", "-c", "echo first; head -c 16777216 /dev/zero | tr '\\0' x; echo; echo last"}), &e);
  EXPECT_EQ(e.exit_code, 0);
  // Lines are kept whole where a line ends near the cap.
  std::string lines = Run(Launch("11.2", {"/bin/sh", "-c", "yes 'twenty bytes a line' | head -c 1000000"}));
  const std::string tail = "twenty bytes a line\n" + LogCutMarker(64 << 10) + "\n";
  EXPECT_LE(lines.size(), 64u << 10);
  EXPECT_EQ(lines.substr(lines.size() - tail.size()), tail);
  // The marker fits under the cap too: the server, capping at the same size, keeps it.
  EXPECT_EQ(log.size(), 64u << 10) << log.substr(0, 100);
  EXPECT_EQ(log.rfind("first\n", 0), 0u);
  EXPECT_EQ(log.substr(log.size() - LogCutMarker(64 << 10).size() - 4),
            "xx\n[ringmaster: log cut at 64Ki; later output dropped]\n");
  EXPECT_EQ(log.find("last"), std::string::npos);
}

TEST_F(ProcessExecutorTest, FinishedTasksLeaveNoZombieBehind) {
  for (int i = 1; i <= 5; ++i) Run(Launch("12." + std::to_string(i), {"/bin/true"}));
  // Every child of this process (the agent) that ended has been reaped.
  std::vector<std::string> zombies;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* d = readdir(proc)) {
      std::ifstream stat(std::string("/proc/") + d->d_name + "/stat");
      std::string line;
      std::getline(stat, line);
      auto rp = line.rfind(')');
      char state = 0;
      int ppid = 0;
      if (rp != std::string::npos && sscanf(line.c_str() + rp + 1, " %c %d", &state, &ppid) == 2 &&
          ppid == getpid() && state == 'Z') {
        zombies.push_back(line);
      }
    }
    closedir(proc);
  }
  EXPECT_TRUE(zombies.empty()) << zombies.size() << " zombies, e.g. " << zombies.front();
}

TEST_F(ProcessExecutorTest, AUsersProcessesAreLimited) {
  if (!IsRoot()) GTEST_SKIP() << "RLIMIT_NPROC is only set when switching uids";
  ProcessExecutorOptions o;
  o.max_procs = 4;
  exec_.reset();
  exec_ = Make(o);
  // A uid of its own: RLIMIT_NPROC counts all of a uid's processes.
  std::string log = Run(Launch("13.1", {"/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 2 & done; wait; echo end"}, 77));
  EXPECT_NE(log.find("fork"), std::string::npos) << log;  // dash: "Cannot fork"
}

TEST_F(ProcessExecutorTest, TasksOutliveTheExecutorAndAreReadopted) {
  ASSERT_TRUE(exec_->Start(Launch("14.1", {"/bin/sh", "-c", "sleep 0.5; echo finished"})).ok());
  ASSERT_GT(TaskPgid("14.1"), 0);
  exec_.reset();  // the agent goes away; the task does not

  auto fresh = Make();
  auto recovered = fresh->Recover();
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered["14.1"], R"({"task_id": 7})");
  TaskExit e = WaitExit(*fresh, "14.1");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_NE(Output(*fresh, "14.1").find("finished"), std::string::npos);
  fresh->Release("14.1");
  EXPECT_TRUE(fresh->Recover().empty());
  EXPECT_FALSE(fs::exists(fresh->sandbox_dir() + "/14.1"));
}

TEST_F(ProcessExecutorTest, DuplicateKeysAreRefused) {
  ASSERT_TRUE(exec_->Start(Launch("15.1", {"/bin/true"})).ok());
  EXPECT_EQ(exec_->Start(Launch("15.1", {"/bin/true"})).code(), StatusCode::kAlreadyExists);
  WaitExit(*exec_, "15.1");
}

TEST_F(ProcessExecutorTest, AgentsShareASandboxRootAndAGoneOnesIdleDirIsRemoved) {
  auto left_task = Make({}, "left-task");  // gone, but a task of its may be re-adopted
  ASSERT_TRUE(left_task->Start(Launch("1.1", {"/bin/true"})).ok());
  WaitExit(*left_task, "1.1");
  const fs::path left_dir = left_task->sandbox_dir();
  left_task.reset();
  auto gone = Make({}, "gone");  // gone, and left nothing
  const fs::path gone_dir = gone->sandbox_dir();
  gone.reset();
  ASSERT_TRUE(fs::exists(gone_dir));
  ASSERT_TRUE(fs::exists(left_dir / "1.1"));

  auto next = Make({}, "next");
  EXPECT_FALSE(fs::exists(gone_dir));
  EXPECT_TRUE(fs::exists(left_dir / "1.1"));
  EXPECT_TRUE(fs::exists(exec_->sandbox_dir()));  // alive
  EXPECT_NE(next->sandbox_dir(), exec_->sandbox_dir());

  // One agent per data dir.
  ProcessExecutorOptions o;
  o.state_dir = (dir_ / "agent").string();
  o.sandbox_root = (dir_ / "sandboxes").string();
  o.shim_binary = RINGMASTER_BIN;
  auto twin = ProcessExecutor::Create(o);
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().message(), "another agent is running with the data dir " + o.state_dir);
}

TEST_F(ProcessExecutorTest, ARootAgentRefusesToRunATaskAsRoot) {
  if (!IsRoot()) GTEST_SKIP() << "about root agents";
  TaskLaunch l = Launch("16.1", {"/bin/true"});
  l.identity = TaskIdentity{};  // uid 0, no switch
  EXPECT_EQ(exec_->Start(l).message(), "refusing to run a task as root");
  l.identity.switch_user = true;
  EXPECT_EQ(exec_->Start(l).message(), "refusing to run a task as root");
}

TEST_F(ProcessExecutorTest, TheProductsToolsAreStagedWhereEveryTaskUserCanRunThem) {
  const fs::path train = fs::path(RINGMASTER_BIN).parent_path() / ".." / "train" / "ringmaster-train";
  if (!fs::exists(train)) GTEST_SKIP() << "ringmaster-train is not built (no libtorch)";
  ProcessExecutorOptions o;
  o.runtime_from = RINGMASTER_BIN;
  exec_.reset();
  exec_ = Make(o);
  ASSERT_FALSE(exec_->runtime().bin_dir.empty());
  std::string log = Run(Launch("17.1", {"/bin/sh", "-c", "command -v ringmaster-train; ringmaster-train --help | head -1"}));
  EXPECT_NE(log.find(exec_->sandbox_dir() + "/runtime/bin/ringmaster-train\n"), std::string::npos) << log;
  struct stat st {};
  ASSERT_EQ(stat((exec_->sandbox_dir() + "/runtime/bin/ringmaster-train").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

}  // namespace
}  // namespace ringmaster::agent
