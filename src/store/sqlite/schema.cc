// The SQLite metadata store's schema, as the migrations that build it.
#include "store/sqlite/schema.h"

#include <algorithm>
#include <string>

#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store::sqlite {
namespace {

const char* const kMigrations[] = {
    // 1: initial schema
    R"sql(
CREATE TABLE users (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL,
  password_hash TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL);
CREATE TABLE tokens (
  id INTEGER PRIMARY KEY,
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  created_ms INTEGER NOT NULL);
CREATE TABLE nodes (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  cpu_milli INTEGER NOT NULL,
  memory_bytes INTEGER NOT NULL,
  gpu_count INTEGER NOT NULL,
  gpus_json TEXT NOT NULL,
  gpu_model TEXT NOT NULL,
  registered_ms INTEGER NOT NULL,
  last_heartbeat_ms INTEGER NOT NULL,
  cpu_util REAL NOT NULL DEFAULT 0,
  memory_used_bytes INTEGER NOT NULL DEFAULT 0,
  agent_version TEXT NOT NULL DEFAULT '');
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  user_id INTEGER NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  kind TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  priority INTEGER NOT NULL,
  replicas INTEGER NOT NULL,
  max_restarts INTEGER NOT NULL,
  restarts INTEGER NOT NULL,
  stop_state TEXT NOT NULL,
  stop_reason TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL);
CREATE INDEX jobs_by_user ON jobs(user_id, id);
CREATE INDEX jobs_by_state ON jobs(state);
CREATE TABLE tasks (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  rank INTEGER NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  node_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  desired TEXT NOT NULL,
  exit_code INTEGER,
  cpu_milli INTEGER NOT NULL,
  memory_bytes INTEGER NOT NULL,
  gpus INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  UNIQUE(job_id, rank));
CREATE INDEX tasks_by_state ON tasks(state);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  task_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  ts_ms INTEGER NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL);
CREATE INDEX events_by_job ON events(job_id, id);
)sql",
    // 2: node addresses and port ranges; a port per placed task
    R"sql(
ALTER TABLE nodes ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN port_lo INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN port_hi INTEGER NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN port INTEGER NOT NULL DEFAULT 0;
)sql",
    // 3: restart backoff; elastic resizes
    R"sql(
ALTER TABLE jobs ADD COLUMN not_before_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN resize_to INTEGER NOT NULL DEFAULT 0;
)sql",
    // 4: node labels (node selectors)
    R"sql(
ALTER TABLE nodes ADD COLUMN labels_json TEXT NOT NULL DEFAULT '{}';
)sql",
    // 5: attained service (LAS), kept across server restarts
    R"sql(
ALTER TABLE jobs ADD COLUMN service_s REAL NOT NULL DEFAULT 0;
)sql",
    // 6: ids are never reused (AUTOINCREMENT: a deleted job's id must not come
    // back, or an agent mistakes the new job's task for the old one); token
    // scopes and agent tokens bound to a node; disabled users; the audit log.
    // Tables are rebuilt (SQLite cannot add AUTOINCREMENT in place) with
    // foreign keys off, which Init arranges for every migration.
    R"sql(
CREATE TABLE new_users (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL,
  password_hash TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL,
  disabled INTEGER NOT NULL DEFAULT 0);
INSERT INTO new_users(id, name, role, password_hash, created_ms)
  SELECT id, name, role, password_hash, created_ms FROM users;
CREATE TABLE new_tokens (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  created_ms INTEGER NOT NULL,
  scope TEXT NOT NULL,
  node TEXT NOT NULL DEFAULT '');
INSERT INTO new_tokens(id, user_id, name, hash, created_ms, scope)
  SELECT t.id, t.user_id, t.name, t.hash, t.created_ms,
         CASE WHEN u.role = 'admin' THEN 'admin' ELSE 'submit' END
  FROM tokens t JOIN users u ON u.id = t.user_id;
CREATE TABLE new_nodes (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  cpu_milli INTEGER NOT NULL,
  memory_bytes INTEGER NOT NULL,
  gpu_count INTEGER NOT NULL,
  gpus_json TEXT NOT NULL,
  gpu_model TEXT NOT NULL,
  registered_ms INTEGER NOT NULL,
  last_heartbeat_ms INTEGER NOT NULL,
  cpu_util REAL NOT NULL DEFAULT 0,
  memory_used_bytes INTEGER NOT NULL DEFAULT 0,
  agent_version TEXT NOT NULL DEFAULT '',
  address TEXT NOT NULL DEFAULT '',
  port_lo INTEGER NOT NULL DEFAULT 0,
  port_hi INTEGER NOT NULL DEFAULT -1,
  labels_json TEXT NOT NULL DEFAULT '{}');
INSERT INTO new_nodes SELECT id, name, cpu_milli, memory_bytes, gpu_count, gpus_json, gpu_model, registered_ms,
  last_heartbeat_ms, cpu_util, memory_used_bytes, agent_version, address, port_lo, port_hi, labels_json FROM nodes;
CREATE TABLE new_jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id INTEGER NOT NULL REFERENCES users(id),
  name TEXT NOT NULL,
  kind TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  priority INTEGER NOT NULL,
  replicas INTEGER NOT NULL,
  max_restarts INTEGER NOT NULL,
  restarts INTEGER NOT NULL,
  stop_state TEXT NOT NULL,
  stop_reason TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  updated_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  not_before_ms INTEGER NOT NULL DEFAULT 0,
  resize_to INTEGER NOT NULL DEFAULT 0,
  service_s REAL NOT NULL DEFAULT 0);
