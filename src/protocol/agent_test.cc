// The agent protocol's messages: each round-trips, and each reads and writes
// the exact bytes today's agents and servers put on the wire (the golden
// strings below), so a key renamed on either side fails here.
#include "protocol/agent.h"

#include <gtest/gtest.h>

namespace ringmaster::protocol {
namespace {

using nlohmann::json;

// The golden string read back as `T`, and `T` written as the same bytes.
template <typename T>
T Golden(const std::string& wire) {
  T m;
  Status st = FromJson(json::parse(wire), &m);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ToJson(m).dump(), wire);
  return m;
}

TEST(AgentProtocolGolden, RegisterRequest) {
  const auto m = Golden<RegisterRequest>(
      R"({"address":"10.0.0.5","agent_version":"0.9.0","cpu_milli":8000,"executors":["process","runc"],)"
      R"("fence_after_ms":120000,"gpus":[{"index":0,"memory_bytes":85899345920,"model":"NVIDIA H100","uuid":"GPU-1"}],)"
      R"("labels":{"zone":"a"},"memory_bytes":34359738368,"name":"gpu-1","network":"vxlan","port_hi":31999,)"
      R"("port_lo":31000,"protocol_version":2,"tasks":[{"attempt":3,"task_id":9}]})");
  EXPECT_EQ(m.name, "gpu-1");
  EXPECT_EQ(m.cpu_milli, 8000);
  EXPECT_EQ(m.memory_bytes, int64_t{32} << 30);
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_EQ(m.gpus[0].index, 0);
  EXPECT_EQ(m.gpus[0].model, "NVIDIA H100");
  EXPECT_EQ(m.gpus[0].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(m.gpus[0].uuid, "GPU-1");
  EXPECT_EQ(m.agent_version, "0.9.0");
  EXPECT_EQ(m.protocol_version, 2);
  EXPECT_EQ(m.tasks, (std::vector<HeldTask>{{9, 3}}));
  EXPECT_EQ(m.fence_after_ms, 120000);
  EXPECT_EQ(m.address, "10.0.0.5");
  EXPECT_EQ(m.port_lo, 31000);
  EXPECT_EQ(m.port_hi, 31999);
  EXPECT_EQ(m.labels, (std::map<std::string, std::string>{{"zone", "a"}}));
  EXPECT_EQ(m.executors, (std::vector<std::string>{"process", "runc"}));
  EXPECT_EQ(m.network, "vxlan");
}

// An agent of protocol 1 sent fewer fields: what it left out keeps the
// meaning the server gave it then.
TEST(AgentProtocolGolden, RegisterRequestOfProtocol1) {
  RegisterRequest m;
  ASSERT_TRUE(FromJson(json::parse(R"({"name":"n1","cpu_milli":1000,"memory_bytes":1,"gpus":[{"model":"T4"}]})"), &m).ok());
  EXPECT_EQ(m.protocol_version, 1);
  EXPECT_TRUE(m.tasks.empty());
  EXPECT_EQ(m.fence_after_ms, 0);
  EXPECT_EQ(m.port_lo, 0);
  EXPECT_EQ(m.port_hi, -1);
  EXPECT_EQ(m.executors, std::vector<std::string>{"process"});
  EXPECT_EQ(m.network, "host");
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_FALSE(m.gpus[0].index.has_value());  // its place in the list
  EXPECT_EQ(ToJson(m)["gpus"].dump(), R"([{"model":"T4"}])");  // what the server stores: the fields given
}

TEST(AgentProtocolGolden, RegisterReply) {
  const auto host = Golden<RegisterReply>(
      R"({"fence_after_ms":120000,"lease_ms":40000,"node_id":7,"overlay":null,"protocol_version":2})");
  EXPECT_EQ(host.node_id, 7);
  EXPECT_FALSE(host.overlay.has_value());
  EXPECT_EQ(host.lease_ms, 40000);
  EXPECT_EQ(host.fence_after_ms, 120000);
  EXPECT_EQ(host.protocol_version, 2);
  const auto vxlan = Golden<RegisterReply>(
      R"({"fence_after_ms":120000,"lease_ms":40000,"node_id":8,"overlay":{"block":"10.200.1.0/24","mode":"vxlan",)"
      R"("peers":[{"address":"10.0.0.5","block":"10.200.0.0/24","node":"gpu-1"}],"subnet":"10.200.0.0/16"},)"
      R"("protocol_version":2})");
  ASSERT_TRUE(vxlan.overlay.has_value());
  EXPECT_EQ(vxlan.overlay->mode, "vxlan");
  EXPECT_EQ(vxlan.overlay->subnet, "10.200.0.0/16");
  EXPECT_EQ(vxlan.overlay->block, "10.200.1.0/24");
  EXPECT_EQ(vxlan.overlay->peers, (std::vector<OverlayPeer>{{"gpu-1", "10.0.0.5", "10.200.0.0/24"}}));
}

// A server of protocol 1 answered without fence_after_ms.
TEST(AgentProtocolGolden, RegisterReplyOfProtocol1) {
  RegisterReply m;
  ASSERT_TRUE(FromJson(json::parse(R"({"node_id":3,"lease_ms":10000})"), &m).ok());
  EXPECT_EQ(m.fence_after_ms, 0);
  EXPECT_EQ(m.lease_ms, 10000);
}

TEST(AgentProtocolGolden, Heartbeat) {
  const std::string wire =
      R"({"fence_after_ms":120000,"samples":[{"cpu":0.5,"disk_read_bps":1.0,"disk_used_bytes":2048,)"
      R"("disk_write_bps":2.0,"gpus":[{"index":1,"memory_used_bytes":100,"power_w":70.0,"temperature_c":35.0,)"
      R"("util":0.25}],"memory_used_bytes":1048576,"net_rx_bps":10.0,"net_tx_bps":20.0,"t":1234,)"
      R"("tasks":[{"attempt":2,"cpu_cores":1.5,"memory_bytes":4096,"oom_kills":0,"pids":3,"task":7}]}]})";
  Heartbeat m;
  ASSERT_TRUE(FromJson(json::parse(wire), &m).ok());
  EXPECT_EQ(ToJson(m).dump(), wire);
  EXPECT_EQ(m.fence_after_ms, 120000);
  EXPECT_EQ(m.samples_error, "");
  ASSERT_EQ(m.samples.size(), 1u);
  const NodeSample& s = m.samples[0];
  EXPECT_EQ(s.t_ms, 1234);
  EXPECT_EQ(s.cpu, 0.5);
  EXPECT_EQ(s.memory_used_bytes, 1 << 20);
  EXPECT_EQ(s.disk_used_bytes, 2048);
  EXPECT_EQ(s.disk_read_bps, 1.0);
  EXPECT_EQ(s.disk_write_bps, 2.0);
  EXPECT_EQ(s.net_rx_bps, 10.0);
  EXPECT_EQ(s.net_tx_bps, 20.0);
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].index, 1);
  EXPECT_EQ(s.gpus[0].util, 0.25);
  EXPECT_EQ(s.gpus[0].memory_used_bytes, 100);
  EXPECT_EQ(s.gpus[0].power_w, 70.0);
  EXPECT_EQ(s.gpus[0].temperature_c, 35.0);
  ASSERT_EQ(s.tasks.size(), 1u);
  EXPECT_EQ(s.tasks[0].task_id, 7);
  EXPECT_EQ(s.tasks[0].attempt, 2);
  EXPECT_EQ(s.tasks[0].cpu_cores, 1.5);
  EXPECT_EQ(s.tasks[0].memory_bytes, 4096);
  EXPECT_EQ(s.tasks[0].pids, 3);
  EXPECT_EQ(s.tasks[0].oom_kills, 0);
  EXPECT_EQ(s.tasks[0].gpu_util, -1);  // left out: not known
}

