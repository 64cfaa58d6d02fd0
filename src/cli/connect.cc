#include "cli/connect.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "common/files.h"

namespace ringmaster::cli {

using nlohmann::json;

namespace {

// The CA to trust for an https server: --ca, else $RINGMASTER_CA, else what
// the server wrote into its data dir (server.json's "ca", <data>/tls/ca.crt).
std::string FindCa(const Connection& c, const std::string& data, const json& info) {
  if (!c.ca.empty()) return c.ca;
  if (const char* e = getenv("RINGMASTER_CA"); e && *e) return e;
  if (info.is_object() && info.contains("ca") && info["ca"].is_string()) return info["ca"];
  if (std::filesystem::exists(data + "/tls/ca.crt")) return data + "/tls/ca.crt";
  return "";
}

}  // namespace

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "ringmaster: " << message << "\n";
  std::exit(kExitError);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string DefaultDataDir() {
  if (const char* d = getenv("RINGMASTER_DATA"); d && *d) return d;
  // Root's tasks run as other uids, which cannot pass through /root: a root
  // server keeps its data where they can reach their own files.
  if (geteuid() == 0) return "/var/lib/ringmaster";
  const char* home = getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.ringmaster";
}

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("ringmaster") : p.string();
}


// --server/--token flags, else RINGMASTER_SERVER/RINGMASTER_TOKEN, else the
// files `ringmaster up` wrote into its data dir (--data, RINGMASTER_DATA, ~/.ringmaster).
StatusOr<client::ApiClient> TryConnect(const Connection& c) {
  // A server that closes a connection we write to (an upload it refused) is
  // an error to report, not a reason to die. Client commands only: daemons
  // never come here, and their tasks keep the default disposition.
  std::signal(SIGPIPE, SIG_IGN);
  std::string server = c.server, token = c.token;
  std::string data = c.data.empty() ? DefaultDataDir() : c.data;
  if (server.empty()) {
    if (const char* s = getenv("RINGMASTER_SERVER")) server = s;
  }
  json info;
  if (auto text = ReadFile(data + "/server.json"); text.ok()) {
    info = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  }
  if (server.empty() && info.is_object() && info.contains("url") && info["url"].is_string()) server = info["url"];
  if (server.empty()) {
    return FailedPrecondition(fmt::format("no server given: pass --server URL, set RINGMASTER_SERVER, or start one "
                                          "with `ringmaster up --data {}`",
                                          data));
  }
  if (token.empty()) {
    if (const char* t = getenv("RINGMASTER_TOKEN")) token = t;
  }
  if (token.empty()) {
    auto t = ReadFile(data + "/admin.token");
    if (t.ok()) token = Trim(*t);
  }
  if (token.empty()) return FailedPrecondition("no token given: pass --token, or set RINGMASTER_TOKEN");
  return client::ApiClient(server, token, FindCa(c, data, info));
}

client::ApiClient Connect(const Connection& c) {
  StatusOr<client::ApiClient> api = TryConnect(c);
  if (!api.ok()) Die(api.status().message());
  return std::move(*api);
}

json Must(const StatusOr<json>& r) {
  if (!r.ok()) Die(r.status().message());
  return *r;
}

}  // namespace ringmaster::cli
