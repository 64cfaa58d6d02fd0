// The nftables filter inside a task's network namespace (docs/cluster.md, "A
// job's network"): in only from the job's peers, out not to the node or the
// server unless allowed; installed by root from outside. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/ipv4.h"

namespace ringmaster::net {

// Runs a tool (argv[0] on PATH) and returns its stdout: RunTool by default,
// a recorder in tests (the golden commands each operation runs).
using ToolRunner = std::function<StatusOr<std::string>(const std::vector<std::string>&)>;
ToolRunner DefaultToolRunner();

// One entry of the site's allow list (agent --task-allow): a network, and
// optionally one TCP/UDP port of it.
struct AllowRule {
  Ipv4Net net;
  int port = 0;  // 0 = every port
  bool operator==(const AllowRule&) const = default;
};
// "10.0.0.0/8,192.168.1.5:443" (an address alone is a /32); "" = none.
StatusOr<std::vector<AllowRule>> ParseAllowList(const std::string& text);

struct FilterRules {
  std::vector<std::string> peers;  // IPv4 addresses the job's other tasks come from
  std::vector<std::string> deny;   // the node's addresses, the gateway, the server
  std::vector<AllowRule> allow;    // the site's exceptions to `deny`
  // Host-network nodes: connections forwarded to `own` (the namespace's
  // address) are handed to `node` (the node's address, on the namespace's
  // loopback), where a task listening on RINGMASTER_ADDR waits.
  std::string own, node;
};

// The `nft -f` script: one table (inet ringmaster), replaced whole.
// InvalidArgument naming the field for an address that is not IPv4.
StatusOr<std::string> FilterRuleset(const FilterRules& rules);
// Installs it in the calling thread's network namespace, in-process.
Status InstallFilter(const FilterRules& rules);
// Installs it in the namespace at `netns` (a path: /proc/PID/ns/net or a
// bind mount), through `script` (a file written for nft, then removed): for
// a hook process, off any per-job path.
Status ApplyFilter(const std::string& netns, const FilterRules& rules, const std::string& script,
                   const ToolRunner& run);

}  // namespace ringmaster::net
