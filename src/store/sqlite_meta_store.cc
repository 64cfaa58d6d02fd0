// SQLite backend of MetaStore. One connection in WAL mode. One mutex
// serialises access to the connection; statements are prepared once and
// kept (StmtCache, sqlite_rows.h, with the tables' row readers).
//
// Durability is a group commit: commits write the log (the -wal file)
// without waiting for the disk (synchronous=NORMAL), and whoever acknowledges
// a write first calls AwaitDurable/Sync, which fdatasync()s the log once for
// every commit made until then (one caller syncs, the others wait for it:
// Durability). An acknowledged write survives a crash of the process and of
// the machine; a write nobody was told of may be lost with the machine.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/files.h"
#include "store/meta_store.h"
#include "store/sqlite_rows.h"
#include "store/sqlite_schema.h"

namespace ringmaster::store {
namespace {

using sqlite::Stmt;
using sqlite::StmtCache;
using sqlite::RowDamage;
using sqlite::ReadUser;
using sqlite::ReadToken;
using sqlite::ReadAudit;
using sqlite::ReadNode;
using sqlite::ReadJob;
using sqlite::ReadTask;
using sqlite::ReadEvent;
using sqlite::kUserCols;
using sqlite::kTokenCols;
using sqlite::kNodeCols;
using sqlite::kJobCols;
using sqlite::kTaskCols;
using sqlite::kEventCols;

// Group commit: commits are numbered as they complete; Await(n) returns once
// commits 1..n are on disk. The first caller to find them not yet synced
// fdatasync()s the log for every commit made so far while later callers wait
// for it, so N concurrent writers pay for about one sync, not N.
class Durability {
 public:
  explicit Durability(std::string wal_path) : wal_path_(std::move(wal_path)) {}
  ~Durability() {
    if (fd_ >= 0) ::close(fd_);
  }
  uint64_t Committed() { return committed_.fetch_add(1) + 1; }
  uint64_t LastCommitted() const { return committed_.load(); }

  Status Await(uint64_t seq) {
    std::unique_lock<std::mutex> l(mu_);
    while (durable_ < seq) {
      if (syncing_) {
        cv_.wait(l);
        continue;
      }
      syncing_ = true;
      // Every commit numbered up to here has written its frames to the log.
      const uint64_t upto = committed_.load();
      if (fd_ < 0) fd_ = ::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC);
      const int fd = fd_;
      const int open_errno = errno;
      l.unlock();
      int rc = 0, err = 0;
      if (fd >= 0) {
        rc = ::fdatasync(fd);
        err = errno;
      } else {  // the log of a database in WAL mode exists once anything was committed
        rc = -1;
        err = open_errno;
      }
      l.lock();
      syncing_ = false;
      cv_.notify_all();
      // After a failed sync the kernel may have dropped the log's dirty pages
      // and a later sync can succeed without them (PostgreSQL's "fsyncgate"),
      // whatever the error (EIO, or ENOSPC on thin or network storage):
      // nothing is acknowledged again until the server restarts and reads
      // the log back. A full disk seen by SQLite's own write is different
      // (SQLITE_FULL: nothing was written, and the next write retries).
      if (rc != 0 && fd >= 0) failed_errno_ = err;
      if (failed_errno_ != 0) {
        return Unavailable(std::string("the database's log could not be made durable (") + std::strerror(failed_errno_) +
                           "): no write is acknowledged until the server is restarted");
      }
      if (rc != 0 && IsDiskFull(err)) {
        return ServerDiskFull(std::string("syncing the database's log: ") + std::strerror(err));
      }
      if (rc != 0) {
        return Unavailable(std::string("the database's log could not be made durable (") + std::strerror(err) +
                           "): the write is not acknowledged; try again");
      }
      durable_ = std::max(durable_, upto);
    }
    return Status::Ok();
  }

