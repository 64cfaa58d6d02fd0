// PostgreSQL backend of MetaStore (libpq), with Leadership (the `leader`
// lease row, fencing by epoch) and TableCopy. Writes and transactions run on
// one connection behind the store's lock (StoreMutex, as in SQLite); reads
// outside a transaction on a pool (`pool=N`, default 8). Internal: opened
// through OpenMetaStore("postgres://..."). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/meta_store.h"
#include "store/postgres/connection.h"
#include "store/postgres/open.h"
#include "store/rows.h"
#include "store/store_mutex.h"

namespace ringmaster::store::postgres {

// What a write moves: a job's version, the auth version.
struct Touch {
  int64_t job = 0;
  bool auth = false;
};

class PgMetaStore final : public MetaStore, public Leadership, public TableCopy {
 public:
  explicit PgMetaStore(const ConnInfo& info);
  ~PgMetaStore() override = default;

  // init.cc: the migrations, then a read of every row for damage.
  Status Init();
  void CheckAtOpen();

  Status InTransaction(const std::function<Status()>& fn) override;
  uint64_t CommitTicket() override { return mu_.Commits(); }
  // A group commit: transactions commit with synchronous_commit off; a waiter
  // runs one synchronous commit of a one-row write (sync_marker) on its own
  // connection, whose WAL flush covers every commit before it, for all waiters.
  Status AwaitDurable(uint64_t ticket) override;
  uint64_t JobVersion(int64_t job_id) override { return mu_.versions().Job(job_id) + StandbyMove(); }
  uint64_t AuthVersion() override { return mu_.versions().Auth() + StandbyMove(); }
  std::vector<std::string> Damage() override;
  Leadership* leadership() override { return this; }
  TableCopy* tables() override { return this; }

  StatusOr<int64_t> CreateUser(const User& user) override;
  StatusOr<User> GetUser(int64_t id) override;
  StatusOr<User> GetUserByName(const std::string& name) override;
  StatusOr<std::vector<User>> ListUsers() override;
  StatusOr<int64_t> CountUsers() override;
  Status SetUserDisabled(int64_t id, bool disabled) override;
  Status SetUserFileQuota(int64_t id, int64_t bytes) override;
  Status SetUserPrivileges(int64_t id, int max_priority, bool host_network) override;
  Status AddUserFileBytes(int64_t id, int64_t delta) override;
  Status SetUserFileBytes(int64_t id, int64_t bytes) override;

  StatusOr<int64_t> CreateToken(const Token& token) override;
  StatusOr<Token> GetToken(int64_t id) override;
  StatusOr<Token> GetTokenByHash(const std::string& hash) override;
  StatusOr<std::vector<Token>> ListTokens(int64_t user_id) override;
  StatusOr<int64_t> CountTokens(int64_t user_id) override;
  Status DeleteToken(int64_t token_id) override;

  StatusOr<int64_t> UpsertNode(const Node& node) override;
  Status UpdateNodeStatus(int64_t id, int64_t heartbeat_ms, double cpu_util, int64_t memory_used_bytes) override;
  StatusOr<Node> GetNode(int64_t id) override;
  StatusOr<std::vector<Node>> ListNodes() override;
  Status SetNodeCordon(int64_t id, bool cordoned, const std::string& reason, bool draining) override;
  Status SetNodeFence(int64_t id, int64_t fence_after_ms) override;
  Status DeleteNode(int64_t id) override;

  // jobs.cc: jobs, tasks, events, the audit log and registry logins.
  StatusOr<int64_t> CreateJob(const Job& job, const Task& task_template) override;
  StatusOr<Job> GetJob(int64_t id) override;
  StatusOr<Job> GetJobBySubmitKey(int64_t user_id, const std::string& submit_key) override;
  StatusOr<JobPage> ListJobs(const JobFilter& filter) override;
  StatusOr<std::vector<Job>> ListActiveJobs() override;
  StatusOr<int64_t> CountJobs(int64_t user_id, State state) override;
  StatusOr<std::map<std::pair<int64_t, State>, int64_t>> CountJobsByUserAndState() override;
  Status UpdateJob(const Job& job) override;
  Status DeleteJob(int64_t id) override;
  StatusOr<Task> GetTask(int64_t id) override;
  StatusOr<std::vector<Task>> ListTasks(int64_t job_id) override;
  StatusOr<std::vector<Task>> ListPlacedTasks() override;
  Status UpdateTask(const Task& task) override;
  Status ResizeTasks(int64_t job_id, int replicas, const Task& task_template) override;
  Status AddEvent(const Event& event) override;
  StatusOr<std::vector<Event>> ListEvents(int64_t job_id) override;
  Status AddAudit(const AuditEntry& entry) override;
  StatusOr<std::vector<AuditEntry>> ListAudit(int limit, const std::string& user, const std::string& action) override;
  Status PruneAudit(int64_t keep) override;
  Status PutRegistryCredential(const RegistryCredential& credential) override;
  StatusOr<RegistryCredential> GetRegistryCredential(int64_t user_id, const std::string& registry) override;
  StatusOr<std::vector<RegistryCredential>> ListRegistryCredentials(int64_t user_id) override;
  Status DeleteRegistryCredential(int64_t user_id, const std::string& registry) override;

