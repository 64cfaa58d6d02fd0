// The agent against a fake server (the agent routes of the REST API, served
// by cpp-httplib on loopback) and a fake executor whose tasks end at once.
#include "agent/agent.h"
#include "agent/executor/shim.h"
#include "agent/testing/scripted_executor.h"
#include "protocol/agent.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

namespace ringmaster::agent {
namespace {

using nlohmann::json;

// A task's report as the fake server received it.
struct Report {
  int64_t task_id = 0;
  protocol::TaskStatusReport body;
};

// The body of a request as a protocol message (a failed test if it is not one).
template <typename T>
T Read(const std::string& body) {
  auto m = protocol::Parse<T>(json::parse(body));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : T{};
}

// The server's side of the agent protocol, with assignments the test sets.
class FakeServer {
 public:
  FakeServer() {
    http_.Post("/api/v1/agent/register", [this](const httplib::Request& req, httplib::Response& res) {
      if (down_) {
        res.status = 503;
        return;
      }
      std::lock_guard<std::mutex> l(mu_);
      registrations_.push_back(Read<protocol::RegisterRequest>(req.body));
      cv_.notify_all();
      res.set_content(protocol::ToJson(protocol::RegisterReply{1, std::nullopt, 10000, 120000, protocol::kAgentProtocol}).dump(),
                      "application/json");
    });
    http_.Post("/api/v1/agent/nodes/1/heartbeat", [](const httplib::Request& req, httplib::Response& res) {
      (void)Read<protocol::Heartbeat>(req.body);
      res.set_content(protocol::ToJson(protocol::HeartbeatReply{std::nullopt, 120000, ""}).dump(), "application/json");
    });
    http_.Get("/api/v1/agent/nodes/1/assignments", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> l(mu_);
      const uint64_t index = std::stoull(req.get_param_value("index"));
      cv_.wait_for(l, std::chrono::milliseconds(500), [&] { return index != version_ || closed_; });
      served_ = version_;
      cv_.notify_all();
      res.set_content(protocol::ToJson(protocol::Assignments{version_, tasks_}).dump(), "application/json");
    });
    // The staging plan: nothing to stage.
    http_.Get(R"(/api/v1/agent/tasks/(\d+)/files)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu_);
      plans_.push_back(std::stoll(req.matches[1]));
      res.set_content(json{{"job_id", std::stoll(req.matches[1])}, {"inputs", json::array()},
                           {"checkpoint", json::array()}, {"outputs", {"outputs"}}}
                          .dump(),
                      "application/json");
    });
    // A tick's reports, each recorded.
    http_.Post("/api/v1/agent/nodes/1/reports", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu_);
      protocol::TaskReportsReply reply;
      for (const protocol::TaskReport& r : Read<protocol::TaskReports>(req.body).reports) {
        reports_.push_back({r.task_id, r.status});
        reply.results.emplace_back();
      }
      ++report_calls_;
      cv_.notify_all();
      res.set_content(protocol::ToJson(reply).dump(), "application/json");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeServer() {
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      cv_.notify_all();
    }
    http_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::atomic<bool> down_{false};  // registrations answer 503, as a server that is away

  // Replaces the node's assignments; returns once the agent has fetched them.
  void Assign(std::vector<protocol::Assignment> tasks) {
    std::unique_lock<std::mutex> l(mu_);
    tasks_ = std::move(tasks);
    const uint64_t v = ++version_;
    cv_.notify_all();
    EXPECT_TRUE(cv_.wait_for(l, std::chrono::seconds(20), [&] { return served_ == v; })) << "never fetched";  // hang guard
  }

  // Waits (a hang guard) for the n-th report with this state; returns it.
  Report WaitReport(const std::string& state, size_t n = 1) {
    std::unique_lock<std::mutex> l(mu_);
    std::optional<Report> found;
    cv_.wait_for(l, std::chrono::seconds(20), [&] {
      size_t seen = 0;
      for (const Report& r : reports_) {
        if (r.body.state == state && ++seen == n) {
          found = r;
          return true;
        }
      }
      return false;
    });
    EXPECT_TRUE(found.has_value()) << "no report #" << n << " of state " << state;
    return found.value_or(Report{});
  }
  // The tasks with an exit reported.
  std::set<int64_t> Exited() {
    std::lock_guard<std::mutex> l(mu_);
    std::set<int64_t> out;
    for (const Report& r : reports_) {
      if (r.body.state == "exited") out.insert(r.task_id);
    }
    return out;
  }
  size_t ReportCount(const std::string& state) {
    std::lock_guard<std::mutex> l(mu_);
    return std::count_if(reports_.begin(), reports_.end(), [&](const Report& r) { return r.body.state == state; });
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t version_ = 1, served_ = 0;
  bool closed_ = false;
  std::vector<protocol::Assignment> tasks_;
  std::vector<Report> reports_;
  size_t report_calls_ = 0;

 public:
  std::vector<int64_t> plans() {
    std::lock_guard<std::mutex> l(mu_);
    return plans_;
  }
  // Waits (a hang guard) for the agent's first registration; returns its body.
  protocol::RegisterRequest FirstRegistration() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::seconds(20), [&] { return !registrations_.empty(); });
    EXPECT_FALSE(registrations_.empty()) << "the agent never registered";
    return registrations_.empty() ? protocol::RegisterRequest() : registrations_[0];
  }

