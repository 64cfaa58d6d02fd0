#include "common/build_info.h"

#include "protocol/agent.h"
#include "common/version.h"  // generated: the only file that includes it

namespace ringmaster {
namespace {

std::string Compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

// Debian's architecture names, as `dpkg --print-architecture` says them.
std::string Platform() {
#if defined(__x86_64__)
  return "linux/amd64";
#elif defined(__aarch64__)
  return "linux/arm64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return "linux/ppc64el";
#elif defined(__s390x__)
  return "linux/s390x";
#else
  return "linux/unknown";
#endif
}

std::string Field(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

const BuildInfo& ThisBuild() {
  static const BuildInfo info{kVersion, kGitCommit, Compiler(), Platform(), protocol::kAgentProtocol,
                                protocol::kMinAgentProtocol};
  return info;
}

nlohmann::json BuildInfoJson(const BuildInfo& b) {
  return {{"version", b.version},   {"git_commit", b.git_commit},         {"compiler", b.compiler},
          {"platform", b.platform}, {"agent_protocol", b.agent_protocol}, {"min_agent_protocol", b.min_agent_protocol}};
}

BuildInfo BuildInfoFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return {};
  auto number = [&j](const char* name) {
    auto it = j.find(name);
    return it != j.end() && it->is_number_integer() ? it->get<int>() : 0;
  };
  return {Field(j, "version"),  Field(j, "git_commit"),    Field(j, "compiler"),
          Field(j, "platform"), number("agent_protocol"), number("min_agent_protocol")};
}

}  // namespace ringmaster