// Bad samples never fail a heartbeat (that would end the node's lease): they
// are dropped, saying why; a protocol 1 agent sends no window.
TEST(AgentProtocolGolden, HeartbeatWithBadSamplesStillReads) {
  Heartbeat m;
  ASSERT_TRUE(FromJson(json::parse(R"({"samples":[{"t":1,"cpu":7,"memory_used_bytes":0}]})"), &m).ok());
  EXPECT_TRUE(m.samples.empty());
  EXPECT_EQ(m.samples_error, "samples[0].cpu: must be within [0, 1]");
  EXPECT_EQ(m.fence_after_ms, -1);
}

TEST(AgentProtocolGolden, HeartbeatReply) {
  const auto m = Golden<HeartbeatReply>(
      R"({"fence_after_ms":120000,"overlay":null,"samples_refused":"samples: 1 out of time order"})");
  EXPECT_EQ(m.fence_after_ms, 120000);
  EXPECT_FALSE(m.overlay.has_value());
  EXPECT_EQ(m.samples_refused, "samples: 1 out of time order");
  const auto quiet = Golden<HeartbeatReply>(R"({"fence_after_ms":60000,"overlay":null})");
  EXPECT_EQ(quiet.samples_refused, "");
}

TEST(AgentProtocolGolden, Assignments) {
  const auto m = Golden<Assignments>(
      R"({"index":12,"tasks":[{"argv":["python","train.py"],"attempt":2,"desired":"run","env":{"RINGMASTER_RANK":"1"},)"
      R"("executor":"runc","gpus":[0,1],"image":"pytorch@sha256:ab","job_id":4,"limits":{"cpu_milli":2000,"disk_bytes":8192,)"
      R"("io_read_bps":1,"io_read_iops":2,"io_write_bps":3,"io_write_iops":4,"memory_bytes":1073741824,"pids":512},)"
      R"("network":"overlay","overlay_address":"10.200.1.5","peers":["10.200.2.5"],"rank":1,"stop_grace_ms":30000,)"
      R"("task_id":42,)"
      R"("user":{"id":3,"name":"ada"},"working_dir":"src"},)"
      R"({"argv":[],"attempt":1,"desired":"stop","env":{},"executor":"","gpus":[],"image":"","job_id":5,)"
      R"("limits":{"cpu_milli":0,"disk_bytes":0,"io_read_bps":0,"io_read_iops":0,"io_write_bps":0,"io_write_iops":0,)"
      R"("memory_bytes":0,"pids":0},"network":"job","overlay_address":"","peers":[],"rank":0,"stop_grace_ms":5000,)"
      R"("task_id":43,"user":{"id":4,"name":"bob"},"working_dir":""}]})");
  EXPECT_EQ(m.index, 12u);
  ASSERT_EQ(m.tasks.size(), 2u);
  const Assignment& a = m.tasks[0];
  EXPECT_EQ(a.task_id, 42);
  EXPECT_EQ(a.attempt, 2);
  EXPECT_EQ(a.job_id, 4);
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.user_id, 3);
  EXPECT_EQ(a.user_name, "ada");
  EXPECT_FALSE(a.stop);
  EXPECT_EQ(a.argv, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(a.env, (std::map<std::string, std::string>{{"RINGMASTER_RANK", "1"}}));
  EXPECT_EQ(a.working_dir, "src");
  EXPECT_EQ(a.image, "pytorch@sha256:ab");
  EXPECT_EQ(a.executor, "runc");
  EXPECT_EQ(a.network, "overlay");
  EXPECT_EQ(a.overlay_address, "10.200.1.5");
  EXPECT_EQ(a.peers, (std::vector<std::string>{"10.200.2.5"}));
  EXPECT_EQ(a.limits, (TaskLimits{2000, 1 << 30, 512, 1, 3, 2, 4, 8192}));
  EXPECT_EQ(a.gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.stop_grace_ms, 30000);
  EXPECT_TRUE(m.tasks[1].stop);
  EXPECT_EQ(m.tasks[1].user_name, "bob");
}

