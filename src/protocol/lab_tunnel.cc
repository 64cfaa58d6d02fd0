#include "protocol/lab_tunnel.h"

#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "common/crypto.h"

namespace ringmaster::protocol {
namespace {

std::string Payload(const TunnelTicket& t) { return fmt::format("v1.{}.{}.{}", t.task_id, t.attempt, t.expires_ms); }

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && *out >= 0;
}

}  // namespace

std::string SignTunnelTicket(const TunnelTicket& ticket, std::string_view key) {
  const std::string payload = Payload(ticket);
  return payload + "." + HexEncode(HmacSha256(key, payload));
}

StatusOr<TunnelTicket> VerifyTunnelTicket(std::string_view text, std::string_view key, int64_t now_ms) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t dot = text.find('.', start);
    parts.push_back(text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  TunnelTicket t;
  if (parts.size() != 5 || parts[0] != "v1" || !ParseInt(parts[1], &t.task_id) || !ParseInt(parts[2], &t.attempt) ||
      !ParseInt(parts[3], &t.expires_ms) || parts[4].size() != 64) {
    return InvalidArgument("tunnel ticket: malformed");
  }
  if (!ConstantTimeEquals(parts[4], HexEncode(HmacSha256(key, Payload(t))))) {
    return PermissionDenied("tunnel ticket: not signed by this node's key");
  }
  if (now_ms >= t.expires_ms) return DeadlineExceeded("tunnel ticket: expired");
  return t;
}

std::string NodeTunnelKey(std::string_view server_secret, std::string_view node_name) {
  return HmacSha256(server_secret, fmt::format("lab-tunnel|{}", node_name));
}

}  // namespace ringmaster::protocol
