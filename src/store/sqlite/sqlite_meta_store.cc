#include "store/sqlite/sqlite_meta_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

namespace ringmaster::store::sqlite {

SqliteMetaStore::SqliteMetaStore(sqlite3* db, const std::string& path)
    : db_(db), cache_(db), group_commit_(path + "-wal", &mu_) {
  // Commits are numbered when the lock's outermost hold ends (StoreMutex).
  sqlite3_commit_hook(
      db_, [](void* mu) { static_cast<StoreMutex*>(mu)->NoteCommit(); return 0; }, &mu_);
}

SqliteMetaStore::~SqliteMetaStore() {
  sqlite3_commit_hook(db_, nullptr, nullptr);
  sqlite3_close_v2(db_);
}

StatusOr<std::unique_ptr<MetaStore>> Open(const std::string& path, int up_to_version) {
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

Status SqliteMetaStore::InTransaction(const std::function<Status()>& fn) {
  std::unique_lock<StoreMutex> lock(mu_);
  // Leaves the level when fn returns or throws; the outermost one, unless
  // fn succeeded, also rolls back.
  struct Level {
    SqliteMetaStore* s;
    bool outermost;
    bool rollback = true;
    ~Level() {
      --s->tx_depth_;
      if (outermost && rollback) (void)s->ExecLocked("ROLLBACK");
    }
  };
  if (tx_depth_ > 0) {
    ++tx_depth_;
    Level level{this, false};
    return fn();
  }
  RM_RETURN_IF_ERROR(ExecLocked("BEGIN IMMEDIATE"));
  Status st;
  {
    ++tx_depth_;
    Level level{this, true};
    st = fn();
    level.rollback = !st.ok();
  }
  if (!st.ok()) return st;
  Status commit = ExecLocked("COMMIT");
  if (!commit.ok()) (void)ExecLocked("ROLLBACK");
  return commit;
}

StatusOr<int64_t> SqliteMetaStore::CreateUser(const User& u) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "INSERT INTO users(name, role, password_hash, created_ms, disabled) VALUES (?,?,?,?,?)");
  s.Bind(u.name).Bind(RoleName(u.role)).Bind(u.password_hash).Bind(u.created_ms).Bind(u.disabled ? 1 : 0);
  int rc = s.Step();
  if (rc == SQLITE_CONSTRAINT) return AlreadyExists("user \"" + u.name + "\" already exists");
  RM_RETURN_IF_ERROR(Check(rc, "insert user"));
  return sqlite3_last_insert_rowid(db_);
}

StatusOr<User> SqliteMetaStore::GetUser(int64_t id) {
  return One<User>(std::string("SELECT ") + kUserCols + " FROM users WHERE id=?", ReadUser,
                   "user " + std::to_string(id), id);
}

StatusOr<User> SqliteMetaStore::GetUserByName(const std::string& name) {
  return One<User>(std::string("SELECT ") + kUserCols + " FROM users WHERE name=?", ReadUser,
                   "user \"" + name + "\"", name);
}

StatusOr<std::vector<User>> SqliteMetaStore::ListUsers() {
  return Many<User>(std::string("SELECT ") + kUserCols + " FROM users ORDER BY id", ReadUser);
}

StatusOr<int64_t> SqliteMetaStore::CountUsers() {
  Lock l(mu_);
  Stmt s(cache_, "SELECT COUNT(*) FROM users");
  if (s.Step() != SQLITE_ROW) return Internal(Err("count users"));
  return s.Int(0);
}

Status SqliteMetaStore::SetUserDisabled(int64_t id, bool disabled) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "UPDATE users SET disabled=? WHERE id=?");
  s.Bind(disabled ? 1 : 0).Bind(id);
  return StepOne(s, "user " + std::to_string(id));
}

Status SqliteMetaStore::SetUserFileQuota(int64_t id, int64_t bytes) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "UPDATE users SET file_quota_bytes=? WHERE id=?");
  s.Bind(bytes).Bind(id);
  return StepOne(s, "user " + std::to_string(id));
}

Status SqliteMetaStore::SetUserPrivileges(int64_t id, int max_priority, bool host_network) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "UPDATE users SET max_priority=?, host_network=? WHERE id=?");
  s.Bind(int64_t{max_priority}).Bind(host_network ? 1 : 0).Bind(id);
  return StepOne(s, "user " + std::to_string(id));
}

Status SqliteMetaStore::AddUserFileBytes(int64_t id, int64_t delta) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "UPDATE users SET file_bytes=MAX(0, file_bytes + ?) WHERE id=?");
  s.Bind(delta).Bind(id);
  return StepOne(s, "user " + std::to_string(id));
}

Status SqliteMetaStore::SetUserFileBytes(int64_t id, int64_t bytes) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "UPDATE users SET file_bytes=? WHERE id=?");
  s.Bind(bytes).Bind(id);
  return StepOne(s, "user " + std::to_string(id));
}

