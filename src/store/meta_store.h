// MetaStore: durable metadata of the platform — users, API tokens, nodes,
// jobs, tasks, the event log of every state transition and the audit log.
// Ids are never reused, even after a delete. The server is its only writer.
// Backends (sqlite/, postgres/, memory/) are opened by URL (OpenMetaStore)
// and all pass the contract suite (meta_store_contract.h). Thread-safety: safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/leadership.h"
#include "store/table_copy.h"

namespace ringmaster::store {

enum class Role { kAdmin, kUser };
const char* RoleName(Role r);
std::optional<Role> ParseRole(const std::string& s);

// Job and task lifecycle: PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED.
// kLost: the task's node missed its lease (no heartbeat); terminal, like kFailed for the gang.
enum class State { kPending, kScheduled, kRunning, kSucceeded, kFailed, kCancelled, kLost };
const char* StateName(State s);
std::optional<State> ParseState(const std::string& s);
bool IsTerminal(State s);

struct User {
  int64_t id = 0;  // never reused: agents map it to a task uid, files live under it
  std::string name;
  Role role = Role::kUser;
  std::string password_hash;  // empty: token-only user
  int64_t created_ms = 0;
  bool disabled = false;  // a disabled user's tokens and password stop working at once
  int64_t file_quota_bytes = 0;  // what the user's files may use; 0 = no quota
  int64_t file_bytes = 0;        // what they use (users/<name>/ and their jobs' files)
  // Privileges an admin grants (admins hold both in full, server/privileges.h):
  int max_priority = 0;          // the highest `priority` their jobs may ask for
  bool host_network = false;     // whether their jobs may ask for `network: host`
};

struct Token {
  int64_t id = 0;
  int64_t user_id = 0;
  std::string name;
  std::string hash;  // sha256 hex of the secret
  int64_t created_ms = 0;
  std::string scope = "submit";  // read | submit | admin | agent (server/auth.h)
  std::string node;              // agent tokens: the one node they may act as
  int64_t expires_ms = 0;        // refused from then on (0 = never)
  bool session = false;          // a browser session (server/auth.h), not an API token
};

struct Node {
  int64_t id = 0;
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int gpu_count = 0;
  std::string gpus_json = "[]";  // [{"index":0,"model":"...","memory_bytes":N}]
  std::string gpu_model;         // model of its GPUs ("" if none)
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;
  double cpu_util = 0;            // 0..1, whole node
  int64_t memory_used_bytes = 0;  // whole node
  std::string agent_version;
  std::string address;  // where other nodes reach tasks on this one
  int port_lo = 0;      // ports the platform may hand to tasks here: [port_lo, port_hi]
  int port_hi = -1;
  std::string labels_json = "{}";  // {"rack": "r1", ...}: what node selectors match
  std::string executors = "process";  // what its agent runs tasks with: "process,runc,docker"
  std::string network = "host";       // its containers' network: "host", "vxlan" or "ovs-gre"
  int overlay_block = -1;             // its block of the cluster's overlay subnet; -1 = none
  // An admin's: a cordoned node gets no new work (`cordon_reason` says why);
  // a draining one is also being emptied. An agent's registration keeps both.
  bool cordoned = false;
  std::string cordon_reason;
  bool draining = false;
  // The fencing window its agent keeps (it stops its tasks after this long
  // without the server), as it last said; 0 = not said.
  int64_t fence_after_ms = 0;
};

struct Job {
  int64_t id = 0;
  int64_t user_id = 0;
  std::string name;
  std::string kind;
  State state = State::kPending;
  std::string reason;     // why it is in `state` (pending reason, failure, ...)
  std::string spec_json;  // normalised JobSpec
  int priority = 0;
  int replicas = 1;
  int max_restarts = 0;
  int restarts = 0;
  // A job being stopped (cancel, a failed task, a restart) keeps its state
  // until every task has ended; then it moves to `stop_state`.
  std::optional<State> stop_state;  // kCancelled, kFailed, or kPending (= restart)
  std::string stop_reason;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  int64_t not_before_ms = 0;  // a restarting job waits out its backoff until then
  int resize_to = 0;          // an elastic job being stopped to restart at this size (0: none)
  double service_s = 0;       // device-seconds its ended runs held (LAS's attained service)
  // The client's key for this submit ("" = none): a submit retried with the
  // same key (after a lost answer, a failover) finds the job it made instead
  // of making a second. Unique per user; set at creation, never changed.
  std::string submit_key;
};

enum class Desired { kRun, kStop };

struct Task {
  int64_t id = 0;
  int64_t job_id = 0;
  int rank = 0;
  State state = State::kPending;
  std::string reason;
  int64_t node_id = 0;  // 0 = unplaced
  int attempt = 0;      // 1 on first placement; fences reports of older attempts
  Desired desired = Desired::kRun;
  std::optional<int> exit_code;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int gpus = 0;
  int port = 0;  // from its node's range while placed; 0 = none
  std::string gpu_indices;  // the node's GPUs it holds while placed, e.g. "0,1"; "" = none
  std::string overlay_ip;   // its address on the container overlay while placed; "" = the node's
  int64_t created_ms = 0;
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
};

// Who did what, when, from where: logins, token and user changes, admin actions.
struct AuditEntry {
  int64_t id = 0;
  int64_t ts_ms = 0;
  std::string user;     // who acted ("" if unknown, e.g. a failed login's name goes in target)
  std::string address;  // the client's IP address
  std::string action;   // "login", "token.create", "user.disable", ...
  std::string target;   // what it acted on: "user alice", "token 12", "job 7"
  std::string outcome;  // "ok", "denied", "failed"
  std::string detail;
};

// One user's login to an OCI registry (or the site's, user_id 0, for every
// user's jobs). The password is sealed by the server (server/secret_box.h)
// with a key outside the store: the store never holds it in clear.
struct RegistryCredential {
  int64_t user_id = 0;   // 0 = the site's
  std::string registry;  // "registry.example:5000", "docker.io"
  std::string username;
  std::string sealed;  // the sealed password (base64)
  int64_t updated_ms = 0;
};

struct Event {
  int64_t id = 0;
  int64_t job_id = 0;
  int64_t task_id = 0;  // 0 for job-level events
  int rank = -1;
  int64_t ts_ms = 0;
  std::string from_state;
  std::string to_state;
  std::string reason;
};

// What ListJobs selects: every condition set must hold. Newest first, paged.
struct JobFilter {
  int64_t user_id = 0;        // 0 = every user's
  std::vector<State> states;  // empty = any state
  std::string kind;           // "" = any kind
  std::string name;           // a substring of the name, ASCII case-insensitive; "" = any
  int limit = 100;            // jobs in the page; negative = no limit
  int64_t offset = 0;         // jobs of the selection skipped before the page
};

struct JobPage {
  std::vector<Job> jobs;
  int64_t total = 0;  // jobs the filter selects, every page together
};

// Whether `job` is one `filter` selects (paging aside): what every backend's
// selection must agree with.
bool JobFilterSelects(const JobFilter& filter, const Job& job);
// For SQL backends: the pattern of `LOWER(name) LIKE ? ESCAPE '\'` that
// matches names holding `substring` (case-folded, its % _ \ escaped).
std::string NameLikePattern(const std::string& substring);

// Text (every string given or looked up) must be UTF-8 without NUL bytes:
// every backend refuses other text with InvalidArgument, storing nothing.
class MetaStore {
 public:
  virtual ~MetaStore() = default;