 private:
  const std::string wal_path_;
  std::atomic<uint64_t> committed_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t durable_ = 0;  // GUARDED_BY(mu_)
  bool syncing_ = false;  // GUARDED_BY(mu_)
  int fd_ = -1;           // GUARDED_BY(mu_)
  int failed_errno_ = 0;  // GUARDED_BY(mu_): an I/O error of a sync; sticks
};

// The calling thread's last commit: what AwaitDurable() waits for.
struct ThreadCommit {
  std::weak_ptr<Durability> durability;
  uint64_t seq = 0;
};
thread_local ThreadCommit tl_commit;

// Versions of what readers cache (MetaStore::JobVersion, AuthVersion), read
// without a lock. Jobs share kSlots counters by id: a collision only costs a
// needless rebuild.
struct Versions {
  static constexpr size_t kSlots = 4096;
  std::array<std::atomic<uint64_t>, kSlots> job{};
  std::atomic<uint64_t> auth{0};
};

// The connection's mutex (recursive). Leaving its outermost hold, after every
// write in it has committed or rolled back: a commit is numbered and made the
// thread's last (SQLite's commit hook, NoteCommit, runs inside with the mutex
// held), and the versions of what was written move on. A reader that read a
// version before the data can then never keep data older than the version.
class StoreMutex {
 public:
  StoreMutex(std::shared_ptr<Durability> d, Versions* v) : durability_(std::move(d)), versions_(v) {}
  void lock() {
    mu_.lock();
    ++depth_;
  }
  void unlock() {
    if (--depth_ == 0) {
      if (committed_) {
        committed_ = false;
        tl_commit = {durability_, durability_->Committed()};
      }
      for (int64_t id : touched_jobs_) versions_->job[static_cast<uint64_t>(id) % Versions::kSlots].fetch_add(1);
      touched_jobs_.clear();
      if (touched_auth_) versions_->auth.fetch_add(1);
      touched_auth_ = false;
    }
    mu_.unlock();
  }
  void NoteCommit() { committed_ = true; }
  // REQUIRES: held. What the hold writes.
  void TouchJob(int64_t id) { touched_jobs_.push_back(id); }
  void TouchAuth() { touched_auth_ = true; }

 private:
  std::recursive_mutex mu_;
  const std::shared_ptr<Durability> durability_;
  Versions* const versions_;
  int depth_ = 0;                     // GUARDED_BY(mu_)
  bool committed_ = false;            // GUARDED_BY(mu_)
  std::vector<int64_t> touched_jobs_;  // GUARDED_BY(mu_)
  bool touched_auth_ = false;         // GUARDED_BY(mu_)
};

class SqliteMetaStore final : public MetaStore {
 public:
  SqliteMetaStore(sqlite3* db, const std::string& path)
      : db_(db), cache_(db), durability_(std::make_shared<Durability>(path + "-wal")), mu_(durability_, &versions_) {
    sqlite3_commit_hook(
        db_, [](void* mu) { static_cast<StoreMutex*>(mu)->NoteCommit(); return 0; }, &mu_);
  }
  ~SqliteMetaStore() override {
    sqlite3_commit_hook(db_, nullptr, nullptr);
    sqlite3_close_v2(db_);
  }

  Status Sync() override { return durability_->Await(durability_->LastCommitted()); }
  uint64_t JobVersion(int64_t job_id) override {
    return versions_.job[static_cast<uint64_t>(job_id) % Versions::kSlots].load();
  }
  uint64_t AuthVersion() override { return versions_.auth.load(); }

  std::vector<std::string> Damage() override {
    std::lock_guard<std::mutex> l(damage_mu_);
    return damage_;
  }

  // At open: SQLite's quick_check of every page (a few ms per MB), and a read
  // of every row of every table, so that damage is named at start, not found
  // by the first request that touches it. Nothing is repaired.
  void CheckAtOpen() {
    {
      Lock l(mu_);
      Stmt check(cache_, "PRAGMA quick_check(20)");
      int rc;
      while ((rc = check.Step()) == SQLITE_ROW) {
        if (check.Text(0) != "ok") NoteDamage("quick_check: " + check.Text(0));
      }
      if (rc != SQLITE_DONE) (void)Error(rc, "quick_check");
    }
    for (const char* table : {"users", "tokens", "nodes", "jobs", "tasks", "events", "audit"}) {
      Status st = ScanTable(table);
      if (!st.ok()) NoteDamage(std::string("table ") + table + ": " + st.message());
    }
    (void)ListUsers();
    (void)ListNodes();
    (void)Many<Job>(std::string("SELECT ") + kJobCols + " FROM jobs", ReadJob);
    (void)Many<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks", ReadTask);
  }

  Status ScanTable(const char* table) {
    Lock l(mu_);
    Stmt s(cache_, std::string("SELECT * FROM ") + table);
    if (!s.valid()) return Error(sqlite3_errcode(db_), std::string("reading ") + table);
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
    }
    return rc == SQLITE_DONE ? Status::Ok() : Status(StatusCode::kInternal, Err(std::string("reading ") + table));
  }