// What a server (or a test) may leave out of an assignment.
TEST(AgentProtocolGolden, AnAssignmentsOptionalFieldsKeepTheirDefaults) {
  Assignments m;
  ASSERT_TRUE(FromJson(json::parse(R"({"tasks":[{"task_id":5,"attempt":1,"desired":"run","argv":["/bin/true"],)"
                                   R"("env":{},"user":{"id":2}}]})"),
                       &m).ok());
  EXPECT_EQ(m.index, 0u);
  const Assignment& a = m.tasks.at(0);
  EXPECT_EQ(a.network, "host");
  EXPECT_TRUE(a.peers.empty());  // a server one release back: nothing from other nodes gets in
  EXPECT_EQ(a.stop_grace_ms, 5000);
  EXPECT_EQ(a.limits, TaskLimits{});
  EXPECT_EQ(a.user_name, "");
}

TEST(AgentProtocolGolden, TaskStatusReport) {
  const auto running = Golden<TaskStatusReport>(R"({"attempt":2,"node_id":7,"state":"running"})");
  EXPECT_EQ(running.attempt, 2);
  EXPECT_EQ(running.node_id, 7);
  EXPECT_EQ(running.state, "running");
  EXPECT_FALSE(running.exit.has_value());
  const auto exited = Golden<TaskStatusReport>(
      R"({"attempt":2,"exit_code":137,"message":"killed","node_id":7,"signal":9,"state":"exited"})");
  ASSERT_TRUE(exited.exit.has_value());
  EXPECT_EQ(*exited.exit, (TaskExitInfo{137, 9, "killed"}));
  EXPECT_EQ(exited.phase, "");
  const auto staging = Golden<TaskStatusReport>(R"({"attempt":2,"node_id":7,"phase":"staging","state":"running"})");
  EXPECT_EQ(staging.phase, "staging");
}

