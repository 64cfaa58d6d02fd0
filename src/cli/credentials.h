// The logins `ringmaster login` keeps, like `docker login`: one JSON file,
// $XDG_CONFIG_HOME/ringmaster/credentials.json (else ~/.config/...), mode 0600
// in a 0700 directory, one entry per server URL. Changes take a lock and
// replace the file atomically, so concurrent logins keep each other's entries.
// For one CLI process: no thread-safety beyond the file lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::cli {

struct StoredLogin {
  std::string server;    // the key: a URL as NormalizeServerUrl gives it
  std::string user;
  std::string token;
  int64_t token_id = 0;  // for `logout` to revoke it; 0 = unknown
  std::string ca;        // the CA file trusted at login ("" = none)
};

// "https://Host:8080/" -> "https://host:8080": the key a server is stored under
// (a list, "https://a:1,https://b:1", stays a list of such).
std::string NormalizeServerUrl(const std::string& url);
// The credentials file's path (the file need not exist).
std::string CredentialsPath();

// Every stored login (none when the file does not exist). FailedPrecondition
// when the file is another user's or others may read it; InvalidArgument
// when it is not a credentials file. Errors name the file.
StatusOr<std::vector<StoredLogin>> ListLogins();
// The login stored for `server` (normalized here), if any.
StatusOr<std::optional<StoredLogin>> FindLogin(const std::string& server);
// Stores `login` under its server, replacing an entry there; returns the
// entry it replaced, if any.
StatusOr<std::optional<StoredLogin>> SaveLogin(StoredLogin login);
// Removes the entry of `server`; returns it, or nullopt when there was none.
StatusOr<std::optional<StoredLogin>> RemoveLogin(const std::string& server);

}  // namespace ringmaster::cli