  Status Init(int up_to_version) {
    {
      // The pragma answers with the mode it got rather than failing: the
      // group commit syncs the WAL file, so anything else is an error.
      Lock l(mu_);
      Stmt mode(cache_, "PRAGMA journal_mode=WAL");
      if (!mode.valid() || mode.Step() != SQLITE_ROW || mode.Text(0) != "wal") {
        return FailedPrecondition("the database cannot use a write-ahead log (journal_mode " +
                                  (mode.valid() ? mode.Text(0) : std::string("?")) + "): its file system may not support it");
      }
    }
    // Commits do not wait for the disk; acknowledgements do (Durability).
    RM_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
    RM_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
    sqlite3_busy_timeout(db_, 5000);
    RM_RETURN_IF_ERROR(Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
    int64_t version = 0;
    {
      Stmt s(cache_, "SELECT MAX(version) FROM schema_version");
      if (s.valid() && s.Step() == SQLITE_ROW) version = s.Int(0);
    }
    const int64_t known = static_cast<int64_t>(SqliteMigrations().size());
    const int64_t target = up_to_version > 0 ? std::min<int64_t>(up_to_version, known) : known;
    if (version > known) {
      return FailedPrecondition("database schema version " + std::to_string(version) +
                                " is newer than this binary supports (" +
                                std::to_string(known) + ")");
    }
    if (version >= target) return Status::Ok();
    // Migrations may rebuild tables: with foreign keys on, dropping the old
    // table would cascade-delete its children. The pragma is a no-op inside a
    // transaction, so it is switched off around them, and the keys are
    // checked before the last migration commits.
    RM_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=OFF"));
    for (int64_t v = version; v < target; ++v) {
      Status st = InTransaction([&]() -> Status {
        RM_RETURN_IF_ERROR(Exec(SqliteMigrations()[v]));
        {
          Lock l(mu_);
          Stmt check(cache_, "PRAGMA foreign_key_check");
          if (check.Step() == SQLITE_ROW) {
            return Internal("migration " + std::to_string(v + 1) + " left a dangling reference in table " + check.Text(0));
          }
        }
        return Exec("INSERT INTO schema_version(version) VALUES (" + std::to_string(v + 1) + ")");
      });
      if (!st.ok()) {
        (void)Exec("PRAGMA foreign_keys=ON");
        return st;
      }
    }
    return Exec("PRAGMA foreign_keys=ON");
  }

  Status InTransaction(const std::function<Status()>& fn) override {
    std::unique_lock<StoreMutex> lock(mu_);
    if (tx_depth_ > 0) {
      ++tx_depth_;
      Status st = fn();
      --tx_depth_;
      return st;
    }
    RM_RETURN_IF_ERROR(ExecLocked("BEGIN IMMEDIATE"));
    ++tx_depth_;
    Status st = fn();
    --tx_depth_;
    if (!st.ok()) {
      (void)ExecLocked("ROLLBACK");
      return st;
    }
    Status commit = ExecLocked("COMMIT");
    if (!commit.ok()) (void)ExecLocked("ROLLBACK");
    return commit;
  }

  StatusOr<int64_t> CreateUser(const User& u) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "INSERT INTO users(name, role, password_hash, created_ms, disabled) VALUES (?,?,?,?,?)");
    s.Bind(u.name).Bind(RoleName(u.role)).Bind(u.password_hash).Bind(u.created_ms).Bind(u.disabled ? 1 : 0);
    int rc = s.Step();
    if (rc == SQLITE_CONSTRAINT) return AlreadyExists("user \"" + u.name + "\" already exists");
    RM_RETURN_IF_ERROR(Check(rc, "insert user"));
    return sqlite3_last_insert_rowid(db_);
  }

  StatusOr<User> GetUser(int64_t id) override {
    return One<User>(std::string("SELECT ") + kUserCols + " FROM users WHERE id=?", ReadUser,
                     "user " + std::to_string(id), id);
  }

  StatusOr<User> GetUserByName(const std::string& name) override {
    return One<User>(std::string("SELECT ") + kUserCols + " FROM users WHERE name=?", ReadUser,
                     "user \"" + name + "\"", name);
  }

  StatusOr<std::vector<User>> ListUsers() override {
    return Many<User>(std::string("SELECT ") + kUserCols + " FROM users ORDER BY id", ReadUser);
  }

  StatusOr<int64_t> CountUsers() override {
    Lock l(mu_);
    Stmt s(cache_, "SELECT COUNT(*) FROM users");
    if (s.Step() != SQLITE_ROW) return Internal(Err("count users"));
    return s.Int(0);
  }

  Status SetUserDisabled(int64_t id, bool disabled) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "UPDATE users SET disabled=? WHERE id=?");
    s.Bind(disabled ? 1 : 0).Bind(id);
    return StepOne(s, "user " + std::to_string(id));
  }

  Status SetUserFileQuota(int64_t id, int64_t bytes) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "UPDATE users SET file_quota_bytes=? WHERE id=?");
    s.Bind(bytes).Bind(id);
    return StepOne(s, "user " + std::to_string(id));
  }

  Status AddUserFileBytes(int64_t id, int64_t delta) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "UPDATE users SET file_bytes=MAX(0, file_bytes + ?) WHERE id=?");
    s.Bind(delta).Bind(id);
    return StepOne(s, "user " + std::to_string(id));
  }

  Status SetUserFileBytes(int64_t id, int64_t bytes) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "UPDATE users SET file_bytes=? WHERE id=?");
    s.Bind(bytes).Bind(id);
    return StepOne(s, "user " + std::to_string(id));
  }

  StatusOr<int64_t> CreateToken(const Token& t) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "INSERT INTO tokens(user_id, name, hash, created_ms, scope, node) VALUES (?,?,?,?,?,?)");
    s.Bind(t.user_id).Bind(t.name).Bind(t.hash).Bind(t.created_ms).Bind(t.scope).Bind(t.node);
    RM_RETURN_IF_ERROR(Check(s.Step(), "insert token"));
    return sqlite3_last_insert_rowid(db_);
  }

  StatusOr<Token> GetToken(int64_t id) override {
    return One<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE id=?", ReadToken,
                      "token " + std::to_string(id), id);
  }

  StatusOr<int64_t> CountTokens(int64_t user_id) override {
    Lock l(mu_);
    Stmt s(cache_, "SELECT COUNT(*) FROM tokens WHERE user_id=?");
    s.Bind(user_id);
    if (s.Step() != SQLITE_ROW) return Internal(Err("count tokens"));
    return s.Int(0);
  }

  StatusOr<Token> GetTokenByHash(const std::string& hash) override {
    return One<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE hash=?", ReadToken,
                      "token", hash);
  }

  StatusOr<std::vector<Token>> ListTokens(int64_t user_id) override {
    if (user_id == 0) return Many<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens ORDER BY id", ReadToken);
    return Many<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE user_id=? ORDER BY id",
                       ReadToken, user_id);
  }

  Status DeleteToken(int64_t token_id) override {
    Lock l(mu_);
    mu_.TouchAuth();
    Stmt s(cache_, "DELETE FROM tokens WHERE id=?");
    s.Bind(token_id);
    return StepOne(s, "token " + std::to_string(token_id));
  }

  StatusOr<int64_t> UpsertNode(const Node& n) override {
    Lock l(mu_);
    Stmt s(cache_,
           "INSERT INTO nodes(name, cpu_milli, memory_bytes, gpu_count, gpus_json, gpu_model, "
           "registered_ms, last_heartbeat_ms, agent_version, address, port_lo, port_hi, labels_json, executors, network, overlay_block, "
           "fence_after_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
           "ON CONFLICT(name) DO UPDATE SET cpu_milli=excluded.cpu_milli, "
           "memory_bytes=excluded.memory_bytes, gpu_count=excluded.gpu_count, "
           "gpus_json=excluded.gpus_json, gpu_model=excluded.gpu_model, "
           "registered_ms=excluded.registered_ms, last_heartbeat_ms=excluded.last_heartbeat_ms, "
           "agent_version=excluded.agent_version, address=excluded.address, "
           "port_lo=excluded.port_lo, port_hi=excluded.port_hi, labels_json=excluded.labels_json, "
           "executors=excluded.executors, network=excluded.network, overlay_block=excluded.overlay_block, "
           "fence_after_ms=excluded.fence_after_ms RETURNING id");
    s.Bind(n.name).Bind(n.cpu_milli).Bind(n.memory_bytes).Bind(n.gpu_count).Bind(n.gpus_json)
        .Bind(n.gpu_model).Bind(n.registered_ms).Bind(n.last_heartbeat_ms).Bind(n.agent_version)
        .Bind(n.address).Bind(n.port_lo).Bind(n.port_hi).Bind(n.labels_json).Bind(n.executors)
        .Bind(n.network).Bind(n.overlay_block).Bind(n.fence_after_ms);
    if (int rc = s.Step(); rc != SQLITE_ROW) return Error(rc, "upsert node");
    return s.Int(0);
  }

  Status UpdateNodeStatus(int64_t id, int64_t hb, double cpu, int64_t mem) override {
    Lock l(mu_);
    Stmt s(cache_, "UPDATE nodes SET last_heartbeat_ms=?, cpu_util=?, memory_used_bytes=? WHERE id=?");
    s.Bind(hb).Bind(cpu).Bind(mem).Bind(id);
    return StepOne(s, "node " + std::to_string(id));
  }

  StatusOr<Node> GetNode(int64_t id) override {
    return One<Node>(std::string("SELECT ") + kNodeCols + " FROM nodes WHERE id=?", ReadNode,
                     "node " + std::to_string(id), id);
  }

  StatusOr<std::vector<Node>> ListNodes() override {
    return Many<Node>(std::string("SELECT ") + kNodeCols + " FROM nodes ORDER BY id", ReadNode);
  }

  Status SetNodeCordon(int64_t id, bool cordoned, const std::string& reason, bool draining) override {
    Lock l(mu_);
    Stmt s(cache_, "UPDATE nodes SET cordoned=?, cordon_reason=?, draining=? WHERE id=?");
    s.Bind(int64_t{cordoned}).Bind(reason).Bind(int64_t{draining}).Bind(id);
    return StepOne(s, "node " + std::to_string(id));
  }

  Status SetNodeFence(int64_t id, int64_t fence_after_ms) override {
    Lock l(mu_);
    Stmt s(cache_, "UPDATE nodes SET fence_after_ms=? WHERE id=?");
    s.Bind(fence_after_ms).Bind(id);
    return StepOne(s, "node " + std::to_string(id));
  }

  Status DeleteNode(int64_t id) override {
    Lock l(mu_);
    Stmt s(cache_, "DELETE FROM nodes WHERE id=?");
    s.Bind(id);
    return StepOne(s, "node " + std::to_string(id));
  }

  StatusOr<int64_t> CreateJob(const Job& j, const Task& tmpl) override {
    int64_t id = 0;
    Status st = InTransaction([&]() -> Status {
      Stmt s(cache_,
             "INSERT INTO jobs(user_id, name, kind, state, reason, spec_json, priority, replicas, "
             "max_restarts, restarts, stop_state, stop_reason, created_ms, updated_ms, started_ms, "
             "finished_ms, not_before_ms, resize_to, service_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
      BindJob(s, j);
      RM_RETURN_IF_ERROR(Check(s.Step(), "insert job"));
      id = sqlite3_last_insert_rowid(db_);
      mu_.TouchJob(id);  // an id never reused: for a view cached while it was "not found"
      return InsertTasks(id, 0, j.replicas, tmpl);
    });
    if (!st.ok()) return st;
    return id;
  }

  StatusOr<Job> GetJob(int64_t id) override {
    return One<Job>(std::string("SELECT ") + kJobCols + " FROM jobs WHERE id=?", ReadJob,
                    "job " + std::to_string(id), id);
  }

  StatusOr<std::vector<Job>> ListJobs(int64_t user_id, int limit) override {
    if (user_id == 0) {
      return Many<Job>(std::string("SELECT ") + kJobCols + " FROM jobs ORDER BY id DESC LIMIT ?",
                       ReadJob, limit);
    }
    return Many<Job>(
        std::string("SELECT ") + kJobCols + " FROM jobs WHERE user_id=? ORDER BY id DESC LIMIT ?",
        ReadJob, user_id, limit);
  }

  // In pages of kActivePage jobs, each under the lock on its own: a queue of
  // 50,000 jobs does not hold every submit and read behind one long scan.
  // Each page is a range of the (state, id) index; the states' lists are
  // merged by id. Not one snapshot: a job added meanwhile (a higher id) may
  // or may not be in.
  StatusOr<std::vector<Job>> ListActiveJobs() override {
    constexpr int kActivePage = 1000;
    std::vector<Job> out;
    for (const char* state : {"PENDING", "SCHEDULED", "RUNNING"}) {
      int64_t after = 0;
      while (true) {
        Lock l(mu_);  // the page and what Many read with it
        RM_ASSIGN_OR_RETURN(auto page, Many<Job>(std::string("SELECT ") + kJobCols +
                                                     " FROM jobs WHERE state = ? AND id > ? ORDER BY id LIMIT ?",
                                                 ReadJob, state, after, kActivePage));
        // By the rows read: a damaged row left out of the page does not end the paging.
        if (last_rows_read_ == 0) break;
        after = last_row_id_;
        const bool last = last_rows_read_ < static_cast<size_t>(kActivePage);
        out.insert(out.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
        if (last) break;
      }
    }
    std::sort(out.begin(), out.end(), [](const Job& x, const Job& y) { return x.id < y.id; });
    // A job that changed state between two states' pages is listed twice: once.
    out.erase(std::unique(out.begin(), out.end(), [](const Job& x, const Job& y) { return x.id == y.id; }), out.end());
    return out;
  }

  StatusOr<int64_t> CountJobs(int64_t user_id, State state) override {
    Lock l(mu_);
    Stmt s(cache_, "SELECT COUNT(*) FROM jobs WHERE user_id=? AND state=?");
    s.Bind(user_id).Bind(StateName(state));
    if (s.Step() != SQLITE_ROW) return Internal(Err("count jobs"));
    return s.Int(0);
  }

  StatusOr<std::map<std::pair<int64_t, State>, int64_t>> CountJobsByUserAndState() override {
    Lock l(mu_);
    Stmt s(cache_, "SELECT user_id, state, COUNT(*) FROM jobs GROUP BY user_id, state");
    std::map<std::pair<int64_t, State>, int64_t> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      auto state = ParseState(s.Text(1));
      if (!state) continue;  // a damaged row: counted nowhere (the damage list names it)
      out[{s.Int(0), *state}] = s.Int(2);
    }
    if (rc != SQLITE_DONE) return Internal(Err("count jobs by state"));
    return out;
  }

  Status UpdateJob(const Job& j) override {
    Lock l(mu_);
    mu_.TouchJob(j.id);
    Stmt s(cache_,
           "UPDATE jobs SET user_id=?, name=?, kind=?, state=?, reason=?, spec_json=?, priority=?, "
           "replicas=?, max_restarts=?, restarts=?, stop_state=?, stop_reason=?, created_ms=?, "
           "updated_ms=?, started_ms=?, finished_ms=?, not_before_ms=?, resize_to=?, service_s=? WHERE id=?");
    BindJob(s, j);
    s.Bind(j.id);
    return StepOne(s, "job " + std::to_string(j.id));
  }

  Status ResizeTasks(int64_t job_id, int replicas, const Task& tmpl) override {
    Lock l(mu_);
    mu_.TouchJob(job_id);
    return InTransaction([&]() -> Status {
      Stmt del(cache_, "DELETE FROM tasks WHERE job_id=? AND rank>=?");
      del.Bind(job_id).Bind(replicas);
      RM_RETURN_IF_ERROR(Check(del.Step(), "drop tasks"));
      Stmt count(cache_, "SELECT COUNT(*) FROM tasks WHERE job_id=?");
      count.Bind(job_id);
      const int have = count.Step() == SQLITE_ROW ? static_cast<int>(count.Int(0)) : 0;
      return InsertTasks(job_id, have, replicas, tmpl);
    });
  }

  Status DeleteJob(int64_t id) override {
    Lock l(mu_);
    mu_.TouchJob(id);
    Stmt s(cache_, "DELETE FROM jobs WHERE id=?");
    s.Bind(id);
    return StepOne(s, "job " + std::to_string(id));
  }

  StatusOr<Task> GetTask(int64_t id) override {
    return One<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE id=?", ReadTask,
                     "task " + std::to_string(id), id);
  }

  StatusOr<std::vector<Task>> ListTasks(int64_t job_id) override {
    return ManyWhole<Task>(std::string("SELECT ") + kTaskCols + " FROM tasks WHERE job_id=? ORDER BY rank",
                      ReadTask, job_id);
  }

  StatusOr<std::vector<Task>> ListPlacedTasks() override {
    return ManyWhole<Task>(std::string("SELECT ") + kTaskCols +
                          " FROM tasks WHERE state IN ('SCHEDULED','RUNNING') ORDER BY id",
                      ReadTask);
  }

  Status UpdateTask(const Task& t) override {
    Lock l(mu_);
    mu_.TouchJob(t.job_id);
    Stmt s(cache_,
           "UPDATE tasks SET job_id=?, rank=?, state=?, reason=?, node_id=?, attempt=?, desired=?, "
           "exit_code=?, cpu_milli=?, memory_bytes=?, gpus=?, created_ms=?, started_ms=?, "
           "finished_ms=?, port=?, gpu_indices=?, overlay_ip=? WHERE id=?");
    BindTaskBody(s, t);
    s.Bind(t.id);
    return StepOne(s, "task " + std::to_string(t.id));
  }

  Status AddEvent(const Event& e) override {
    Lock l(mu_);
    mu_.TouchJob(e.job_id);
    Stmt s(cache_,
           "INSERT INTO events(job_id, task_id, rank, ts_ms, from_state, to_state, reason) "
           "VALUES (?,?,?,?,?,?,?)");
    s.Bind(e.job_id).Bind(e.task_id).Bind(e.rank).Bind(e.ts_ms).Bind(e.from_state).Bind(e.to_state)
        .Bind(e.reason);
    return Check(s.Step(), "insert event");
  }

  StatusOr<std::vector<Event>> ListEvents(int64_t job_id) override {
    return Many<Event>(std::string("SELECT ") + kEventCols + " FROM events WHERE job_id=? ORDER BY id",
                       ReadEvent, job_id);
  }

  Status AddAudit(const AuditEntry& a) override {
    Lock l(mu_);
    Stmt s(cache_, "INSERT INTO audit(ts_ms, user, address, action, target, outcome, detail) VALUES (?,?,?,?,?,?,?)");
    s.Bind(a.ts_ms).Bind(a.user).Bind(a.address).Bind(a.action).Bind(a.target).Bind(a.outcome).Bind(a.detail);
    return Check(s.Step(), "insert audit entry");
  }

  StatusOr<std::vector<AuditEntry>> ListAudit(int limit, const std::string& user, const std::string& action) override {
    return Many<AuditEntry>(
        "SELECT id, ts_ms, user, address, action, target, outcome, detail FROM audit "
        "WHERE (?1 = '' OR user = ?1) AND (?2 = '' OR action = ?2) ORDER BY id DESC LIMIT ?3",
        ReadAudit, user, action, limit);
  }

  Status PruneAudit(int64_t keep) override {
    Lock l(mu_);
    Stmt s(cache_, "DELETE FROM audit WHERE id <= (SELECT MAX(id) FROM audit) - ?");
    s.Bind(keep);
    return Check(s.Step(), "prune audit");
  }

 private:
  using Lock = std::lock_guard<StoreMutex>;

  // Task rows of ranks [from, to) from a template.
  Status InsertTasks(int64_t job_id, int from, int to, const Task& tmpl) {
    for (int r = from; r < to; ++r) {
      Task t = tmpl;
      t.job_id = job_id;
      t.rank = r;
      Stmt ts(cache_,
              "INSERT INTO tasks(job_id, rank, state, reason, node_id, attempt, desired, exit_code, "
              "cpu_milli, memory_bytes, gpus, created_ms, started_ms, finished_ms, port, gpu_indices, overlay_ip) "
              "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
      BindTaskBody(ts, t);
      RM_RETURN_IF_ERROR(Check(ts.Step(), "insert task"));
    }
    return Status::Ok();
  }

  static void BindJob(Stmt& s, const Job& j) {
    s.Bind(j.user_id).Bind(j.name).Bind(j.kind).Bind(StateName(j.state)).Bind(j.reason)
        .Bind(j.spec_json).Bind(j.priority).Bind(j.replicas).Bind(j.max_restarts).Bind(j.restarts)
        .Bind(j.stop_state ? StateName(*j.stop_state) : "").Bind(j.stop_reason).Bind(j.created_ms)
        .Bind(j.updated_ms).Bind(j.started_ms).Bind(j.finished_ms).Bind(j.not_before_ms).Bind(j.resize_to)
        .Bind(j.service_s);
  }

  static void BindTaskBody(Stmt& s, const Task& t) {
    s.Bind(t.job_id).Bind(t.rank).Bind(StateName(t.state)).Bind(t.reason).Bind(t.node_id)
        .Bind(t.attempt).Bind(t.desired == Desired::kStop ? "stop" : "run").Bind(t.exit_code)
        .Bind(t.cpu_milli).Bind(t.memory_bytes).Bind(t.gpus).Bind(t.created_ms).Bind(t.started_ms)
        .Bind(t.finished_ms).Bind(t.port).Bind(t.gpu_indices).Bind(t.overlay_ip);
  }

  // Steps a write that must touch a row: NotFound("<what> not found") if it touched none.
  Status StepOne(Stmt& s, const std::string& what) {
    RM_RETURN_IF_ERROR(Check(s.Step(), what));
    if (sqlite3_changes(db_) == 0) return NotFound(what + " not found");
    return Status::Ok();
  }

  std::string Err(const std::string& what) { return what + ": " + sqlite3_errmsg(db_); }

  Status Check(int rc, const std::string& what) {
    if (rc == SQLITE_DONE || rc == SQLITE_ROW || rc == SQLITE_OK) return Status::Ok();
    return Error(rc, what);
  }

  // The error of a call that returned `rc`. A full disk (SQLITE_FULL, or an
  // I/O error of ENOSPC or EDQUOT) is InsufficientStorage: the statement or
  // transaction was rolled back, and the same write succeeds once space is freed.
  Status Error(int rc, const std::string& what) {
    const int primary = rc & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Unavailable(Err(what));
    if (primary == SQLITE_FULL || (primary == SQLITE_IOERR && IsDiskFull(sqlite3_system_errno(db_)))) {
      return ServerDiskFull(Err(what));
    }
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) {
      NoteDamage(Err(what));
      return DataLoss("the server's database is damaged (" + Err(what) + "): an admin must restore it (docs/operations.md)");
    }
    return Internal(Err(what));
  }

  // Damage seen (kept for /healthz; bounded), logged once each.
  void NoteDamage(const std::string& what) {
    std::lock_guard<std::mutex> l(damage_mu_);
    if (std::find(damage_.begin(), damage_.end(), what) != damage_.end() || damage_.size() >= 64) return;
    spdlog::error("database damaged: {}", what);
    damage_.push_back(what);
  }

  Status Exec(const std::string& sql) {
    Lock l(mu_);
    return ExecLocked(sql);
  }

  Status ExecLocked(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string msg = err ? err : "unknown";
      sqlite3_free(err);
      if (Status st = Error(rc, "sqlite"); st.code() == StatusCode::kInsufficientStorage) return st;
      return Internal("sqlite: " + msg);
    }
    return Status::Ok();
  }

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
  Versions versions_;
  const std::shared_ptr<Durability> durability_;
  StoreMutex mu_;
  int tx_depth_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace

