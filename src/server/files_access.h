// What the files API (api_files.cc) shares with the agents' side of jobs'
// files (api_agent_files.cc): who may do what where, and the streamed PUT
// and GET, for a caller that is a user or the job owner an agent acts for.
// Internal to the server's routes.
#pragma once

#include <string>

#include "common/status.h"
#include "http/server.h"
#include "server/api.h"

namespace ringmaster::server::files_api {

enum class Op { kRead, kWrite };

// Whether `c` may do `op` on `key` (already a valid key): NotFound for reads
// of what c may not see, PermissionDenied for writes there.
Status CheckAccess(Api& api, const Caller& c, const std::string& key, Op op);
// The route's match `match` as a files key (validated).
StatusOr<std::string> KeyOf(const http::Request& req, size_t match = 0);
// An upload of `key` by `c`, streamed into the store, within c's quota.
void Put(Api& api, http::Request& req, http::Responder respond, const Caller& c, const StatusOr<std::string>& key);
// A download (or HEAD) of `key` by `c`, with the request's Range.
void Get(Api& api, http::Request& req, http::Responder respond, bool head_only, const Caller& c,
         const StatusOr<std::string>& key);

}  // namespace ringmaster::server::files_api
