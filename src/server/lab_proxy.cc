#include "server/lab_proxy.h"

#include <strings.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/crypto.h"
#include "protocol/lab_tunnel.h"

namespace ringmaster::server {
namespace {

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IStartsWith(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) return false;
  }
  return true;
}

bool PlatformCookie(std::string_view name) { return IStartsWith(TrimSpace(name), "rm_"); }

}  // namespace

std::string StripPlatformCookies(std::string_view cookie_header) {
  std::string out;
  size_t start = 0;
  while (start <= cookie_header.size()) {
    size_t end = cookie_header.find(';', start);
    if (end == std::string_view::npos) end = cookie_header.size();
    std::string_view pair = TrimSpace(cookie_header.substr(start, end - start));
    if (!pair.empty() && !PlatformCookie(pair.substr(0, pair.find('=')))) {
      if (!out.empty()) out += "; ";
      out += pair;
    }
    start = end + 1;
  }
  return out;
}

bool MayPassSetCookie(std::string_view set_cookie, int64_t job_id) {
  const size_t semi = set_cookie.find(';');
  std::string_view pair = set_cookie.substr(0, semi);
  if (pair.find('=') == std::string_view::npos || PlatformCookie(pair.substr(0, pair.find('=')))) return false;
  const std::string base = fmt::format("/jobs/{}/lab", job_id);
  bool path_ok = false;
  for (size_t at = semi; at != std::string_view::npos;) {
    size_t next = set_cookie.find(';', at + 1);
    std::string_view attr = TrimSpace(set_cookie.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
    if (IStartsWith(attr, "domain=")) return false;  // a notebook sets cookies for its own path on this host only
    if (IStartsWith(attr, "path=")) {
      std::string_view path = TrimSpace(attr.substr(5));
      path_ok = path == base || path.substr(0, base.size() + 1) == base + "/";
      if (!path_ok) return false;
    }
  }
  return path_ok;  // no Path: dropped too (the rule is explicit, not the browser's default)
}

bool MayPassHeader(std::string_view name, std::string_view value, int64_t job_id) {
  auto is = [name](std::string_view want) {
    return name.size() == want.size() && strncasecmp(name.data(), want.data(), want.size()) == 0;
  };
  if (is("service-worker-allowed") || is("clear-site-data")) return false;
  return !is("set-cookie") || MayPassSetCookie(value, job_id);
}

std::string ForwardedHead(const http::Request& req, bool tls) {
  std::string head = fmt::format("{} {} HTTP/1.1\r\n", req.method, req.target);
  const bool upgrade = req.AsksUpgrade();  // the takeover relies on the same test
  for (const auto& [name, value] : req.headers) {
    if (name == "authorization" || name == "connection" || name == "keep-alive" || name == "upgrade" ||
        name == "forwarded" || name == "te" || name.rfind("proxy-", 0) == 0 || name.rfind("x-forwarded-", 0) == 0) {
      continue;
    }
    if (name == "cookie") {
      std::string kept = StripPlatformCookies(value);
      if (!kept.empty()) head += "cookie: " + kept + "\r\n";
      continue;
    }
    head += name + ": " + value + "\r\n";
  }
  if (upgrade) {
    head += "connection: Upgrade\r\nupgrade: " + req.Header("upgrade") + "\r\n";
  } else {
    head += "connection: close\r\n";
  }
  head += fmt::format("x-forwarded-for: {}\r\nx-forwarded-proto: {}\r\n", req.remote, tls ? "https" : "http");
  if (!req.Header("host").empty()) head += "x-forwarded-host: " + req.Header("host") + "\r\n";
  return head + "\r\n";
}

std::vector<std::string> NotebookCommand(int64_t job_id, int64_t idle_timeout_ms) {
  const int64_t idle_s = (idle_timeout_ms + 999) / 1000;
  // Idle kernels are culled after the same time, so that a forgotten kernel
  // does not keep the notebook (and its node's resources) forever.
  const std::string script = fmt::format(
      "lab=\"$RINGMASTER_WORK_DIR/.lab\" && mkdir -p \"$lab\" && chmod 0700 \"$lab\" && "
      "export JUPYTER_RUNTIME_DIR=\"$lab/runtime\" JUPYTER_DATA_DIR=\"$lab/data\" "
      "JUPYTER_CONFIG_DIR=\"$lab/config\" IPYTHONDIR=\"$lab/ipython\" && "
      "exec jupyter-notebook --no-browser --sock=\"$lab/notebook.sock\" --sock-mode=0600 "
      "--NotebookApp.base_url=/jobs/{0}/lab/ --NotebookApp.token= --NotebookApp.password= "
      // Its XSRF cookie on its own path: the proxy drops cookies for any other.
      "'--NotebookApp.tornado_settings={{\"xsrf_cookie_kwargs\": {{\"path\": \"/jobs/{0}/lab/\"}}}}' "
      "--NotebookApp.allow_remote_access=True --NotebookApp.notebook_dir=\"$PWD\" "
      "--NotebookApp.shutdown_no_activity_timeout={1} --MappingKernelManager.cull_idle_timeout={1} "
      "--MappingKernelManager.cull_interval={2}",
      job_id, idle_s, idle_s == 0 ? 300 : std::clamp<int64_t>(idle_s / 2, 1, 300));
  return {"/bin/sh", "-c", script};
}

std::string LabTunnels::NodeKey(std::string_view node_name) const {
  return HexEncode(protocol::NodeTunnelKey(secret_, node_name));
}

void LabTunnels::SetPort(int64_t node_id, int64_t port) {
  std::lock_guard<std::mutex> l(mu_);
  ports_[node_id] = port;
}

int64_t LabTunnels::Port(int64_t node_id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = ports_.find(node_id);
  return it == ports_.end() ? 0 : it->second;
}

}  // namespace ringmaster::server
