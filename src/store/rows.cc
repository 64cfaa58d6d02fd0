#include "store/rows.h"

#include <string>

#include "common/json_limits.h"

namespace ringmaster::store {

const char* TextProblem(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return "text with a NUL byte cannot be stored";
  if (!IsValidUtf8(text)) return "text that is not valid UTF-8 cannot be stored";
  return nullptr;
}

std::string StorableText(std::string_view text, int64_t* changed) {
  constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD
  std::string out;
  out.reserve(text.size());
  bool any = false;
  while (!text.empty()) {
    const size_t bad = InvalidUtf8At(text);
    for (char c : text.substr(0, bad)) {
      if (c == '\0') {
        out += kReplacement;
        any = true;
      } else {
        out += c;
      }
    }
    if (bad == std::string_view::npos) break;
    out += kReplacement;
    any = true;
    text.remove_prefix(bad + 1);
  }
  if (any) ++*changed;
  return out;
}

std::string& RowDamage() {
  thread_local std::string damage;
  return damage;
}

namespace {

void BadRow(const std::string& what) {
  if (RowDamage().empty()) RowDamage() = what;
}

template <typename E>
E Parsed(std::optional<E> v, E fallback, const char* table, int64_t id, const char* column, const std::string& text) {
  if (!v) BadRow(std::string(table) + " " + std::to_string(id) + ": stored " + column + " \"" + text.substr(0, 64) + "\" is not one");
  return v.value_or(fallback);
}

}  // namespace

User ReadUser(const Row& s) {
  User u;
  u.id = s.Int(0);
  u.name = s.Text(1);
  u.role = Parsed(ParseRole(s.Text(2)), Role::kUser, "user", u.id, "role", s.Text(2));
  u.password_hash = s.Text(3);
  u.created_ms = s.Int(4);
  u.disabled = s.Int(5) != 0;
  u.file_quota_bytes = s.Int(6);
  u.file_bytes = s.Int(7);
  u.max_priority = static_cast<int>(s.Int(8));
  u.host_network = s.Int(9) != 0;
  return u;
}

Token ReadToken(const Row& s) {
  return Token{s.Int(0), s.Int(1), s.Text(2), s.Text(3), s.Int(4), s.Text(5), s.Text(6), s.Int(7), s.Int(8) != 0};
}

AuditEntry ReadAudit(const Row& s) {
  return AuditEntry{s.Int(0), s.Int(1), s.Text(2), s.Text(3), s.Text(4), s.Text(5), s.Text(6), s.Text(7)};
}

Node ReadNode(const Row& s) {
  Node n;
  n.id = s.Int(0);
  n.name = s.Text(1);
  n.cpu_milli = s.Int(2);
  n.memory_bytes = s.Int(3);
  n.gpu_count = static_cast<int>(s.Int(4));
  n.gpus_json = s.Text(5);
  n.gpu_model = s.Text(6);
  n.registered_ms = s.Int(7);
  n.last_heartbeat_ms = s.Int(8);
  n.cpu_util = s.Real(9);
  n.memory_used_bytes = s.Int(10);
  n.agent_version = s.Text(11);
  n.address = s.Text(12);
  n.port_lo = static_cast<int>(s.Int(13));
  n.port_hi = static_cast<int>(s.Int(14));
  n.labels_json = s.Text(15);
  n.executors = s.Text(16);
  n.network = s.Text(17);
  n.overlay_block = static_cast<int>(s.Int(18));
  n.cordoned = s.Int(19) != 0;
  n.cordon_reason = s.Text(20);
  n.draining = s.Int(21) != 0;
  n.fence_after_ms = s.Int(22);
  return n;
}

Job ReadJob(const Row& s) {
  Job j;
  j.id = s.Int(0);
  j.user_id = s.Int(1);
  j.name = s.Text(2);
  j.kind = s.Text(3);
  j.state = Parsed(ParseState(s.Text(4)), State::kFailed, "job", j.id, "state", s.Text(4));
  j.reason = s.Text(5);
  j.spec_json = s.Text(6);
  j.priority = static_cast<int>(s.Int(7));
  j.replicas = static_cast<int>(s.Int(8));
  j.max_restarts = static_cast<int>(s.Int(9));
  j.restarts = static_cast<int>(s.Int(10));
  j.stop_state = ParseState(s.Text(11));
  if (!s.IsNull(11) && !s.Text(11).empty() && !j.stop_state) {
    BadRow("job " + std::to_string(j.id) + ": stored stop_state \"" + s.Text(11).substr(0, 64) + "\" is not one");
  }
  j.stop_reason = s.Text(12);
  j.created_ms = s.Int(13);
  j.updated_ms = s.Int(14);
  j.started_ms = s.Int(15);
  j.finished_ms = s.Int(16);
  j.not_before_ms = s.Int(17);
  j.resize_to = static_cast<int>(s.Int(18));
  j.service_s = s.Real(19);
  j.submit_key = s.Text(20);
  return j;
}

Task ReadTask(const Row& s) {
  Task t;
  t.id = s.Int(0);
  t.job_id = s.Int(1);
  t.rank = static_cast<int>(s.Int(2));
  t.state = Parsed(ParseState(s.Text(3)), State::kFailed, "task", t.id, "state", s.Text(3));
  t.reason = s.Text(4);
  t.node_id = s.Int(5);
  t.attempt = static_cast<int>(s.Int(6));
  t.desired = s.Text(7) == "stop" ? Desired::kStop : Desired::kRun;
  if (s.Text(7) != "stop" && s.Text(7) != "run") BadRow("task " + std::to_string(t.id) + ": stored desired \"" + s.Text(7).substr(0, 64) + "\" is not one");
  if (!s.IsNull(8)) t.exit_code = static_cast<int>(s.Int(8));
  t.cpu_milli = s.Int(9);
  t.memory_bytes = s.Int(10);
  t.gpus = static_cast<int>(s.Int(11));
  t.created_ms = s.Int(12);
  t.started_ms = s.Int(13);
  t.finished_ms = s.Int(14);
  t.port = static_cast<int>(s.Int(15));
  t.gpu_indices = s.Text(16);
  t.overlay_ip = s.Text(17);
  return t;
}

RegistryCredential ReadCredential(const Row& s) {
  return RegistryCredential{s.Int(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4)};
}

Event ReadEvent(const Row& s) {
  Event e;
  e.id = s.Int(0);
  e.job_id = s.Int(1);
  e.task_id = s.Int(2);
  e.rank = static_cast<int>(s.Int(3));
  e.ts_ms = s.Int(4);
  e.from_state = s.Text(5);
  e.to_state = s.Text(6);
  e.reason = s.Text(7);
  return e;
}

}  // namespace ringmaster::store
