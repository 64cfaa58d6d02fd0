// How the CLI reaches a server: --server/--token/--ca flags, else
// RINGMASTER_SERVER/RINGMASTER_TOKEN/RINGMASTER_CA, else the files `ringmaster
// up` wrote into its data dir (server.json, admin.token, tls/ca.crt). And the
// CLI's one way to fail: one line on stderr, exit 2.
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

// A client for the server the flags, environment or data dir name; dies with
// one line saying what to pass when there is none.
client::ApiClient Connect(const Connection& c);
// The same, with FailedPrecondition instead of dying (`version`, for which
// no server is no error).
StatusOr<client::ApiClient> TryConnect(const Connection& c);
// The call's JSON, or die with its error's message.
nlohmann::json Must(const StatusOr<nlohmann::json>& r);

}  // namespace ringmaster::cli
