// The client commands of `ringmaster`: one function each, over the REST API
// (docs/api.md). Each prints its result on stdout (or a line on stderr) and
// returns the exit code; errors die with one line (cli/connect.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/connect.h"

namespace ringmaster::cli {

// A spec file (- for stdin); without --no-workdir, working_dir defaults to the
// current directory, like sbatch. Prints the job id.
int Submit(const Connection& c, const std::string& file, bool no_workdir);
// Logs with rank prefixes; with `follow`, streamed until the job ends.
int Logs(const Connection& c, int64_t id, bool follow, int rank);
// Exit 0 if the job succeeded, 1 if it failed or was cancelled.
int Wait(const Connection& c, int64_t id, double timeout_s, bool quiet);
int Ls(const Connection& c, bool all, bool as_json);
int Show(const Connection& c, int64_t id, bool as_json);
// `dev open`: prints the URL of a running notebook job's notebook; exit 1 with one line when it has none.
int DevOpen(const Connection& c, int64_t id);
// Cancels, then waits (up to 60 s) until every task has ended unless `no_wait`.
int Cancel(const Connection& c, int64_t id, bool no_wait);
int Delete(const Connection& c, int64_t id);
int Nodes(const Connection& c, bool as_json);
int Whoami(const Connection& c);
// Reads a password from stdin and exchanges it for a new token, which it
// keeps for the server (cli/credentials.h; revoking the one it replaces), or
// with `print_token` prints on stdout and keeps nowhere. In login.cc.
int Login(const Connection& c, const std::string& user, const std::string& token_name, bool print_token);
// Forgets the login kept for the server and revokes its token there. In login.cc.
int Logout(const Connection& c);
int UsersCreate(const Connection& c, const std::string& name, const std::string& role, bool password_stdin);
int UsersLs(const Connection& c);
int UsersSetDisabled(const Connection& c, const std::string& name, bool disabled);
// "100Gi", "500Mi", "0" or "none" (no quota).
int UsersQuota(const Connection& c, const std::string& name, const std::string& size);
// Sets what an admin grants: the highest job priority (unset: unchanged) and
// the host's network ("yes", "no"; "": unchanged).
int UsersSet(const Connection& c, const std::string& name, std::optional<int> max_priority,
             const std::string& host_network);
// Prints the new token alone on stdout.
int TokensCreate(const Connection& c, const std::string& user, const std::string& name, const std::string& scope,
                 const std::string& node);
int TokensLs(const Connection& c, const std::string& user, bool all);
int TokensRevoke(const Connection& c, int64_t id);
int Audit(const Connection& c, const std::string& user, const std::string& action, int limit, bool as_json);

}  // namespace ringmaster::cli
