// The CLI client against a real Slurm 22.05: the `slurm` fixture
// (tests/fixtures/slurm.sh) in $RM_SLURM_DIR, nodes n1 (1 fake GPU) and n2
// (2). Each case leaves the cluster idle.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "slurm/slurm.h"

namespace ringmaster::slurm {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// KEY=VALUE lines.
std::map<std::string, std::string> EnvLines(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (auto p = line.find('='); p != std::string::npos) env[line.substr(0, p)] = line.substr(p + 1);
  }
  return env;
}

class SlurmClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("RM_SLURM_DIR");
    if (dir == nullptr) GTEST_SKIP() << "no RM_SLURM_DIR: run it with ctest (the `slurm` fixture)";
    ASSERT_TRUE(fs::exists(fs::path(dir) / "slurm.conf")) << "RM_SLURM_DIR=" << dir << " holds no running Slurm";
    conf_ = fs::path(dir) / "slurm.conf";
    client_ = NewCliClient({.bin_dir = "", .conf = conf_.string()});
    std::string pattern = (fs::temp_directory_path() / "rm-slurm-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    tmp_ = pattern;
    fs::permissions(tmp_, fs::perms::all);  // the jobs write here
    prefix_ = "rm-test-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".";
    ASSERT_TRUE(WaitFor([&] { return AllIdle(); }, 30s)) << "the fixture's nodes are not idle";
  }
  void TearDown() override {
    if (client_ == nullptr) return;
    auto jobs = client_->Jobs(prefix_);
    if (jobs.ok()) {
      for (const auto& j : *jobs) {
        if (EndOf(j.state) == EndKind::kNotEnded) (void)client_->Cancel(j.id);
      }
    }
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  bool WaitFor(const std::function<bool()>& done, std::chrono::seconds limit) {
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      if (done()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return done();
  }

  bool AllIdle() {
    auto nodes = client_->Nodes();
    if (!nodes.ok()) return false;
    for (const auto& n : *nodes) {
      if (n.state != "idle") return false;
    }
    return nodes->size() == 2;
  }

  // The job as Jobs() reports it; id 0 when not listed.
  JobInfo Job(int64_t id) {
    auto jobs = client_->Jobs(prefix_);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    if (jobs.ok()) {
      for (const auto& j : *jobs) {
        if (j.id == id) return j;
      }
    }
    return {};
  }

  SubmitRequest Request(const std::string& suffix, std::vector<std::string> argv) {
    SubmitRequest r;
    r.name = prefix_ + suffix;
    r.comment = "ringmaster job 1 attempt 1 of test";
    r.memory_mib_per_task = 100;
    r.work_dir = tmp_.string();
    r.step_argv = std::move(argv);
    return r;
  }

  fs::path conf_, tmp_;
  std::string prefix_;
  std::unique_ptr<Client> client_;
};

TEST_F(SlurmClientTest, NodesAreTheFixturesTwo) {
  auto nodes = client_->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  std::map<std::string, NodeInfo> by_name;
  for (const auto& n : *nodes) by_name[n.name] = n;
  ASSERT_TRUE(by_name.contains("n1") && by_name.contains("n2"));
  EXPECT_EQ(by_name["n1"].gpus, 1);
  EXPECT_EQ(by_name["n2"].gpus, 2);
  for (const auto& [name, n] : by_name) {
    EXPECT_EQ(n.state, "idle") << name;
    EXPECT_EQ(n.reason, "") << name;
    EXPECT_EQ(n.cpus, 4) << name;
    EXPECT_EQ(n.cpus_alloc, 0) << name;
    EXPECT_EQ(n.memory_mib, 4000) << name;
    EXPECT_EQ(n.gpus_used, 0) << name;
    EXPECT_EQ(n.address, "127.0.0.1") << name;
  }
  EXPECT_EQ(client_->Describe(), "slurm (SLURM_CONF=" + conf_.string() + ")");
}

TEST_F(SlurmClientTest, TwoRanksWithAGpuEachComplete) {
  const std::string out = (tmp_ / "rank").string();
  SubmitRequest r = Request(
      "1", {"sh", "-c", "env | grep -E '^(SLURM|CUDA|GPU|RM_TEST)' | sort > \"$0$SLURM_PROCID\"", out});
  r.ntasks = 2;
  r.gpus_per_task = 1;
  r.env = {{"RM_TEST_SECRET", "it's $HOME `id` \"quoted\" ;|&"}};
  // The script (it holds the step's secrets) lives in $TMPDIR only while sbatch reads it.
  const fs::path scripts = tmp_ / "scripts";
  fs::create_directory(scripts);
  setenv("TMPDIR", scripts.c_str(), 1);
  auto id = client_->Submit(r);
  unsetenv("TMPDIR");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(fs::is_empty(scripts));
  JobInfo job;
  ASSERT_TRUE(WaitFor(
      [&] {
        job = Job(*id);
        return EndOf(job.state) != EndKind::kNotEnded;
      },
      60s))
      << "state " << job.state << " reason " << job.reason;
  EXPECT_EQ(job.state, "COMPLETED");
  EXPECT_EQ(job.name, r.name);
  EXPECT_EQ(job.exit_code, 0);
  EXPECT_EQ(job.exit_signal, 0);
  EXPECT_FALSE(job.nodes.empty());
  std::set<std::pair<std::string, std::string>> gpus;  // (node, CUDA_VISIBLE_DEVICES)
  for (int rank = 0; rank < 2; ++rank) {
    auto env = EnvLines(ReadFile(out + std::to_string(rank)));
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(env["SLURM_PROCID"], std::to_string(rank));
    EXPECT_EQ(env["SLURM_JOB_ID"], std::to_string(*id));
    EXPECT_EQ(env["SLURM_NTASKS"], "2");
    EXPECT_EQ(env["SLURM_CPUS_PER_TASK"], "1");
    EXPECT_EQ(env["SLURM_MEM_PER_CPU"], "100");
    EXPECT_EQ(env["RM_TEST_SECRET"], r.env["RM_TEST_SECRET"]);
    EXPECT_FALSE(env["CUDA_VISIBLE_DEVICES"].empty());
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"].find(','), std::string::npos);  // one GPU a rank
    EXPECT_EQ(env["SLURM_STEP_GPUS"], env["CUDA_VISIBLE_DEVICES"]);
    EXPECT_TRUE(env["SLURMD_NODENAME"] == "n1" || env["SLURMD_NODENAME"] == "n2") << env["SLURMD_NODENAME"];
    gpus.insert({env["SLURMD_NODENAME"], env["CUDA_VISIBLE_DEVICES"]});
  }
  EXPECT_EQ(gpus.size(), 2u) << "two ranks were given the same GPU";
}

TEST_F(SlurmClientTest, PendingBehindABlockerThenCancelled) {
  // Every GPU of the cluster (n1's one, n2's two) held by the blocker.
  const std::string started = (tmp_ / "started").string();
  SubmitRequest blocker = Request("blocker", {"sh", "-c", "touch \"$0$SLURM_PROCID\"; exec sleep 300", started});
  blocker.ntasks = 3;
  blocker.gpus_per_task = 1;
  auto blocker_id = client_->Submit(blocker);
  ASSERT_TRUE(blocker_id.ok()) << blocker_id.status().ToString();
  JobInfo b;
  ASSERT_TRUE(WaitFor(
      [&] {
        b = Job(*blocker_id);
        return b.state == "RUNNING";
      },
      30s))
      << b.state;
  EXPECT_EQ(b.nodes, "n[1-2]");
  // RUNNING is the allocation; the step's tasks start a moment later.
  ASSERT_TRUE(WaitFor(
      [&] { return fs::exists(started + "0") && fs::exists(started + "1") && fs::exists(started + "2"); }, 30s));

  SubmitRequest waiting = Request("waiting", {"true"});
  waiting.gpus_per_task = 1;
  auto id = client_->Submit(waiting);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  JobInfo j;
  ASSERT_TRUE(WaitFor(
      [&] {
        j = Job(*id);
        return j.state == "PENDING" && !j.reason.empty();
      },
      30s))
      << j.state << " " << j.reason;
  EXPECT_EQ(j.reason, "Resources");
  EXPECT_EQ(j.nodes, "");
  EXPECT_EQ(EndOf(j.state), EndKind::kNotEnded);
  EXPECT_EQ(PendingReasonText(j.reason), "waiting for resources: the nodes that could run it are busy");

  ASSERT_TRUE(client_->Cancel(*id).ok());
  j = Job(*id);
  EXPECT_EQ(j.state, "CANCELLED");
  EXPECT_EQ(EndOf(j.state), EndKind::kCancelled);
  EXPECT_TRUE(client_->Cancel(*id).ok()) << "cancelling an ended job is not an error";

  // The blocker's sleep ends at SIGTERM, well within KillWait.
  // A running job is COMPLETING until its steps have ended, then CANCELLED;
  // the script (`exec srun`) ends as srun does on SIGTERM: 128 + 15.
  ASSERT_TRUE(client_->Cancel(*blocker_id).ok());
  b = Job(*blocker_id);
  EXPECT_TRUE(b.state == "COMPLETING" || b.state == "CANCELLED") << b.state;
  ASSERT_TRUE(WaitFor(
      [&] {
        b = Job(*blocker_id);
        return b.state == "CANCELLED" && b.exit_code != 0;
      },
      30s))
      << b.state << " " << b.exit_code;
  EXPECT_EQ(b.exit_code, 143);
  EXPECT_EQ(b.exit_signal, 0);
  EXPECT_TRUE(client_->Cancel(999'999'999).ok()) << "a job Slurm has forgotten is not an error either";
}

TEST_F(SlurmClientTest, ARequestNoNodeCanRunIsRefused) {
  SubmitRequest r = Request("toobig", {"true"});
  r.gpus_per_task = 5;
  auto id = client_->Submit(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << id.status().ToString();
  EXPECT_NE(id.status().message().find("Requested node configuration is not available"), std::string::npos)
      << id.status().ToString();

  r.gpus_per_task = 0;
  r.partition = "no-such-partition";
  id = client_->Submit(r);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << id.status().ToString();

  r.partition = "";
  r.env["BAD"] = "line\nbreak";
  EXPECT_EQ(client_->Submit(r).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SlurmClientTest, AnUnreachableControllerIsUnavailable) {
  // The fixture's configuration with the controller on a port nobody listens on.
  for (const char* f : {"gres.conf", "cgroup.conf"}) fs::copy_file(conf_.parent_path() / f, tmp_ / f);
  std::string text = ReadFile(conf_);
  auto p = text.find("SlurmctldPort=");
  ASSERT_NE(p, std::string::npos);
  text.replace(p, text.find('\n', p) - p, "SlurmctldPort=1");
  std::ofstream(tmp_ / "slurm.conf") << text;
  auto dead = NewCliClient({.bin_dir = "", .conf = (tmp_ / "slurm.conf").string(), .timeout = 30s});
  // squeue tries for about 9 s before it gives up.
  auto jobs = dead->Jobs("rm-");
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), StatusCode::kUnavailable) << jobs.status().ToString();
  EXPECT_NE(jobs.status().message().find("Unable to contact slurm controller"), std::string::npos);
  // A deadline shorter than that: DeadlineExceeded, also "try again later".
  auto impatient = NewCliClient({.bin_dir = "", .conf = (tmp_ / "slurm.conf").string(), .timeout = 1s});
  auto id = impatient->Submit(Request("never", {"true"}));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kDeadlineExceeded) << id.status().ToString();
  // No sbatch installed where bin_dir points.
  auto missing = NewCliClient({.bin_dir = tmp_.string(), .conf = conf_.string()});
  EXPECT_EQ(missing->Nodes().status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster::slurm
