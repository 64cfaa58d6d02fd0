// The notebook proxy's pure parts (api_lab.cc serves the route): the request
// head forwarded to a notebook (the platform's credentials removed,
// X-Forwarded-* added), which of the notebook's Set-Cookie headers may reach
// the browser, the notebook's command, and LabTunnels: where each node's
// agent takes lab tunnels and the key its tickets are signed with. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "http/server.h"

namespace ringmaster::server {

// The Cookie header's value without the platform's own cookies (rm_*, the
// session among them); "" when nothing is left.
std::string StripPlatformCookies(std::string_view cookie_header);
// Whether a Set-Cookie of job `job_id`'s notebook may reach the browser: its
// Path under /jobs/<id>/lab/, no Domain, and a name that is not rm_*.
bool MayPassSetCookie(std::string_view set_cookie, int64_t job_id);
// Whether a header of the notebook's answer may reach the browser: not a
// Set-Cookie that MayPassSetCookie refuses, and none of the headers that act
// on the whole origin (Service-Worker-Allowed would let a worker claim the
// dashboard's paths; Clear-Site-Data would wipe its session).
bool MayPassHeader(std::string_view name, std::string_view value, int64_t job_id);
// The head of `req` as the notebook gets it: no Authorization, no rm_*
// cookie, X-Forwarded-{For,Proto,Host} set by us (the client's dropped), and
// `Connection: close` unless it is a WebSocket upgrade.
std::string ForwardedHead(const http::Request& req, bool tls);

// What a notebook job's task runs: Debian's jupyter-notebook (6.4) on a unix
// socket, $RINGMASTER_WORK_DIR/.lab/notebook.sock (0600, in a 0700
// directory of the task's user), under /jobs/<id>/lab/, with no token or
// password of its own (the proxy checks who comes), ending after
// `idle_timeout_ms` without activity (0 = never).
std::vector<std::string> NotebookCommand(int64_t job_id, int64_t idle_timeout_ms);

class LabTunnels {
 public:
  explicit LabTunnels(std::string secret) : secret_(std::move(secret)) {}
  // The key (64 hex characters) node `name`'s agent checks tickets with.
  std::string NodeKey(std::string_view node_name) const;
  void SetPort(int64_t node_id, int64_t port);
  // 0: the node's agent has not said (since this server started).
  int64_t Port(int64_t node_id) const;

 private:
  const std::string secret_;
  mutable std::mutex mu_;
  std::map<int64_t, int64_t> ports_;  // GUARDED_BY(mu_)
};

}  // namespace ringmaster::server