  // Runs `fn` atomically: every write inside commits together or not at all.
  // Nested calls join the outer transaction. A `fn` that throws is rolled
  // back (the exception goes on to the caller) and the store stays usable.
  virtual Status InTransaction(const std::function<Status()>& fn) = 0;
  // Durability by ticket, not by thread: a request's writes may be made on
  // any thread, and a ticket taken after them covers them wherever they ran.
  // CommitTicket: the latest commit's number. AwaitDurable: returns once every
  // commit up to `ticket` is on disk (survives a crash of the machine); one
  // sync serves every waiter. Unavailable (or InsufficientStorage) if the disk
  // refused it: acknowledge nothing that was written before the ticket then.
  virtual uint64_t CommitTicket() = 0;
  virtual Status AwaitDurable(uint64_t ticket) = 0;
  // Every commit made so far is on disk.
  Status Sync() { return AwaitDurable(CommitTicket()); }
  // Versions for caches, read without a lock: JobVersion moves on after every
  // write to the job, its tasks or its events has committed; AuthVersion after
  // every write to users or tokens. Read the version, then the data: a view
  // built from them is current while the version stays. Either may also move
  // when nothing of it changed.
  virtual uint64_t JobVersion(int64_t job_id) = 0;
  virtual uint64_t AuthVersion() = 0;
  // Damage found in the stored data: at open (a check of every page and row)
  // and since (a corrupt page read, a row whose fields do not parse). Each
  // names what is damaged. Damaged rows are never served: a read of one is
  // DataLoss naming it, and lists leave it out.
  virtual std::vector<std::string> Damage() = 0;
  // Leadership among servers sharing this store (store/leadership.h);
  // nullptr where one server alone can use it.
  virtual Leadership* leadership() { return nullptr; }
  // Its tables as rows, for moving a site to another backend
  // (store/table_copy.h); nullptr where it has none.
  virtual TableCopy* tables() { return nullptr; }

