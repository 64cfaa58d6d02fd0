#include "net/task_filter.h"

#include <unistd.h>

#include <fmt/format.h>

#include "common/files.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "net/nft.h"

namespace ringmaster::net {
namespace {

StatusOr<std::string> AddressSet(const std::vector<std::string>& addrs, const char* field) {
  std::string out;
  for (const std::string& a : addrs) {
    if (!ParseIpv4(a)) return InvalidArgument(fmt::format("{}: \"{}\" is not an IPv4 address", field, a));
    out += (out.empty() ? "" : ", ") + a;
  }
  return out;
}

}  // namespace

ToolRunner DefaultToolRunner() {
  return [](const std::vector<std::string>& argv) { return RunTool(argv); };
}

StatusOr<std::vector<AllowRule>> ParseAllowList(const std::string& text) {
  std::vector<AllowRule> out;
  for (std::string item : Split(text, ',')) {
    if (item.empty()) continue;
    AllowRule r;
    if (size_t colon = item.find(':'); colon != std::string::npos) {
      const std::string port = item.substr(colon + 1);
      r.port = std::atoi(port.c_str());
      if (r.port <= 0 || r.port > 65535 || std::to_string(r.port) != port) {
        return InvalidArgument(fmt::format("--task-allow: \"{}\" has no port 1-65535 after ':'", item));
      }
      item = item.substr(0, colon);
    }
    if (item.find('/') == std::string::npos) item += "/32";
    auto net = ParseCidr(item);
    if (!net.ok()) return InvalidArgument("--task-allow: " + net.status().message());
    r.net = *net;
    out.push_back(r);
  }
  return out;
}

StatusOr<std::string> FilterRuleset(const FilterRules& r) {
  RM_ASSIGN_OR_RETURN(std::string peers, AddressSet(r.peers, "peers"));
  RM_ASSIGN_OR_RETURN(std::string deny, AddressSet(r.deny, "deny"));
  std::string s;
  // Declared then deleted: the script replaces a table of an earlier attempt
  // whole, and runs on a namespace that never had one too.
  s += "table inet ringmaster {}\ndelete table inet ringmaster\ntable inet ringmaster {\n";
  s += "  chain input {\n    type filter hook input priority 0; policy drop;\n";
  s += "    iif \"lo\" accept\n    ct state established,related accept\n";
  if (!peers.empty()) s += fmt::format("    ip saddr {{ {} }} accept\n", peers);
  s += "  }\n";
  s += "  chain output {\n    type filter hook output priority 0; policy accept;\n";
  s += "    oif \"lo\" accept\n    ct state established,related accept\n";
  if (!peers.empty()) s += fmt::format("    ip daddr {{ {} }} accept\n", peers);
  for (const AllowRule& a : r.allow) {
    if (a.port == 0) {
      s += fmt::format("    ip daddr {} accept\n", FormatCidr(a.net));
    } else {
      s += fmt::format("    ip daddr {} meta l4proto {{ tcp, udp }} th dport {} accept\n", FormatCidr(a.net), a.port);
    }
  }
  if (!deny.empty()) s += fmt::format("    ip daddr {{ {} }} drop\n", deny);
  s += "  }\n";
  if (!r.own.empty() && !r.node.empty()) {
    if (!ParseIpv4(r.own) || !ParseIpv4(r.node)) return InvalidArgument("own/node: not IPv4 addresses");
    s += "  chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n";
    s += fmt::format("    ip daddr {} dnat ip to {}\n  }}\n", r.own, r.node);
  }
  s += "}\n";
  return s;
}

Status InstallFilter(const FilterRules& rules) {
  RM_ASSIGN_OR_RETURN(std::string text, FilterRuleset(rules));
  // A context works on the namespace of the thread that made it.
  RM_ASSIGN_OR_RETURN(auto nft, Nft::Create());
  return nft->Run(text, "installing the task network's filter").status();
}

Status ApplyFilter(const std::string& netns, const FilterRules& rules, const std::string& script,
                   const ToolRunner& run) {
  RM_ASSIGN_OR_RETURN(std::string text, FilterRuleset(rules));
  RM_RETURN_IF_ERROR(WriteFileAtomic(script, text, 0600));
  Status st = run({"nsenter", "--net=" + netns, "--", "nft", "-f", script}).status();
  ::unlink(script.c_str());
  if (!st.ok()) return Internal("installing the task network's filter: " + st.message());
  return Status::Ok();
}

}  // namespace ringmaster::net
