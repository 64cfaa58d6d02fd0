// What this binary is: the project's version and the commit it was built
// from (cmake/version.cmake), the compiler and the platform. The server
// answers it at GET /api/v1/version, `ringmaster version` prints it and the
// agent registers with it. Thread-safe (constants).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ringmaster {

struct BuildInfo {
  std::string version;     // "0.2.0"
  std::string git_commit;  // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown"
  std::string compiler;    // "gcc 12.2.0"
  std::string platform;    // "linux/amd64"
  // The agent protocol (protocol/agent.h): an agent speaks
  // agent_protocol, a server serves min_agent_protocol to agent_protocol.
  // 0: not said (a build from before protocols had numbers).
  int agent_protocol = 0;
  int min_agent_protocol = 0;
};

const BuildInfo& ThisBuild();

// {"version", "git_commit", "compiler", "platform", "agent_protocol", "min_agent_protocol"}.
nlohmann::json BuildInfoJson(const BuildInfo& b);
// From such an object (another binary's, e.g. the server's); a field that is
// missing or not a string reads as "".
BuildInfo BuildInfoFromJson(const nlohmann::json& j);

}  // namespace ringmaster
