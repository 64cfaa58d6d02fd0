// The agent protocol: each message between an agent and its server as a
// struct, with its JSON (the wire format) both ways. ToJson writes what
// today's agents and servers send; FromJson accepts what an agent or server
// one release back sends (absent optional fields keep their defaults) and
// fails naming the field. Types only, no I/O; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "protocol/samples.h"

namespace ringmaster::protocol {

// The protocol's version: a server speaks kAgentProtocol and those before it
// down to kMinAgentProtocol, so agents may run a release behind their server
// during an upgrade, never ahead of it (docs/install.md, "Versions").
// 1: agents send no version and fence at 70% of the register reply's lease_ms.
// 2: agents fence at its fence_after_ms, and list the tasks they hold when they register.
// 3: agents send a tick's reports together (TaskReports; since 0.3.0).
inline constexpr int kAgentProtocol = 3;
inline constexpr int kMinAgentProtocol = 1;

// A GPU as the agent registers it; the server keeps the fields given.
struct GpuInfo {
  std::optional<int64_t> index;  // absent: its place in the list
  std::optional<std::string> model;
  std::optional<int64_t> memory_bytes;
  std::optional<std::string> uuid;
  bool operator==(const GpuInfo&) const = default;
};

// A task attempt an agent holds.
struct HeldTask {
  int64_t task_id = 0;
  int64_t attempt = 0;
  bool operator==(const HeldTask&) const = default;
};

// POST /api/v1/agent/register. Integers the server bounds are kept wide
// here: their ranges are the server's to check, not the parser's.
struct RegisterRequest {
  std::string name;
  int64_t cpu_milli = -1;     // -1: absent
  int64_t memory_bytes = -1;  // -1: absent
  std::vector<GpuInfo> gpus;
  std::string agent_version;
  int64_t protocol_version = 1;  // absent: an agent of protocol 1
  std::vector<HeldTask> tasks;   // read by the server from protocol 2 on
  int64_t fence_after_ms = 0;    // the window the agent keeps now
  std::string address;
  int64_t port_lo = 0;
  int64_t port_hi = -1;
  std::map<std::string, std::string> labels;
  std::vector<std::string> executors = {"process"};  // absent: an agent from before executors ran processes
  std::string network = "host";
  int64_t tunnel_port = 0;  // where the agent takes lab tunnels (protocol/lab_tunnel.h); 0 = none
  bool operator==(const RegisterRequest&) const = default;
};

// The container overlay as the server describes it to a node.
struct OverlayPeer {
  std::string node;
  std::string address;
  std::string block;
  bool operator==(const OverlayPeer&) const = default;
};
struct Overlay {
  std::string mode;  // vxlan, ovs-gre
  std::string subnet;
  std::string block;  // this node's
  std::vector<OverlayPeer> peers;
  bool operator==(const Overlay&) const = default;
};

struct RegisterReply {
  int64_t node_id = 0;
  std::optional<Overlay> overlay;  // none on the host network (null on the wire)
  int64_t lease_ms = 0;
  int64_t fence_after_ms = 0;  // 0 from a server of protocol 1: fence at 70% of lease_ms
  int64_t protocol_version = 0;
  std::string tunnel_key;  // hex: the node's key for lab tunnel tickets ("" from older servers)
  bool operator==(const RegisterReply&) const = default;
};

// POST /api/v1/agent/nodes/{id}/heartbeat.
struct Heartbeat {
  std::vector<NodeSample> samples;
  int64_t fence_after_ms = -1;  // -1: absent (protocol 1)
  int64_t tunnel_port = 0;      // as at register: a restarted server learns it again here
  // Not on the wire: why FromJson dropped the samples. Bad samples never fail
  // a heartbeat, which would end the node's lease for a telemetry error.
  std::string samples_error;
};

struct HeartbeatReply {
  std::optional<Overlay> overlay;
  int64_t fence_after_ms = 0;
  std::string samples_refused;  // "" (absent): all were kept
  bool operator==(const HeartbeatReply&) const = default;
};

// One task the server wants on the node (GET .../assignments).
struct TaskLimits {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t pids = 0;
  int64_t io_read_bps = 0;
  int64_t io_write_bps = 0;
  int64_t io_read_iops = 0;
  int64_t io_write_iops = 0;
  int64_t disk_bytes = 0;  // resources.disk; 0 (or absent, from older servers) = the node's default
  bool operator==(const TaskLimits&) const = default;
};
struct Assignment {
  int64_t task_id = 0;
  int attempt = 0;
  int64_t job_id = 0;
  int rank = 0;
  int64_t user_id = 0;
  std::string user_name;
  bool stop = false;  // desired: "stop" (else "run")
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;
  std::string image;     // "" = none (a process)
  std::string executor;  // "" = the node's choice
  // host (the node's own: `network: host`, or a server one release back),
  // job (the job's own namespace on this node, agent --task-network), overlay, none.
  std::string network = "host";
  std::string overlay_address;
  // The addresses the gang's other tasks come from (their overlay addresses,
  // or the other nodes' the gang spans): all a task's filter lets in from
  // outside its node. Absent: none (same-job tasks on this node only).
  std::vector<std::string> peers;
  TaskLimits limits;
  std::vector<int> gpus;  // the node's, by index
  int64_t stop_grace_ms = 5000;
  bool operator==(const Assignment&) const = default;
};
// The long-poll's answer: what the node runs as of `index`.
struct Assignments {
  uint64_t index = 0;
  std::vector<Assignment> tasks;
  bool operator==(const Assignments&) const = default;
};

// POST /api/v1/agent/tasks/{id}/status.
struct TaskExitInfo {
  int64_t exit_code = -1;
  int64_t signal = 0;
  std::string message;
  bool operator==(const TaskExitInfo&) const = default;
};
struct TaskStatusReport {
  int64_t node_id = 0;  // informational: the server knows the task's node
  int64_t attempt = 0;
  std::string state;  // running, exited
  std::optional<TaskExitInfo> exit;
  // Set: not a change of state but where the task is in starting or ending
  // ("staging", "pulling", "starting", "uploading"); the server records it
  // for the job's timeline. Servers before it ignore the field.
  std::string phase;
  bool operator==(const TaskStatusReport&) const = default;
};

// POST /api/v1/agent/nodes/{id}/reports: every report of one agent tick, in
// the order they happened (a task's phases before its start, its start
// before its exit), recorded in one transaction. The answer has one result
// per report, in the same order. Agents of protocol 3 send these; the
// per-task route above stays for agents one release behind.
inline constexpr size_t kMaxReportsPerBody = 1000;
struct TaskReport {
  int64_t task_id = 0;
  TaskStatusReport status;
  bool operator==(const TaskReport&) const = default;
};
struct TaskReports {
  std::vector<TaskReport> reports;
  bool operator==(const TaskReports&) const = default;
};
// code "": recorded; else the error's code name (FailedPrecondition: not this
// node's attempt any more; NotFound: no such task) and its message.
struct TaskReportResult {
  std::string code;
  std::string message;
  bool operator==(const TaskReportResult&) const = default;
};
struct TaskReportsReply {
  std::vector<TaskReportResult> results;
  bool operator==(const TaskReportsReply&) const = default;
};

// POST /api/v1/agent/tasks/{id}/{logs,metrics}?attempt=A&offset=O: bytes of
// a task's output appended at an offset (safe to resend); the body is raw.
enum class OutputKind { kLogs, kMetrics };
struct OutputChunk {
  int64_t task_id = 0;
  OutputKind kind = OutputKind::kLogs;
  int64_t attempt = 0;
  int64_t offset = 0;
  std::string data;
  bool operator==(const OutputChunk&) const = default;
};
struct ShipReply {
  int64_t size = 0;  // the bytes the server holds now
  bool operator==(const ShipReply&) const = default;
};
// "logs" or "metrics": the route's last segment.
const char* OutputRoute(OutputKind kind);

nlohmann::json ToJson(const RegisterRequest& m);
nlohmann::json ToJson(const RegisterReply& m);
nlohmann::json ToJson(const Overlay& m);
nlohmann::json ToJson(const Heartbeat& m);
nlohmann::json ToJson(const HeartbeatReply& m);
nlohmann::json ToJson(const Assignment& m);
nlohmann::json ToJson(const Assignments& m);
nlohmann::json ToJson(const TaskStatusReport& m);
nlohmann::json ToJson(const TaskReports& m);
nlohmann::json ToJson(const TaskReportsReply& m);
nlohmann::json ToJson(const ShipReply& m);

// Each reads a message; InvalidArgument naming the field ("<path>.field: ...").
// `path` names the message in errors; each has its own by default.
Status FromJson(const nlohmann::json& j, RegisterRequest* out, const std::string& path = "register");
Status FromJson(const nlohmann::json& j, RegisterReply* out, const std::string& path = "register_reply");
Status FromJson(const nlohmann::json& j, Overlay* out, const std::string& path = "overlay");
Status FromJson(const nlohmann::json& j, Heartbeat* out, const std::string& path = "heartbeat");
Status FromJson(const nlohmann::json& j, HeartbeatReply* out, const std::string& path = "heartbeat_reply");
Status FromJson(const nlohmann::json& j, Assignment* out, const std::string& path = "assignment");
Status FromJson(const nlohmann::json& j, Assignments* out, const std::string& path = "assignments");
Status FromJson(const nlohmann::json& j, TaskStatusReport* out, const std::string& path = "status");
Status FromJson(const nlohmann::json& j, TaskReports* out, const std::string& path = "reports");
Status FromJson(const nlohmann::json& j, TaskReportsReply* out, const std::string& path = "reports_reply");
Status FromJson(const nlohmann::json& j, ShipReply* out, const std::string& path = "ship_reply");

// FromJson into a fresh T.
template <typename T>
StatusOr<T> Parse(const nlohmann::json& j) {
  T out;
  RM_RETURN_IF_ERROR(FromJson(j, &out));
  return out;
}

}  // namespace ringmaster::protocol