// A tick's reports: each one a status report with its task's id; the answer
// one result per report, {} for a recorded one.
TEST(AgentProtocolGolden, TaskReports) {
  const auto batch = Golden<TaskReports>(
      R"({"reports":[{"attempt":1,"node_id":7,"phase":"starting","state":"","task_id":3},)"
      R"({"attempt":1,"exit_code":0,"message":"","node_id":7,"signal":0,"state":"exited","task_id":3}]})");
  ASSERT_EQ(batch.reports.size(), 2u);
  EXPECT_EQ(batch.reports[0].task_id, 3);
  EXPECT_EQ(batch.reports[0].status.phase, "starting");
  EXPECT_EQ(*batch.reports[1].status.exit, (TaskExitInfo{0, 0, ""}));
  const auto reply = Golden<TaskReportsReply>(R"({"results":[{},{"code":"FailedPrecondition","message":"stale"}]})");
  ASSERT_EQ(reply.results.size(), 2u);
  EXPECT_EQ(reply.results[0], TaskReportResult{});
  EXPECT_EQ(reply.results[1], (TaskReportResult{"FailedPrecondition", "stale"}));
}

TEST(AgentProtocol, TooManyReportsInOneBodyAreRefused) {
  json many = {{"reports", json::array()}};
  for (size_t i = 0; i <= kMaxReportsPerBody; ++i) many["reports"].push_back({{"task_id", i}, {"attempt", 1}});
  TaskReports out;
  EXPECT_EQ(FromJson(many, &out).message(), "reports.reports: at most 1000 in one body");
  many["reports"].erase(0);
  EXPECT_TRUE(FromJson(many, &out).ok());
  EXPECT_EQ(FromJson(json::parse(R"({"reports":[{"attempt":1}]})"), &out).message(), "reports.reports[0].task_id: required");
}

TEST(AgentProtocolGolden, ShipReply) {
  EXPECT_EQ(Golden<ShipReply>(R"({"size":4096})").size, 4096);
  EXPECT_STREQ(OutputRoute(OutputKind::kLogs), "logs");
  EXPECT_STREQ(OutputRoute(OutputKind::kMetrics), "metrics");
}

template <typename T>
void ExpectRoundTrip(const T& m) {
  T back;
  Status st = FromJson(ToJson(m), &back);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(back, m);
}