StatusOr<int64_t> SqliteMetaStore::CreateToken(const Token& t) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "INSERT INTO tokens(user_id, name, hash, created_ms, scope, node, expires_ms, session) VALUES (?,?,?,?,?,?,?,?)");
  s.Bind(t.user_id).Bind(t.name).Bind(t.hash).Bind(t.created_ms).Bind(t.scope).Bind(t.node).Bind(t.expires_ms).Bind(
      static_cast<int64_t>(t.session));
  RM_RETURN_IF_ERROR(Check(s.Step(), "insert token"));
  return sqlite3_last_insert_rowid(db_);
}

StatusOr<Token> SqliteMetaStore::GetToken(int64_t id) {
  return One<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE id=?", ReadToken,
                    "token " + std::to_string(id), id);
}

StatusOr<int64_t> SqliteMetaStore::CountTokens(int64_t user_id) {
  Lock l(mu_);
  Stmt s(cache_, "SELECT COUNT(*) FROM tokens WHERE user_id=?");
  s.Bind(user_id);
  if (s.Step() != SQLITE_ROW) return Internal(Err("count tokens"));
  return s.Int(0);
}

StatusOr<Token> SqliteMetaStore::GetTokenByHash(const std::string& hash) {
  return One<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE hash=?", ReadToken,
                    "token", hash);
}

StatusOr<std::vector<Token>> SqliteMetaStore::ListTokens(int64_t user_id) {
  if (user_id == 0) return Many<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens ORDER BY id", ReadToken);
  return Many<Token>(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE user_id=? ORDER BY id",
                     ReadToken, user_id);
}

Status SqliteMetaStore::DeleteToken(int64_t token_id) {
  Lock l(mu_);
  mu_.TouchAuth();
  Stmt s(cache_, "DELETE FROM tokens WHERE id=?");
  s.Bind(token_id);
  return StepOne(s, "token " + std::to_string(token_id));
}

StatusOr<int64_t> SqliteMetaStore::UpsertNode(const Node& n) {
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

Status SqliteMetaStore::UpdateNodeStatus(int64_t id, int64_t hb, double cpu, int64_t mem) {
  Lock l(mu_);
  Stmt s(cache_, "UPDATE nodes SET last_heartbeat_ms=?, cpu_util=?, memory_used_bytes=? WHERE id=?");
  s.Bind(hb).Bind(cpu).Bind(mem).Bind(id);
  return StepOne(s, "node " + std::to_string(id));
}

StatusOr<Node> SqliteMetaStore::GetNode(int64_t id) {
  return One<Node>(std::string("SELECT ") + kNodeCols + " FROM nodes WHERE id=?", ReadNode,
                   "node " + std::to_string(id), id);
}

StatusOr<std::vector<Node>> SqliteMetaStore::ListNodes() {
  return Many<Node>(std::string("SELECT ") + kNodeCols + " FROM nodes ORDER BY id", ReadNode);
}

Status SqliteMetaStore::SetNodeCordon(int64_t id, bool cordoned, const std::string& reason, bool draining) {
  Lock l(mu_);
  Stmt s(cache_, "UPDATE nodes SET cordoned=?, cordon_reason=?, draining=? WHERE id=?");
  s.Bind(int64_t{cordoned}).Bind(reason).Bind(int64_t{draining}).Bind(id);
  return StepOne(s, "node " + std::to_string(id));
}

Status SqliteMetaStore::SetNodeFence(int64_t id, int64_t fence_after_ms) {
  Lock l(mu_);
  Stmt s(cache_, "UPDATE nodes SET fence_after_ms=? WHERE id=?");
  s.Bind(fence_after_ms).Bind(id);
  return StepOne(s, "node " + std::to_string(id));
}

Status SqliteMetaStore::DeleteNode(int64_t id) {
  Lock l(mu_);
  Stmt s(cache_, "DELETE FROM nodes WHERE id=?");
  s.Bind(id);
  return StepOne(s, "node " + std::to_string(id));
}

// Steps a write that must touch a row: NotFound("<what> not found") if it touched none.
Status SqliteMetaStore::StepOne(Stmt& s, const std::string& what) {
  RM_RETURN_IF_ERROR(Check(s.Step(), what));
  if (sqlite3_changes(db_) == 0) return NotFound(what + " not found");
  return Status::Ok();
}

Status SqliteMetaStore::Check(int rc, const std::string& what) {
  if (rc == SQLITE_DONE || rc == SQLITE_ROW || rc == SQLITE_OK) return Status::Ok();
  return Error(rc, what);
}

std::string SqliteMetaStore::Err(const std::string& what) { return what + ": " + sqlite3_errmsg(db_); }

Status SqliteMetaStore::Exec(const std::string& sql) {
  Lock l(mu_);
  return ExecLocked(sql);
}

Status SqliteMetaStore::ExecLocked(const std::string& sql) {
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

}  // namespace ringmaster::store::sqlite