INSERT INTO new_jobs SELECT id, user_id, name, kind, state, reason, spec_json, priority, replicas, max_restarts,
  restarts, stop_state, stop_reason, created_ms, updated_ms, started_ms, finished_ms, not_before_ms, resize_to,
  service_s FROM jobs;
CREATE TABLE new_tasks (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  rank INTEGER NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  node_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  desired TEXT NOT NULL,
  exit_code INTEGER,
  cpu_milli INTEGER NOT NULL,
  memory_bytes INTEGER NOT NULL,
  gpus INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  port INTEGER NOT NULL DEFAULT 0,
  UNIQUE(job_id, rank));
INSERT INTO new_tasks SELECT id, job_id, rank, state, reason, node_id, attempt, desired, exit_code, cpu_milli,
  memory_bytes, gpus, created_ms, started_ms, finished_ms, port FROM tasks;
CREATE TABLE new_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  task_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  ts_ms INTEGER NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL);
INSERT INTO new_events SELECT id, job_id, task_id, rank, ts_ms, from_state, to_state, reason FROM events;
DROP TABLE events;
DROP TABLE tasks;
DROP TABLE jobs;
DROP TABLE nodes;
DROP TABLE tokens;
DROP TABLE users;
ALTER TABLE new_users RENAME TO users;
ALTER TABLE new_tokens RENAME TO tokens;
ALTER TABLE new_nodes RENAME TO nodes;
ALTER TABLE new_jobs RENAME TO jobs;
ALTER TABLE new_tasks RENAME TO tasks;
ALTER TABLE new_events RENAME TO events;
CREATE INDEX jobs_by_user ON jobs(user_id, id);
CREATE INDEX jobs_by_state ON jobs(state);
CREATE INDEX tasks_by_state ON tasks(state);
CREATE INDEX tasks_by_job ON tasks(job_id, rank);
CREATE INDEX events_by_job ON events(job_id, id);
CREATE INDEX tokens_by_user ON tokens(user_id, id);
CREATE TABLE audit (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms INTEGER NOT NULL,
  user TEXT NOT NULL,
  address TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  outcome TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX audit_by_user ON audit(user, id);
)sql",
    // 7: users' files: a byte quota (0 = none) and the bytes their files use.
    R"sql(
ALTER TABLE users ADD COLUMN file_quota_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN file_bytes INTEGER NOT NULL DEFAULT 0;
)sql",
    // 8: tasks in containers: the executors a node's agent offers, and the
    // GPU indices each placed task holds on its node.
    R"sql(
ALTER TABLE nodes ADD COLUMN executors TEXT NOT NULL DEFAULT 'process';
ALTER TABLE tasks ADD COLUMN gpu_indices TEXT NOT NULL DEFAULT '';
)sql",
    // 9: the container overlay: each node's network mode and its block of the
    // cluster subnet (kept with the node's name across agent restarts), and
    // each placed task's address on the overlay.
    R"sql(
ALTER TABLE nodes ADD COLUMN network TEXT NOT NULL DEFAULT 'host';
ALTER TABLE nodes ADD COLUMN overlay_block INTEGER NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN overlay_ip TEXT NOT NULL DEFAULT '';
)sql",
    // 10: node lifecycle: an admin cordons a node (no new work, and why) or
    // drains it (its tasks move away); the fencing window its agent keeps.
    R"sql(
ALTER TABLE nodes ADD COLUMN cordoned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN cordon_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN fence_after_ms INTEGER NOT NULL DEFAULT 0;
)sql",
    // 11: users' (and the site's, user_id 0) logins to OCI registries, the
    // password sealed by the server with a key outside the database.
    R"sql(
CREATE TABLE registry_credentials (
  user_id INTEGER NOT NULL,
  registry TEXT NOT NULL,
  username TEXT NOT NULL,
  sealed TEXT NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (user_id, registry));
)sql",
    // 12: browser sessions are tokens too (revoked with them), with an expiry.
    R"sql(
ALTER TABLE tokens ADD COLUMN expires_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN session INTEGER NOT NULL DEFAULT 0;
)sql",
    // 13: a user's jobs by state, newest first, and their count, from the
    // index alone (the jobs list's filters).
    R"sql(
CREATE INDEX jobs_by_user_state ON jobs(user_id, state, id);
)sql",
    // 14: submits retried with the client's key find the job they made.
    R"sql(
ALTER TABLE jobs ADD COLUMN submit_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX jobs_by_submit_key ON jobs(user_id, submit_key) WHERE submit_key <> '';
)sql",
};

}  // namespace

std::span<const char* const> Migrations() { return kMigrations; }

Status SqliteMetaStore::Init(int up_to_version) {
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
  // Commits do not wait for the disk; acknowledgements do (group_commit.h).
  RM_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
  RM_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
  sqlite3_busy_timeout(db_, 5000);
  RM_RETURN_IF_ERROR(Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
  int64_t version = 0;
  {
    Stmt s(cache_, "SELECT MAX(version) FROM schema_version");
    if (s.valid() && s.Step() == SQLITE_ROW) version = s.Int(0);
  }
  const int64_t known = static_cast<int64_t>(Migrations().size());
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
      RM_RETURN_IF_ERROR(Exec(Migrations()[v]));
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

}  // namespace ringmaster::store::sqlite
