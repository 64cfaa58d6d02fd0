#include "cli/version.h"

#include <iostream>

#include <fmt/format.h>

#include "common/build_info.h"

namespace ringmaster::cli {
namespace {

using nlohmann::json;

std::string Line(const BuildInfo& b) {
  const std::string protocol = b.agent_protocol > 0 ? fmt::format("agent protocol {}; ", b.agent_protocol) : "";
  return fmt::format("ringmaster {} (commit {}; {}{}; {})", b.version, b.git_commit, protocol, b.compiler, b.platform);
}

// The server's build, or why it cannot be had.
StatusOr<json> AskServer(const Connection& c, std::string* url) {
  RM_ASSIGN_OR_RETURN(client::ApiClient api, TryConnect(c));
  *url = api.server_url();
  client::CallOptions opts;
  opts.read_timeout = std::chrono::seconds(10);
  RM_ASSIGN_OR_RETURN(json v, api.Get("/api/v1/version", opts));
  if (!v.is_object() || !v.contains("version")) return Internal("GET /api/v1/version: no \"version\" in the answer");
  return v;
}

}  // namespace

int Version(const Connection& c, const VersionFlags& flags) {
  const BuildInfo& mine = ThisBuild();
  json out = {{"client", BuildInfoJson(mine)}};
  if (flags.client_only) {
    if (flags.as_json) std::cout << out.dump(2) << "\n";
    else std::cout << "client: " << Line(mine) << "\n";
    return 0;
  }
  std::string url;
  StatusOr<json> server = AskServer(c, &url);
  if (server.ok()) {
    out["server"] = *server;
    out["server"]["url"] = url;
  } else {
    out["server_error"] = server.status().message();
  }
  if (flags.as_json) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "client: " << Line(mine) << "\n";
    if (server.ok()) std::cout << "server: " << Line(BuildInfoFromJson(*server)) << " at " << url << "\n";
  }
  if (!server.ok()) {
    std::cerr << "ringmaster: server: " << server.status().message() << "\n";
    return c.server.empty() ? 0 : kExitError;
  }
  const BuildInfo theirs = BuildInfoFromJson(*server);
  if (theirs.version != mine.version || theirs.git_commit != mine.git_commit) {
    std::cerr << fmt::format("ringmaster: the server runs {} (commit {}), this client {} (commit {}): upgrade the "
                             "server first, then agents and CLIs (agents may be one release behind it)\n",
                             theirs.version, theirs.git_commit, mine.version, mine.git_commit);
  }
  return 0;
}

}  // namespace ringmaster::cli