 private:
  std::vector<int64_t> plans_;  // GUARDED_BY(mu_): tasks whose staging plan was asked for
  std::vector<protocol::RegisterRequest> registrations_;  // GUARDED_BY(mu_)
};

protocol::Assignment Assignment(int64_t task_id, int attempt, int64_t user_id, const std::string& user) {
  protocol::Assignment a;
  a.task_id = task_id;
  a.attempt = attempt;
  a.job_id = task_id;
  a.argv = {"/bin/true"};
  a.env = {{"RINGMASTER_RANK", "0"}};
  a.user_id = user_id;
  a.user_name = user;
  return a;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_agent_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    AgentOptions o;
    o.data_dir = dir_.string();
    o.server_url = server_.url();
    o.token = "t";
    o.node_name = "test-node";
    o.heartbeat_interval = std::chrono::milliseconds(100);
    o.tick_interval = std::chrono::milliseconds(10);
    // As a root agent would map users, wherever the test runs.
    o.task_users = TaskUsers::Create({"300000-300099", {}}, /*agent_uid=*/0).value();
    Options(o);
    auto exec = std::make_unique<ScriptedExecutor>();
    exec_ = exec.get();
    Prepare();
    agent_ = std::make_unique<Agent>(o, std::move(exec));
    agent_->Start();
  }
  void TearDown() override {
    agent_->Stop();  // after Abandon too: a no-op
    std::filesystem::remove_all(dir_);
  }
  // What a test sets up before the agent starts.
  virtual void Prepare() {}
  virtual void Options(AgentOptions& o) {}

  std::filesystem::path dir_;
  FakeServer server_;
  ScriptedExecutor* exec_ = nullptr;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, ATaskRunsAsItsUsersUidAfterItsFilesAreStaged) {
  server_.Assign({Assignment(5, 1, 2, "alice")});
  server_.WaitReport("exited");
  auto launches = exec_->launches();
  ASSERT_EQ(launches.size(), 1u);
  const TaskLaunch& l = launches[0];
  EXPECT_EQ(l.key, "5.1");
  EXPECT_EQ(l.identity.uid, 300002u);
  EXPECT_EQ(l.identity.user, "alice");
  EXPECT_TRUE(l.identity.switch_user);
  EXPECT_EQ(server_.plans(), std::vector<int64_t>{5});  // its staging plan, asked before it started
  EXPECT_TRUE(static_cast<bool>(l.prepare));
  EXPECT_EQ(json::parse(l.meta_json)["job_id"], 5);
  EXPECT_EQ(json::parse(l.meta_json)["outputs"], json({"outputs"}));
  EXPECT_EQ(l.env.count("HOME"), 0u);  // not root's: the executor gives the task its own
  EXPECT_EQ(l.env.at("RINGMASTER_RANK"), "0");
}

TEST_F(AgentTest, AUserWithoutAUidHereFailsItsTaskNamingTheFlag) {
  server_.Assign({Assignment(6, 1, 100, "carol")});
  Report r = server_.WaitReport("exited");
  EXPECT_EQ(r.task_id, 6);
  ASSERT_TRUE(r.body.exit.has_value());
  EXPECT_EQ(r.body.exit->exit_code, -1);
  EXPECT_EQ(r.body.exit->message, "user carol (id 100) has no uid on this node: --task-uids 300000-300099 covers user ids 1 to 99");
  EXPECT_TRUE(exec_->launches().empty());
}

// Ids come back after a job is deleted: the agent must not skip a task it
// ran once under the same id and attempt, as long as the server stopped
// listing the old one in between.
TEST_F(AgentTest, ATaskIdThatComesBackAfterTheServerDroppedItRunsAgain) {
  server_.Assign({Assignment(5, 1, 2, "alice")});
  server_.WaitReport("exited", 1);
  // The server still lists it until its next reply: a stale listing starts nothing.
  server_.Assign({Assignment(5, 1, 2, "alice")});
  EXPECT_EQ(exec_->launches().size(), 1u);
  server_.Assign({});  // the job ended and was deleted
  server_.Assign({Assignment(5, 1, 3, "bob")});  // another user's new job, same task id
  server_.WaitReport("exited", 2);
  auto launches = exec_->launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[1].identity.user, "bob");
  EXPECT_EQ(launches[1].identity.uid, 300003u);
}