  // leadership.cc (store/leadership.h): each call one statement on a
  // connection of its own with a 2 s statement timeout.
  StatusOr<LeaseState> Acquire(const std::string& me, const std::string& my_url, int64_t epoch,
                               std::chrono::milliseconds lease) override;
  StatusOr<LeaseState> Current() override;
  Status Release(const std::string& me, int64_t epoch) override;
  void SetFence(int64_t epoch) override { fence_.store(epoch); }
  void OnFenced(std::function<void(int64_t seen_epoch)> on_fenced) override;

  // table_copy.cc (store/table_copy.h).
  StatusOr<TableRows> ReadTable(const std::string& table) override;
  Status WriteTable(const std::string& table, const TableRows& rows) override;
  StatusOr<int64_t> LastId(const std::string& table) override;
  Status SetLastId(const std::string& table, int64_t id) override;

 private:
  using Lock = std::lock_guard<StoreMutex>;
  // While the fence is 0 (a standby) another process writes: versions move
  // at every read. The moves stay counted after a promotion, so that no
  // version ever goes back.
  uint64_t StandbyMove() { return fence_.load() == 0 ? standby_moves_.fetch_add(1) + 1 : standby_moves_.load(); }
  bool InMyTransaction() const;
  // BEGIN, and with a fence set the epoch check; `seen` is the epoch found when it had moved.
  Status Begin(int64_t* seen);
  // One write statement: in the caller's transaction, or a transaction of its own.
  StatusOr<Result> Write(const std::string& sql, const Params& params, Touch touch = {});
  // Write, NotFound("<what> not found") if it touched no row.
  Status WriteOne(const std::string& sql, const Params& params, const std::string& what, Touch touch = {});
  // A read: on the transaction's connection when this thread is in one, else on a pooled one.
  StatusOr<Result> Read(const std::string& sql, const Params& params = Params());
  Status Noted(Status st);
  void NoteDamage(const std::string& what);
  // Task rows of ranks [from, to) from a template. REQUIRES: in a transaction.
  Status InsertTasks(int64_t job_id, int from, int to, const Task& tmpl);
  StatusOr<Result> LeaseExec(const std::string& sql, const Params& params);

  template <typename T>
  StatusOr<T> One(const std::string& sql, T (*read)(const Row&), const std::string& what, const Params& params) {
    RM_ASSIGN_OR_RETURN(Result r, Read(sql, params));
    if (r.rows() == 0) return NotFound(what + " not found");
    RowDamage().clear();
    T row = read(PgRow(r, 0));
    if (!RowDamage().empty()) {
      NoteDamage(RowDamage());
      return DataLoss("the server's database is damaged: " + std::exchange(RowDamage(), {}) +
                      "; it is not served (an admin must repair it)");
    }
    return row;
  }

  // A damaged row is left out (and named in Damage()); with `whole` (lists
  // that must be complete to be right) it fails the list with DataLoss.
  template <typename T>
  StatusOr<std::vector<T>> Many(const std::string& sql, T (*read)(const Row&), const Params& params = Params(),
                                bool whole = false) {
    RM_ASSIGN_OR_RETURN(Result r, Read(sql, params));
    std::vector<T> out;
    out.reserve(r.rows());
    for (int i = 0; i < r.rows(); ++i) {
      RowDamage().clear();
      T row = read(PgRow(r, i));
      if (RowDamage().empty()) {
        out.push_back(std::move(row));
      } else if (whole) {
        NoteDamage(RowDamage());
        return DataLoss("the server's database is damaged: " + std::exchange(RowDamage(), {}) +
                        "; it is not served (an admin must repair it)");
      } else {
        NoteDamage(std::exchange(RowDamage(), {}));
      }
    }
    return out;
  }

  const ConnInfo info_;
  const std::chrono::milliseconds call_timeout_;
  std::atomic<int64_t> retry_at_ms_{0};  // Connection's back-off, shared by the store's connections

  StoreMutex mu_;
  Connection writer_;  // GUARDED_BY(mu_)

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<Connection>> idle_;  // GUARDED_BY(pool_mu_)
  int pool_made_ = 0;                              // GUARDED_BY(pool_mu_)

  std::mutex lease_mu_;
  Connection lease_conn_;  // GUARDED_BY(lease_mu_)

  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  uint64_t durable_ = 0;  // GUARDED_BY(sync_mu_)
  bool syncing_ = false;  // GUARDED_BY(sync_mu_)
  Connection sync_conn_;  // used by the one syncing waiter

  std::atomic<int64_t> fence_{-1};  // -1: unfenced; 0: a standby; else the epoch writes need
  std::atomic<uint64_t> standby_moves_{0};
  std::mutex fenced_mu_;
  std::function<void(int64_t)> on_fenced_;  // GUARDED_BY(fenced_mu_)

  std::mutex damage_mu_;
  std::vector<std::string> damage_;  // GUARDED_BY(damage_mu_)
};

}  // namespace ringmaster::store::postgres