  virtual StatusOr<int64_t> CreateUser(const User& user) = 0;
  virtual StatusOr<User> GetUser(int64_t id) = 0;
  virtual StatusOr<User> GetUserByName(const std::string& name) = 0;
  virtual StatusOr<std::vector<User>> ListUsers() = 0;
  virtual StatusOr<int64_t> CountUsers() = 0;
  virtual Status SetUserDisabled(int64_t id, bool disabled) = 0;
  virtual Status SetUserFileQuota(int64_t id, int64_t bytes) = 0;
  virtual Status SetUserPrivileges(int64_t id, int max_priority, bool host_network) = 0;
  // Adds `delta` (negative: subtracts) to the user's file bytes, never below 0.
  virtual Status AddUserFileBytes(int64_t id, int64_t delta) = 0;
  // Sets them outright (a reconciling scan of the store).
  virtual Status SetUserFileBytes(int64_t id, int64_t bytes) = 0;

  virtual StatusOr<int64_t> CreateToken(const Token& token) = 0;
  virtual StatusOr<Token> GetToken(int64_t id) = 0;
  virtual StatusOr<Token> GetTokenByHash(const std::string& hash) = 0;
  // user_id 0 = every user's.
  virtual StatusOr<std::vector<Token>> ListTokens(int64_t user_id) = 0;
  virtual StatusOr<int64_t> CountTokens(int64_t user_id) = 0;
  virtual Status DeleteToken(int64_t token_id) = 0;

  // Inserts or, when a node of that name exists, updates its inventory.
  virtual StatusOr<int64_t> UpsertNode(const Node& node) = 0;
  virtual Status UpdateNodeStatus(int64_t id, int64_t heartbeat_ms, double cpu_util,
                                  int64_t memory_used_bytes) = 0;
  virtual StatusOr<Node> GetNode(int64_t id) = 0;
  virtual StatusOr<std::vector<Node>> ListNodes() = 0;
  // An admin's cordon and drain (Node::cordoned, cordon_reason, draining).
  virtual Status SetNodeCordon(int64_t id, bool cordoned, const std::string& reason, bool draining) = 0;
  virtual Status SetNodeFence(int64_t id, int64_t fence_after_ms) = 0;
  // Forgets the node; its tasks keep their node id (history).
  virtual Status DeleteNode(int64_t id) = 0;