// A one-task agent (a Slurm step's) watches Holding: nothing, then the task
// while it runs, then nothing once its exit is reported (the server's long
// poll need not answer first: the step ends without waiting for it).
TEST_F(AgentTest, HoldingFollowsATaskFromAssignmentToRelease) {
  EXPECT_FALSE(agent_->Holding().ever_assigned);
  EXPECT_EQ(agent_->Holding().held, 0u);
  exec_->set_exit(std::nullopt);  // runs until told
  server_.Assign({Assignment(5, 1, 2, "alice")});
  ASSERT_TRUE(exec_->WaitStarted("5.1"));
  Agent::Held h = agent_->Holding();
  EXPECT_TRUE(h.ever_assigned);
  EXPECT_EQ(h.held, 1u);
  exec_->set_exit(TaskExit{0, 0, ""});
  server_.WaitReport("exited");
  for (int i = 0; i < 2000 && agent_->Holding().held != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a hang guard: reported, then forgotten
  }
  h = agent_->Holding();
  EXPECT_TRUE(h.ever_assigned);
  EXPECT_EQ(h.held, 0u);
  server_.Assign({Assignment(5, 1, 2, "alice")});  // a reply that predates the report starts nothing
  EXPECT_EQ(agent_->Holding().held, 0u);
  EXPECT_EQ(exec_->launches().size(), 1u);
}

// Slurm ends the step: the task is stopped with the grace given, the agent's
// threads end, and the server hears of no exit (it reads Slurm's).
TEST_F(AgentTest, AbandonStopsTheTaskAndReportsNoExit) {
  exec_->set_exit(std::nullopt);
  exec_->set_exit_on_stop(true);
  server_.Assign({Assignment(5, 1, 2, "alice")});
  ASSERT_TRUE(exec_->WaitStarted("5.1"));
  server_.WaitReport("running");
  agent_->Abandon(std::chrono::milliseconds(100));
  EXPECT_EQ(exec_->stopped(), (std::vector<std::string>{"5.1"}));
  agent_->Tick();  // a tick after the end would report it: not when abandoned
  EXPECT_EQ(server_.ReportCount("exited"), 0u);
}

// Slurm SIGKILLs the wrapper KillWait after its SIGTERM: Abandon returns
// within the grace and its slack even when the task never ends.
TEST_F(AgentTest, AbandonIsBoundedByTheGraceAndItsSlack) {
  exec_->set_exit(std::nullopt);  // SIGTERM and SIGKILL alike leave it running
  server_.Assign({Assignment(5, 1, 2, "alice")});
  ASSERT_TRUE(exec_->WaitStarted("5.1"));
  server_.WaitReport("running");
  const auto asked = std::chrono::steady_clock::now();
  agent_->Abandon(std::chrono::milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_GE(took, std::chrono::milliseconds(200) + Agent::kAbandonSlack);  // it waited for the task that long
  EXPECT_LT(took, std::chrono::milliseconds(200) + Agent::kAbandonSlack + std::chrono::seconds(2));
  EXPECT_EQ(exec_->stopped(), (std::vector<std::string>{"5.1"}));
  EXPECT_EQ(server_.ReportCount("exited"), 0u);
}

// A node starts tasks side by side: one whose staging is slow (a large
// input, here a plan that does not come until the test lets it) holds up
// none of the 50 trivial tasks assigned with it. They all start, end and are
// reported before the slow one starts; it starts once its files are there.
class AgentSlowStagingTest : public AgentTest {
 protected:
  void Options(AgentOptions& o) override {
    o.stage_plan = [this](int64_t task_id, int) -> StatusOr<StagePlan> {
      if (task_id == kSlow) {
        std::unique_lock<std::mutex> l(mu_);
        staging_ = true;
        cv_.notify_all();
        cv_.wait_for(l, std::chrono::seconds(60), [&] { return released_; });  // a hang guard
      }
      return StagePlan{task_id, {}, {}, {}, ""};
    };
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool WaitStaging() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(20), [&] { return staging_; });
  }
  void TearDown() override {
    Release();  // whatever the test did: the slow task's thread is not left waiting
    AgentTest::TearDown();
  }
  static constexpr int64_t kSlow = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool staging_ = false, released_ = false;
};