Status AwaitDurable() {
  ThreadCommit c = std::exchange(tl_commit, {});
  auto d = c.durability.lock();
  return d ? d->Await(c.seq) : Status::Ok();
}

const char* RoleName(Role r) { return r == Role::kAdmin ? "admin" : "user"; }

std::optional<Role> ParseRole(const std::string& s) {
  if (s == "admin") return Role::kAdmin;
  if (s == "user") return Role::kUser;
  return std::nullopt;
}

const char* StateName(State s) {
  switch (s) {
    case State::kPending: return "PENDING";
    case State::kScheduled: return "SCHEDULED";
    case State::kRunning: return "RUNNING";
    case State::kSucceeded: return "SUCCEEDED";
    case State::kFailed: return "FAILED";
    case State::kCancelled: return "CANCELLED";
    case State::kLost: return "LOST";
  }
  return "?";
}

std::optional<State> ParseState(const std::string& s) {
  for (State st : {State::kPending, State::kScheduled, State::kRunning, State::kSucceeded,
                   State::kFailed, State::kCancelled, State::kLost}) {
    if (s == StateName(st)) return st;
  }
  return std::nullopt;
}

bool IsTerminal(State s) {
  return s == State::kSucceeded || s == State::kFailed || s == State::kCancelled || s == State::kLost;
}

StatusOr<std::unique_ptr<MetaStore>> OpenSqliteMetaStore(const std::string& path, int up_to_version) {
  // The database holds every user's token hashes and jobs: owner-only, and
  // so are the -wal and -shm files SQLite creates beside it (it copies the
  // database file's mode to them).
  if (int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); fd >= 0) {
    ::fchmod(fd, 0600);
    ::close(fd);
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return Unavailable("open " + path + ": " + msg);
  }
  auto store = std::make_unique<SqliteMetaStore>(db, path);
  RM_RETURN_IF_ERROR(store->Init(up_to_version).Annotate("migrating " + path));
  store->CheckAtOpen();
  return std::unique_ptr<MetaStore>(std::move(store));
}

}  // namespace ringmaster::store
