// `ringmaster login` and `logout`: a password exchanged for a token that the
// CLI keeps per server (cli/credentials.h), and that token revoked again.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/credentials.h"

namespace ringmaster::cli {

namespace {

// Revokes token `id` with the token itself; OK when the server no longer
// knows it (revoked already, or the user was removed).
Status Revoke(const Connection& c, const StoredLogin& l) {
  Connection as_login = c;
  as_login.server = l.server;
  as_login.token = l.token;
  if (as_login.ca.empty()) as_login.ca = l.ca;
  auto r = Connect(as_login).Delete(fmt::format("/api/v1/tokens/{}", l.token_id));
  if (!r.ok() && r.status().code() != StatusCode::kUnauthenticated && r.status().code() != StatusCode::kNotFound) {
    return r.status();
  }
  return Status::Ok();
}

}  // namespace

int Login(const Connection& c, const std::string& user, const std::string& token_name, bool print_token) {
  std::string pw;
  std::getline(std::cin, pw);
  // Only the server address is needed: the password is the credential.
  Connection anon = c;
  if (anon.token.empty()) anon.token.push_back('-');
  auto api = Connect(anon);
  auto r = client::ApiClient::Login(api.server_url(), api.ca_file(), user, pw, token_name);
  if (!r.ok()) Die(fmt::format("login: {}", r.status().message()));
  const std::string token = (*r)["token"];
  if (print_token) {
    std::cout << token << "\n";
    return 0;
  }
  StoredLogin login;
  login.server = NormalizeServerUrl(api.server_url());
  login.user = user;
  login.token = token;
  login.token_id = r->value("id", int64_t{0});
  if (!api.ca_file().empty()) login.ca = std::filesystem::absolute(api.ca_file()).string();
  auto old = SaveLogin(login);
  if (!old.ok()) {
    // A token nobody keeps would only count against the user's limit.
    Status revoked = Revoke(c, login);
    Die(fmt::format("login: the token could not be kept: {}{}", old.status().message(),
                    revoked.ok() ? "" : fmt::format(" (and token {} stays valid: {})", login.token_id, revoked.message())));
  }
  // Each login makes a token: the one it replaces goes, so that logging in
  // again does not pile tokens up against the per-user limit.
  if (*old && (*old)->token_id > 0 && (*old)->token_id != login.token_id) {
    if (Status st = Revoke(c, **old); !st.ok()) {
      std::cerr << fmt::format("ringmaster: the previous login's token {} could not be revoked ({}): revoke it with "
                               "`ringmaster tokens revoke {}`\n",
                               (*old)->token_id, st.message(), (*old)->token_id);
    }
  }
  std::cerr << fmt::format("logged in to {} as {} (token {}, scope {}); kept in {}\n", login.server, user,
                           login.token_id, r->value("scope", "?"), CredentialsPath());
  return 0;
}

int Logout(const Connection& c) {
  const std::string server = NormalizeServerUrl(FindServer(c));
  auto found = FindLogin(server);
  if (!found.ok()) Die(fmt::format("logout: {}", found.status().message()));
  if (!*found) {
    std::cerr << fmt::format("not logged in to {}\n", server);
    return 0;
  }
  const StoredLogin login = **found;
  // Revoked first, while its CA is still known; forgotten here either way.
  Status revoked = login.token_id > 0 ? Revoke(c, login) : Status::Ok();
  if (auto removed = RemoveLogin(server); !removed.ok()) Die(fmt::format("logout: {}", removed.status().message()));
  if (!revoked.ok()) {
    Die(fmt::format("logged out of {}, but the server did not revoke token {}: {}; revoke it with `ringmaster "
                    "tokens revoke {}` once it answers",
                    server, login.token_id, revoked.message(), login.token_id));
  }
  std::cerr << fmt::format("logged out of {}{}\n", server,
                           login.token_id > 0 ? fmt::format("; token {} revoked", login.token_id) : "");
  return 0;
}

}  // namespace ringmaster::cli
