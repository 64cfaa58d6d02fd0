// The SQL backends' rows: each table's column list and its reader from a row
// cursor (Row: a SQLite statement, a PostgreSQL result row). Internal to
// store/. Thread-compatible; RowDamage is per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "store/meta_store.h"

namespace ringmaster::store {

// One row of a query's result, its columns by position.
class Row {
 public:
  virtual ~Row() = default;
  virtual int64_t Int(int col) const = 0;
  virtual double Real(int col) const = 0;
  virtual bool IsNull(int col) const = 0;
  virtual std::string Text(int col) const = 0;
};


inline constexpr const char* kUserCols = "id, name, role, password_hash, created_ms, disabled, file_quota_bytes, file_bytes, max_priority, host_network";
inline constexpr const char* kTokenCols = "id, user_id, name, hash, created_ms, scope, node, expires_ms, session";
inline constexpr const char* kNodeCols =
    "id, name, cpu_milli, memory_bytes, gpu_count, gpus_json, gpu_model, registered_ms, "
    "last_heartbeat_ms, cpu_util, memory_used_bytes, agent_version, address, port_lo, port_hi, labels_json, executors, network, overlay_block, cordoned, cordon_reason, draining, fence_after_ms";
inline constexpr const char* kJobCols =
    "id, user_id, name, kind, state, reason, spec_json, priority, replicas, max_restarts, "
    "restarts, stop_state, stop_reason, created_ms, updated_ms, started_ms, finished_ms, not_before_ms, resize_to, service_s, submit_key";
inline constexpr const char* kTaskCols =
    "id, job_id, rank, state, reason, node_id, attempt, desired, exit_code, cpu_milli, "
    "memory_bytes, gpus, created_ms, started_ms, finished_ms, port, gpu_indices, overlay_ip";
inline constexpr const char* kEventCols = "id, job_id, task_id, rank, ts_ms, from_state, to_state, reason";
// "user" quoted: a reserved word in PostgreSQL, an identifier in both.
inline constexpr const char* kAuditCols = "id, ts_ms, \"user\", address, action, target, outcome, detail";
inline constexpr const char* kCredentialCols = "user_id, registry, username, sealed, updated_ms";

// Why `text` cannot be stored ("text with a NUL byte cannot be stored", or
// not valid UTF-8); nullptr when it can. Every backend refuses such text with
// InvalidArgument, so what is stored never depends on the backend
// (PostgreSQL's text cannot hold either).
const char* TextProblem(std::string_view text);
// `text` with each NUL byte and each invalid UTF-8 sequence replaced by
// U+FFFD; adds 1 to *changed when anything was replaced.
std::string StorableText(std::string_view text, int64_t* changed);

// What a reader found wrong with the row it read ("" = sound): set by the
// readers, checked and cleared by whoever called them (same thread, under
// the store's lock).
std::string& RowDamage();

User ReadUser(const Row& s);
Token ReadToken(const Row& s);
AuditEntry ReadAudit(const Row& s);
Node ReadNode(const Row& s);
Job ReadJob(const Row& s);
Task ReadTask(const Row& s);
Event ReadEvent(const Row& s);
RegistryCredential ReadCredential(const Row& s);

}  // namespace ringmaster::store
