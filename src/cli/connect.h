// How the CLI reaches a server (the order is Connect's, below, and the
// README's): flags, then RINGMASTER_* variables, then the login `ringmaster
// login` kept (cli/credentials.h), then the files `ringmaster up` wrote into
// its data dir. And the CLI's one way to fail: one line on stderr, exit 2.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "client/api_client.h"
#include "common/status.h"

namespace ringmaster::cli {

constexpr int kExitFailure = 1;  // `wait`: the job failed or was cancelled
constexpr int kExitError = 2;    // the command itself could not do its work

[[noreturn]] void Die(const std::string& message);
std::string Trim(std::string s);
// $RINGMASTER_DATA, else /var/lib/ringmaster for root, else ~/.ringmaster.
std::string DefaultDataDir();
// This binary's path (the agent runs it as each task's shim).
std::string SelfExe();

struct Connection {
  std::string server;
  std::string token;
  std::string data;
  std::string ca;  // CA file for https
};

// The server's URL: --server, else $RINGMASTER_SERVER, else <data>/server.json,
// else the one server you are logged in to. Dies saying what to pass when
// there is none.
std::string FindServer(const Connection& c);
// A client for FindServer's server with the token of --token, else
// $RINGMASTER_TOKEN, else your login to that server, else <data>/admin.token;
// the CA of --ca, else $RINGMASTER_CA, else the login's, else the data dir's.
// Dies with one line saying what to pass when there is no token.
client::ApiClient Connect(const Connection& c);
// The same, with FailedPrecondition instead of dying (`version`, for which
// no server is no error).
StatusOr<client::ApiClient> TryConnect(const Connection& c);
// The call's JSON, or die with its error's message.
nlohmann::json Must(const StatusOr<nlohmann::json>& r);

}  // namespace ringmaster::cli