TEST_F(AgentSlowStagingTest, FiftyTrivialTasksFinishWhileASlowOneIsStillStaging) {
  std::vector<protocol::Assignment> tasks = {Assignment(kSlow, 1, 2, "alice")};
  for (int64_t id = 2; id <= 51; ++id) tasks.push_back(Assignment(id, 1, 2, "alice"));
  server_.Assign(tasks);
  ASSERT_TRUE(WaitStaging());
  server_.WaitReport("exited", 50);  // every trivial one, reported
  for (const TaskLaunch& l : exec_->launches()) EXPECT_NE(l.key, "1.1") << "the slow task started before the others ended";
  EXPECT_EQ(exec_->launches().size(), 50u);
  std::set<int64_t> want;
  for (int64_t id = 2; id <= 51; ++id) want.insert(id);
  EXPECT_EQ(server_.Exited(), want);
  // Its files arrive: it starts, and ends like the rest.
  Release();
  ASSERT_TRUE(exec_->WaitStarted("1.1"));
  Report last = server_.WaitReport("exited", 51);
  EXPECT_EQ(last.task_id, kSlow);
}

// The node's GPUs as a Slurm step gives them (SLURM_STEP_GPUS=2,3): the
// inventory is exactly those, by the node's indices; the server hands a task
// GPUs by their place in that list, and its launch holds the devices there.
class AgentWithSlurmGpusTest : public AgentTest {
 protected:
  void Options(AgentOptions& o) override {
    o.gpus = std::vector<GpuInfo>{{2, "slurm gres gpu", 0, ""}, {3, "slurm gres gpu", 0, ""}};
  }
};

TEST_F(AgentWithSlurmGpusTest, ItRegistersSlurmsGpusByTheNodesIndices) {
  protocol::RegisterRequest r = server_.FirstRegistration();
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_EQ(r.gpus[0].index, 2);
  EXPECT_EQ(r.gpus[1].index, 3);
  EXPECT_EQ(r.gpus[1].model, "slurm gres gpu");
  protocol::Assignment a = Assignment(5, 1, 2, "alice");
  a.gpus = {1};  // the second GPU of the node's list
  server_.Assign({a});
  ASSERT_TRUE(exec_->WaitStarted("5.1"));
  EXPECT_EQ(exec_->launches()[0].gpus, std::vector<int>{3});
}

// An agent re-adopting a task says so when it registers, with the protocol
// it speaks, and keeps the fencing window the server answers for the next
// agent on the node.
class AgentReadoptingTest : public AgentTest {
 protected:
  void Prepare() override {
    exec_->recovered_["9.3"] = R"({"task_id": 9, "attempt": 3, "job_id": 4})";
  }
};

TEST_F(AgentReadoptingTest, ItRegistersWithItsProtocolAndTheTasksItHoldsAndKeepsTheFencingWindow) {
  protocol::RegisterRequest r = server_.FirstRegistration();
  EXPECT_EQ(r.protocol_version, protocol::kAgentProtocol);
  EXPECT_EQ(r.tasks, (std::vector<protocol::HeldTask>{{9, 3}}));
  for (int i = 0; i < 200 && !std::filesystem::exists(dir_ / "fence_after_ms"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a hang guard: written as the answer is read
  }
  std::ifstream in(dir_ / "fence_after_ms");
  int64_t ms = 0;
  in >> ms;
  EXPECT_EQ(ms, 120000);
}

// A restarted agent fences on the clock of the one before it: the window it
// kept and, within this boot, the time the server last answered. Here that
// was long ago and the server is still away, so the re-adopted task is
// stopped at once, before the server is heard from.
class AgentStaleContactTest : public AgentTest {
 protected:
  void Prepare() override {
    exec_->recovered_["9.3"] = R"({"task_id": 9, "attempt": 3, "job_id": 4})";
    exec_->set_exit(std::nullopt);
    server_.down_ = true;
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
    std::ofstream(dir_ / "last_contact") << BootId() << " " << now - 60'000;
    WindowFile();
  }
  // The window a former agent kept: its file (this release's) or 0.1's lease.
  virtual void WindowFile() { std::ofstream(dir_ / "fence_after_ms") << 30'000; }

  void ExpectFenced() {
    for (int i = 0; i < 500 && exec_->stopped().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a hang guard: the fence thread looks every 250 ms
    }
    EXPECT_EQ(exec_->stopped(), std::vector<std::string>{"9.3"});
  }
};

TEST_F(AgentStaleContactTest, AReadoptedTaskIsFencedOnTheEarlierAgentsClock) { ExpectFenced(); }

class AgentOfTheLastReleaseTest : public AgentStaleContactTest {
  void WindowFile() override { std::ofstream(dir_ / "lease_ms") << 10'000; }  // 70% of it: 7 s
};

TEST_F(AgentOfTheLastReleaseTest, ItsLeaseFileStillFencesReadoptedTasks) { ExpectFenced(); }

}  // namespace
}  // namespace ringmaster::agent
