// `ringmaster version`: this binary's build and, like `kubectl version`, the
// server's (GET /api/v1/version) when one is configured and answers.
#pragma once

#include "cli/connect.h"

namespace ringmaster::cli {

struct VersionFlags {
  bool client_only = false;  // --client: never contact a server
  bool as_json = false;
};

// Exit 0 when the client's version was printed, even if the server could not
// be asked (a line on stderr says why), unless --server named that server on
// the command line: then 2.
int Version(const Connection& c, const VersionFlags& flags);

}  // namespace ringmaster::cli
