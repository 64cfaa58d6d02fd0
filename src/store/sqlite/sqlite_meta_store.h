// SQLite backend of MetaStore: one connection in WAL mode behind one lock
// (StoreMutex); statements prepared once and kept (statements.h); a group
// commit makes commits durable (group_commit.h). Internal to store/sqlite/:
// others open it through OpenMetaStore("sqlite:PATH"). Thread-safe.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "store/meta_store.h"
#include "store/rows.h"
#include "store/sqlite/group_commit.h"
#include "store/sqlite/statements.h"
#include "store/store_mutex.h"

namespace ringmaster::store::sqlite {

// Opens (creating if needed) the database at `path` and applies any pending
// schema migrations (only up to `up_to_version` when it is > 0: for tests of
// the migrations themselves). The database file is private (0600).
StatusOr<std::unique_ptr<MetaStore>> Open(const std::string& path, int up_to_version = 0);

class SqliteMetaStore final : public MetaStore {
 public:
  SqliteMetaStore(sqlite3* db, const std::string& path);
  ~SqliteMetaStore() override;

  // schema.cc: journal mode, pragmas and the migrations.
  Status Init(int up_to_version);
  // integrity.cc: SQLite's quick_check and a read of every row, at open.
  void CheckAtOpen();

  Status InTransaction(const std::function<Status()>& fn) override;
  uint64_t CommitTicket() override { return mu_.Commits(); }
  Status AwaitDurable(uint64_t ticket) override { return group_commit_.Await(ticket); }
  uint64_t JobVersion(int64_t job_id) override { return mu_.versions().Job(job_id); }
  uint64_t AuthVersion() override { return mu_.versions().Auth(); }
  std::vector<std::string> Damage() override;
  // table_copy.cc: the rows `ringmaster admin migrate` moves.
  TableCopy* tables() override;

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

  // jobs.cc: jobs, tasks, events and the audit log.
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

  // registry_credentials.cc
  Status PutRegistryCredential(const RegistryCredential& credential) override;
  StatusOr<RegistryCredential> GetRegistryCredential(int64_t user_id, const std::string& registry) override;
  StatusOr<std::vector<RegistryCredential>> ListRegistryCredentials(int64_t user_id) override;
  Status DeleteRegistryCredential(int64_t user_id, const std::string& registry) override;

 private:
  friend class SqliteTableCopy;
  using Lock = std::lock_guard<StoreMutex>;

  // Task rows of ranks [from, to) from a template.
  Status InsertTasks(int64_t job_id, int from, int to, const Task& tmpl);
  static void BindJob(Stmt& s, const Job& j);
  static void BindTaskBody(Stmt& s, const Task& t);
  // Steps a write that must touch a row: NotFound("<what> not found") if it touched none.
  Status StepOne(Stmt& s, const std::string& what);
  std::string Err(const std::string& what);
  Status Check(int rc, const std::string& what);
  // integrity.cc: the error of a call that returned `rc`. A full disk
  // (SQLITE_FULL, or an I/O error of ENOSPC or EDQUOT) is InsufficientStorage:
  // the statement or transaction was rolled back, and the same write succeeds
  // once space is freed. A corrupt page is DataLoss, noted as damage.
  Status Error(int rc, const std::string& what);
  // Damage seen (kept for /healthz; bounded), logged once each.
  void NoteDamage(const std::string& what);
  Status ScanTable(const char* table);
  Status Exec(const std::string& sql);
  Status ExecLocked(const std::string& sql);

  template <typename... Args>
  static void BindAll(Stmt& s, Args&&... args) {
    (s.Bind(args), ...);
  }

  template <typename T, typename Reader, typename... Args>
  StatusOr<T> One(const std::string& sql, Reader read, const std::string& what, Args&&... args) {
    Lock l(mu_);
    Stmt s(cache_, sql.c_str());
    if (!s.valid()) return Internal(Err("prepare"));
    BindAll(s, std::forward<Args>(args)...);
    int rc = s.Step();
    if (rc == SQLITE_ROW) {
      RowDamage().clear();
      T row = read(s);
      if (!RowDamage().empty()) {
        NoteDamage(RowDamage());
        return DataLoss("the server's database is damaged: " + std::exchange(RowDamage(), {}) +
                        "; it is not served (an admin must repair it)");
      }
      return row;
    }
    if (rc == SQLITE_DONE) return NotFound(what + " not found");
    return Error(rc, "query " + what);
  }

  template <typename T, typename Reader, typename... Args>
  StatusOr<std::vector<T>> Many(const std::string& sql, Reader read, Args&&... args) {
    Lock l(mu_);
    Stmt s(cache_, sql.c_str());
    if (!s.valid()) return Internal(Err("prepare"));
    BindAll(s, std::forward<Args>(args)...);
    std::vector<T> out;
    int rc;
    last_rows_read_ = 0;
    // A damaged row is left out of the list (and named in Damage()), not
    // passed on as if it were sound; the other rows still are. Lists the
    // scheduler's bookkeeping depends on (ManyWhole) fail instead.
    while ((rc = s.Step()) == SQLITE_ROW) {
      ++last_rows_read_;
      last_row_id_ = s.Int(0);
      RowDamage().clear();
      T row = read(s);
      if (RowDamage().empty()) {
        out.push_back(std::move(row));
      } else if (whole_) {
        NoteDamage(RowDamage());
        return DataLoss("the server's database is damaged: " + std::exchange(RowDamage(), {}) +
                        "; it is not served (an admin must repair it)");
      } else {
        NoteDamage(std::exchange(RowDamage(), {}));
      }
    }
    if (rc != SQLITE_DONE) return Error(rc, "query");
    return out;
  }

  // Many, but a damaged row fails the whole list (DataLoss naming it): for
  // lists that must be complete to be right (a gang's tasks, the placed tasks
  // that hold resources), where leaving a row out would be a wrong answer.
  template <typename T, typename Reader, typename... Args>
  StatusOr<std::vector<T>> ManyWhole(const std::string& sql, Reader read, Args&&... args) {
    Lock l(mu_);
    whole_ = true;
    auto out = Many<T>(sql, read, std::forward<Args>(args)...);
    whole_ = false;
    return out;
  }

  std::mutex damage_mu_;
  std::vector<std::string> damage_;  // GUARDED_BY(damage_mu_)
  // The last Many's rows read (damaged ones too) and the first column of its last row.
  size_t last_rows_read_ = 0;  // GUARDED_BY(mu_)
  int64_t last_row_id_ = 0;    // GUARDED_BY(mu_)
  bool whole_ = false;         // GUARDED_BY(mu_): Many fails on a damaged row
  sqlite3* db_;
  StmtCache cache_;  // GUARDED_BY(mu_)
  StoreMutex mu_;
  GroupCommit group_commit_;
  int tx_depth_ = 0;  // GUARDED_BY(mu_)
  std::unique_ptr<TableCopy> table_copy_;  // GUARDED_BY(mu_); made on first use
};

}  // namespace ringmaster::store::sqlite