  // Creates the job and its `job.replicas` tasks (PENDING); returns the job id.
  // AlreadyExists if the user has a job with the same non-empty submit_key.
  virtual StatusOr<int64_t> CreateJob(const Job& job, const Task& task_template) = 0;
  virtual StatusOr<Job> GetJob(int64_t id) = 0;
  // The user's job made with `submit_key` (non-empty); NotFound if none.
  virtual StatusOr<Job> GetJobBySubmitKey(int64_t user_id, const std::string& submit_key) = 0;
  // One page of the jobs `filter` selects, and how many it selects in all.
  virtual StatusOr<JobPage> ListJobs(const JobFilter& filter) = 0;
  // Jobs not in a terminal state, oldest first.
  virtual StatusOr<std::vector<Job>> ListActiveJobs() = 0;
  // The user's jobs in `state`.
  virtual StatusOr<int64_t> CountJobs(int64_t user_id, State state) = 0;
  // Every user's jobs by state (what /metrics exposes): {user_id, state} -> count.
  virtual StatusOr<std::map<std::pair<int64_t, State>, int64_t>> CountJobsByUserAndState() = 0;
  virtual Status UpdateJob(const Job& job) = 0;
  virtual Status DeleteJob(int64_t id) = 0;

  virtual StatusOr<Task> GetTask(int64_t id) = 0;
  virtual StatusOr<std::vector<Task>> ListTasks(int64_t job_id) = 0;
  // Tasks holding resources on some node: SCHEDULED or RUNNING.
  virtual StatusOr<std::vector<Task>> ListPlacedTasks() = 0;
  virtual Status UpdateTask(const Task& task) = 0;
  // An elastic job's new size: drops tasks of rank >= replicas, adds the
  // missing ranks from `task_template`. Call while every task has ended.
  virtual Status ResizeTasks(int64_t job_id, int replicas, const Task& task_template) = 0;

  virtual Status AddEvent(const Event& event) = 0;
  virtual StatusOr<std::vector<Event>> ListEvents(int64_t job_id) = 0;

  virtual Status AddAudit(const AuditEntry& entry) = 0;
  // Newest first; "" filters match everything.
  virtual StatusOr<std::vector<AuditEntry>> ListAudit(int limit, const std::string& user, const std::string& action) = 0;
  // Keeps the newest `keep` entries.
  virtual Status PruneAudit(int64_t keep) = 0;

  // Registry logins, one per (user_id, registry): Put replaces.
  virtual Status PutRegistryCredential(const RegistryCredential& credential) = 0;
  virtual StatusOr<RegistryCredential> GetRegistryCredential(int64_t user_id, const std::string& registry) = 0;
  // One user's (0: the site's), by registry.
  virtual StatusOr<std::vector<RegistryCredential>> ListRegistryCredentials(int64_t user_id) = 0;
  virtual Status DeleteRegistryCredential(int64_t user_id, const std::string& registry) = 0;
};

// Opens the store that `url` names: "sqlite:PATH" (or a bare PATH) opens,
// creating if needed, the SQLite database there and migrates it;
// "postgres://USER[:PASSWORD]@HOST:PORT/DB[?pool=N&statement_timeout=MS&...]"
// (or postgresql://) a PostgreSQL database, migrating it; "memory:" a new
// empty store that lives as long as the object (tests, throwaway servers).
StatusOr<std::unique_ptr<MetaStore>> OpenMetaStore(const std::string& url);

// `url` as it may be printed: a PostgreSQL URL without its password (in the
// user part or a password= parameter) nor its parameters; others as they are.
std::string RedactedStoreUrl(const std::string& url);
// A PostgreSQL store URL as libpq's own tools (pg_dump, psql) take it: no
// password (they find it in PGPASSWORD or ~/.pgpass) and none of the store's
// own parameters (pool, statement_timeout), which they refuse.
StatusOr<std::string> PostgresToolUrl(const std::string& url);

}  // namespace ringmaster::store
