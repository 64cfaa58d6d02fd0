// The lab tunnel: how the server reaches a notebook's unix socket through
// its node's agent. The server connects to the agent's tunnel port, sends one
// line "RMTUNNEL <ticket>\n" and then the HTTP request; the agent verifies
// the ticket (HMAC-SHA256 under its node's key, which the register answer
// carries) before it connects the stream to the task's notebook. Pure
// functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ringmaster::protocol {

inline constexpr std::string_view kTunnelGreeting = "RMTUNNEL ";
inline constexpr size_t kMaxTunnelLine = 256;  // the greeting line, newline included
inline constexpr int64_t kTunnelTicketTtlMs = 30'000;

struct TunnelTicket {
  int64_t task_id = 0;
  int64_t attempt = 0;
  int64_t expires_ms = 0;  // Unix time in ms
  bool operator==(const TunnelTicket&) const = default;
};

// "v1.<task_id>.<attempt>.<expires_ms>.<hex HMAC-SHA256 of what precedes it>".
std::string SignTunnelTicket(const TunnelTicket& ticket, std::string_view key);
// The ticket `text` names: InvalidArgument when malformed, PermissionDenied
// when signed with another key (or altered), DeadlineExceeded once expired.
StatusOr<TunnelTicket> VerifyTunnelTicket(std::string_view text, std::string_view key, int64_t now_ms);
// A node's tunnel key (32 raw bytes; sent and used as its 64-hex form) from
// the server's own secret: stable across server restarts, different per node.
std::string NodeTunnelKey(std::string_view server_secret, std::string_view node_name);

}  // namespace ringmaster::protocol
