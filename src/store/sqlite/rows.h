// The SQLite MetaStore's rows: each table's column list and row reader.
// Internal to store/sqlite/. Thread-compatible: under the connection's mutex.
#pragma once

#include <string>

#include "store/meta_store.h"
#include "store/sqlite/statements.h"

namespace ringmaster::store::sqlite {

inline constexpr const char* kUserCols = "id, name, role, password_hash, created_ms, disabled, file_quota_bytes, file_bytes";
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

// What a reader found wrong with the row it read ("" = sound): set by the
// readers, checked and cleared by whoever called them (same thread, under
// the store's lock).
std::string& RowDamage();

User ReadUser(const Stmt& s);
Token ReadToken(const Stmt& s);
AuditEntry ReadAudit(const Stmt& s);
Node ReadNode(const Stmt& s);
Job ReadJob(const Stmt& s);
Task ReadTask(const Stmt& s);
Event ReadEvent(const Stmt& s);

}  // namespace ringmaster::store::sqlite
