#include "store/schema.h"

#include <cctype>
#include <string_view>

namespace ringmaster::store {
namespace {

const Migration kMigrations[] = {
    // 1: initial schema
    {R"sql(
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
)sql"},
    // 2: node addresses and port ranges; a port per placed task
    {R"sql(
ALTER TABLE nodes ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN port_lo INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN port_hi INTEGER NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN port INTEGER NOT NULL DEFAULT 0;
)sql"},
    // 3: restart backoff; elastic resizes
    {R"sql(
ALTER TABLE jobs ADD COLUMN not_before_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN resize_to INTEGER NOT NULL DEFAULT 0;
)sql"},
    // 4: node labels (node selectors)
    {R"sql(
ALTER TABLE nodes ADD COLUMN labels_json TEXT NOT NULL DEFAULT '{}';
)sql"},
    // 5: attained service (LAS), kept across server restarts
    {R"sql(
ALTER TABLE jobs ADD COLUMN service_s REAL NOT NULL DEFAULT 0;
)sql"},
    // 6: ids are never reused (AUTOINCREMENT: a deleted job's id must not come
    // back, or an agent mistakes the new job's task for the old one); token
    // scopes and agent tokens bound to a node; disabled users; the audit log.
    // Tables are rebuilt (SQLite cannot add AUTOINCREMENT in place) with
    // foreign keys off, which Init arranges for every migration.
    {nullptr, R"sql(
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
     R"sql(
ALTER TABLE users ADD COLUMN disabled BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN scope TEXT NOT NULL DEFAULT 'submit';
UPDATE tokens t SET scope = CASE WHEN u.role = 'admin' THEN 'admin' ELSE 'submit' END FROM users u WHERE u.id = t.user_id;
ALTER TABLE tokens ALTER COLUMN scope DROP DEFAULT;
ALTER TABLE tokens ADD COLUMN node TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_by_job ON tasks(job_id, rank);
CREATE INDEX tokens_by_user ON tokens(user_id, id);
CREATE TABLE audit (
  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  ts_ms BIGINT NOT NULL,
  "user" TEXT NOT NULL,
  address TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  outcome TEXT NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX audit_by_user ON audit("user", id);
)sql"},
    // 7: users' files: a byte quota (0 = none) and the bytes their files use.
    {R"sql(
ALTER TABLE users ADD COLUMN file_quota_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN file_bytes INTEGER NOT NULL DEFAULT 0;
)sql"},
    // 8: tasks in containers: the executors a node's agent offers, and the
    // GPU indices each placed task holds on its node.
    {R"sql(
ALTER TABLE nodes ADD COLUMN executors TEXT NOT NULL DEFAULT 'process';
ALTER TABLE tasks ADD COLUMN gpu_indices TEXT NOT NULL DEFAULT '';
)sql"},
    // 9: the container overlay: each node's network mode and its block of the
    // cluster subnet (kept with the node's name across agent restarts), and
    // each placed task's address on the overlay.
    {R"sql(
ALTER TABLE nodes ADD COLUMN network TEXT NOT NULL DEFAULT 'host';
ALTER TABLE nodes ADD COLUMN overlay_block INTEGER NOT NULL DEFAULT -1;
ALTER TABLE tasks ADD COLUMN overlay_ip TEXT NOT NULL DEFAULT '';
)sql"},
    // 10: node lifecycle: an admin cordons a node (no new work, and why) or
    // drains it (its tasks move away); the fencing window its agent keeps.
    {R"sql(
ALTER TABLE nodes ADD COLUMN cordoned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN cordon_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN fence_after_ms INTEGER NOT NULL DEFAULT 0;
)sql"},
    // 11: users' (and the site's, user_id 0) logins to OCI registries, the
    // password sealed by the server with a key outside the database.
    {R"sql(
CREATE TABLE registry_credentials (
  user_id INTEGER NOT NULL,
  registry TEXT NOT NULL,
  username TEXT NOT NULL,
  sealed TEXT NOT NULL,
  updated_ms INTEGER NOT NULL,
  PRIMARY KEY (user_id, registry));
)sql"},
    // 12: browser sessions are tokens too (revoked with them), with an expiry.
    {R"sql(
ALTER TABLE tokens ADD COLUMN expires_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN session INTEGER NOT NULL DEFAULT 0;
)sql"},
    // 13: a user's jobs by state, newest first, and their count, from the
    // index alone (the jobs list's filters).
    {R"sql(
CREATE INDEX jobs_by_user_state ON jobs(user_id, state, id);
)sql"},
    // 14: submits retried with the client's key find the job they made.
    {R"sql(
ALTER TABLE jobs ADD COLUMN submit_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX jobs_by_submit_key ON jobs(user_id, submit_key) WHERE submit_key <> '';
)sql"},
    // 15: the lease naming the leader among servers sharing the database
    // (store/leadership.h), and the row a group commit writes to flush the
    // log; one server alone (SQLite) needs neither.
    {nullptr, "", R"sql(
CREATE TABLE leader (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  epoch BIGINT NOT NULL,
  holder TEXT NOT NULL,
  holder_url TEXT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL);
INSERT INTO leader VALUES (1, 0, '', '', TIMESTAMPTZ 'epoch');
CREATE TABLE sync_marker (id INTEGER PRIMARY KEY CHECK (id = 1), n BIGINT NOT NULL);
INSERT INTO sync_marker VALUES (1, 0);
)sql"},
    // 16: privileges an admin grants a user: the highest job priority they
    // may ask for, and whether their jobs may use the host's network.
    {R"sql(
ALTER TABLE users ADD COLUMN max_priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN host_network INTEGER NOT NULL DEFAULT 0;
)sql"},
};

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::span<const Migration> Migrations() { return kMigrations; }

std::string MigrationSql(const Migration& m, Dialect dialect) {
  if (dialect == Dialect::kSqlite) return m.sqlite ? m.sqlite : m.common;
  return m.postgres ? m.postgres : ToPostgres(m.common);
}

std::string ToPostgres(const std::string& in) {
  // Longest first: a match at a word boundary is replaced, the rest copied.
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {"INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"},
      {"INTEGER PRIMARY KEY", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"},
      {"INTEGER", "BIGINT"},
      {"REAL", "DOUBLE PRECISION"},
  };
  std::string out;
  char quote = 0;
  for (size_t i = 0; i < in.size();) {
    const char c = in[i];
    if (quote) {
      if (c == quote) quote = 0;
      out += c;
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out += c;
      ++i;
      continue;
    }
    bool replaced = false;
    if (i == 0 || !IsWordChar(in[i - 1])) {
      for (const auto& [from, to] : kTypes) {
        const size_t end = i + from.size();
        if (in.compare(i, from.size(), from) == 0 && (end == in.size() || !IsWordChar(in[end]))) {
          out += to;
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += in[i++];
  }
  return out;
}

}  // namespace ringmaster::store
