#include "cli/connect.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "cli/credentials.h"
#include "common/files.h"

namespace ringmaster::cli {

using nlohmann::json;

namespace {

// Where Connect found its token when that was a stored login: an answer of
// 401 then says to log in again. One CLI command, one connection: no lock.
std::string login_token_source;

json ServerInfo(const std::string& data) {
  if (auto text = ReadFile(data + "/server.json"); text.ok()) {
    return json::parse(*text, nullptr, /*allow_exceptions=*/false);
  }
  return json();
}

// The CA to trust for an https server: --ca, else $RINGMASTER_CA, else the
// login's, else what the server wrote into its data dir (server.json's "ca",
// <data>/tls/ca.crt).
std::string FindCa(const Connection& c, const std::string& data, const json& info, const std::string& login_ca) {
  if (!c.ca.empty()) return c.ca;
  if (const char* e = getenv("RINGMASTER_CA"); e && *e) return e;
  if (!login_ca.empty()) return login_ca;
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


namespace {

StatusOr<std::string> TryFindServer(const Connection& c) {
  if (!c.server.empty()) return c.server;
  if (const char* s = getenv("RINGMASTER_SERVER"); s && *s) return std::string(s);
  const std::string data = c.data.empty() ? DefaultDataDir() : c.data;
  const json info = ServerInfo(data);
  if (info.is_object() && info.contains("url") && info["url"].is_string()) return info["url"].get<std::string>();
  RM_ASSIGN_OR_RETURN(auto logins, ListLogins());
  if (logins.size() == 1) return logins.front().server;
  std::string known;
  for (const StoredLogin& l : logins) known += (known.empty() ? "" : ", ") + l.server;
  if (!known.empty()) {
    return FailedPrecondition("no server given and you are logged in to several: pass --server URL (one of " + known + ")");
  }
  return FailedPrecondition(fmt::format("no server given: pass --server URL, set RINGMASTER_SERVER, log in with "
                                        "`ringmaster login USER --server URL`, or start one with `ringmaster up --data {}`",
                                        data));
}

}  // namespace

std::string FindServer(const Connection& c) {
  auto server = TryFindServer(c);
  if (!server.ok()) Die(server.status().message());
  return *server;
}

StatusOr<client::ApiClient> TryConnect(const Connection& c) {
  // A server that closes a connection we write to (an upload it refused) is
  // an error to report, not a reason to die. Client commands only: daemons
  // never come here, and their tasks keep the default disposition.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string data = c.data.empty() ? DefaultDataDir() : c.data;
  RM_ASSIGN_OR_RETURN(const std::string server, TryFindServer(c));
  std::string token = c.token;
  if (token.empty()) {
    if (const char* t = getenv("RINGMASTER_TOKEN")) token = t;
  }
  std::optional<StoredLogin> login;
  if (token.empty()) {
    RM_ASSIGN_OR_RETURN(login, FindLogin(server));
    if (login) {
      token = login->token;
      login_token_source = fmt::format("{}'s login to {}, kept in {}", login->user, login->server, CredentialsPath());
    }
  } else if (auto l = FindLogin(server); l.ok()) {
    login = *l;  // for its CA only; a token given outright needs no readable credentials file
  }
  if (token.empty()) {
    auto t = ReadFile(data + "/admin.token");
    if (t.ok()) token = Trim(*t);
  }
  if (token.empty()) {
    return FailedPrecondition(
        fmt::format("no token for {}: pass --token, set RINGMASTER_TOKEN, or log in (`ringmaster login USER`)", server));
  }
  return client::ApiClient(server, token, FindCa(c, data, ServerInfo(data), login ? login->ca : ""));
}

client::ApiClient Connect(const Connection& c) {
  StatusOr<client::ApiClient> api = TryConnect(c);
  if (!api.ok()) Die(api.status().message());
  return std::move(*api);
}

json Must(const StatusOr<json>& r) {
  if (!r.ok() && r.status().code() == StatusCode::kUnauthenticated && !login_token_source.empty()) {
    Die(fmt::format("{} (the token is {}: log in again with `ringmaster login USER`)", r.status().message(),
                    login_token_source));
  }
  if (!r.ok()) Die(r.status().message());
  return *r;
}

}  // namespace ringmaster::cli