TEST(AgentProtocol, EveryMessageRoundTrips) {
  RegisterRequest reg;
  reg.name = "n";
  reg.cpu_milli = 1;
  reg.memory_bytes = 2;
  reg.gpus = {{std::nullopt, "A100", std::nullopt, "u"}, {3, std::nullopt, 5, std::nullopt}};
  reg.tasks = {{1, 2}, {3, 4}};
  reg.labels = {{"a", "b"}};
  reg.executors = {"docker"};
  ExpectRoundTrip(reg);
  ExpectRoundTrip(RegisterReply{9, Overlay{"ovs-gre", "10.0.0.0/8", "10.1.0.0/16", {{"a", "1.2.3.4", "10.2.0.0/16"}}}, 1, 2, 3});
  ExpectRoundTrip(HeartbeatReply{std::nullopt, 4, "why"});
  Assignment a;
  a.task_id = 1;
  a.attempt = 2;
  a.stop = true;
  a.env = {{"K", "V"}};
  a.gpus = {3};
  ExpectRoundTrip(Assignments{77, {a, Assignment{}}});
  ExpectRoundTrip(TaskStatusReport{1, 2, "exited", TaskExitInfo{-1, 0, "x"}, ""});
  ExpectRoundTrip(TaskStatusReport{1, 2, "running", std::nullopt, ""});
  ExpectRoundTrip(TaskStatusReport{1, 2, "running", std::nullopt, "uploading"});
  ExpectRoundTrip(ShipReply{5});
  ExpectRoundTrip(TaskReports{{{3, TaskStatusReport{1, 2, "exited", TaskExitInfo{1, 0, "x"}, ""}},
                               {4, TaskStatusReport{1, 1, "", std::nullopt, "staging"}}}});
  ExpectRoundTrip(TaskReportsReply{{{}, {"NotFound", "no task 4"}}});
  Heartbeat beat;
  beat.fence_after_ms = 10;
  beat.samples.resize(2);
  beat.samples[1].t_ms = 5;
  Heartbeat back;
  ASSERT_TRUE(FromJson(ToJson(beat), &back).ok());
  EXPECT_EQ(back.fence_after_ms, 10);
  ASSERT_EQ(back.samples.size(), 2u);
  EXPECT_EQ(back.samples[1].t_ms, 5);
}

// Errors name the message and the field, down to the list entry.
TEST(AgentProtocol, ErrorsNameTheField) {
  auto error = [](auto* m, const std::string& wire) { return FromJson(json::parse(wire), m).message(); };
  RegisterRequest reg;
  EXPECT_EQ(error(&reg, R"({"tasks":[{"task_id":1,"attempt":1},{"task_id":2,"attempt":"x"}]})"),
            "register.tasks[1].attempt: must be an integer");
  EXPECT_EQ(error(&reg, R"({"labels":{"k":1}})"), "register.labels.k: must be a string");
  EXPECT_EQ(error(&reg, R"({"gpus":[{"model":3}]})"), "register.gpus[0].model: must be a string");
  EXPECT_EQ(error(&reg, R"([])"), "register: must be an object");
  Heartbeat beat;
  EXPECT_EQ(error(&beat, R"({"fence_after_ms":"soon"})"), "heartbeat.fence_after_ms: must be an integer");
  Assignments as;
  EXPECT_EQ(error(&as, R"({"tasks":[{"task_id":1,"attempt":1,"desired":"run","argv":[],"env":{}}]})"),
            "assignments.tasks[0].user: required");
  EXPECT_EQ(error(&as, R"({"tasks":[{"task_id":1,"attempt":1,"desired":"run","argv":[2],"env":{},"user":{"id":1}}]})"),
            "assignments.tasks[0].argv[0]: must be a string");
  EXPECT_EQ(error(&as, R"({"index":-1,"tasks":[]})"), "assignments.index: must be an integer of at least 0");
  RegisterReply reply;
  EXPECT_EQ(error(&reply, R"({"node_id":1,"overlay":{"subnet":"x","block":"y"}})"), "register_reply.overlay.peers: required");
  TaskStatusReport st;
  EXPECT_EQ(error(&st, R"({"attempt":4294967296000000000000})"), "status.attempt: must be an integer");
}

}  // namespace
}  // namespace ringmaster::protocol
