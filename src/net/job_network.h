// A job's own network on a node (docs/cluster.md, "A job's network"): one
// namespace per job attempt on bridge rmtask0, the node's address on its
// loopback, its ports forwarded there, task_filter.h's filter inside. Built
// in-process as root (only Setup and Recover run tools). Thread-safe: jobs'
// namespaces are made and removed concurrently, outside the lock.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "net/ipv4.h"
#include "net/nft.h"
#include "net/task_filter.h"

namespace ringmaster::net {

inline constexpr const char* kTaskBridge = "rmtask0";
inline constexpr const char* kTaskTable = "ringmaster_tasks";  // the host's: table ip

struct JobNetworkOptions {
  Ipv4Net subnet;            // agent --task-subnet (10.213.0.0/16); .1 is the bridge's
  std::string node_address;  // where other nodes reach this node's tasks
  std::string state_dir;     // where the namespaces are bound (the agent's data dir)
  std::vector<std::string> deny;  // the node's other addresses and the server's
  std::vector<AllowRule> allow;   // agent --task-allow
  // Ephemeral ports handed out in blocks, one per namespace, forwarded to it
  // (listeners on port 0: ringcomm's pairs, gloo's). Outside the node's task range.
  int ephemeral_lo = 40000, ephemeral_hi = 47999, ephemeral_block = 256;
  // Addresses and port blocks are claimed here, one file each (O_EXCL), so
  // agents sharing a host's bridge (tests run several) never pick the same.
  std::string registry_dir = "/run/ringmaster/task-network";
};

class JobNetwork {
 public:
  explicit JobNetwork(JobNetworkOptions options, ToolRunner run = DefaultToolRunner());
  // With no namespace left (every task ended), the state dir's private mount
  // goes too, so the agent's data dir can be removed; tasks that outlive the
  // agent keep theirs for the next one to adopt.
  ~JobNetwork();
  const JobNetworkOptions& options() const { return o_; }

  // The bridge, the host's NAT table and forwarding; idempotent. The
  // namespaces an earlier agent left are taken back, with no tasks: Adopt
  // gives them their re-adopted tasks, Sweep removes the rest.
  Status Setup();
  // Task `key` (re-adopted by a restarted agent) is in namespace `name`.
  void Adopt(const std::string& key, const std::string& name);
  void Sweep();
  // Task `key` (of job `job`, attempt `attempt`, at node port `port`) joins
  // its job's namespace, made with the first; `peers` are the addresses the
  // job's tasks on other nodes come from. Returns the namespace's path.
  StatusOr<std::string> Join(int64_t job, int attempt, const std::string& key, int port,
                             const std::vector<std::string>& peers);
  // The task has ended: its port is no longer forwarded; the last task of a
  // namespace removes it. Idempotent.
  void Leave(const std::string& key);

  static std::string Name(int64_t job, int attempt);
  // The host side of a namespace's veth: "rj" + 13 hex digits of its path.
  static std::string VethName(const std::string& path);

 private:
  struct Namespace {
    // Made (and removed) outside the lock; a task of its job arriving
    // meanwhile waits on `changed` for it (or for it to be gone), not for
    // other jobs. GUARDED_BY(mu_).
    enum class State { kCreating, kReady, kRemoving, kGone } state = State::kCreating;
    std::condition_variable changed;
    // Fixed once reserved: read without the lock.
    std::string path;
    uint32_t address = 0;
    // Index of its forwarded ephemeral port block; -1: none (its tasks use the
    // whole ephemeral range, forwarded nowhere). Set at Reserve, or under mu_
    // when a peer on another node first appears (then `opening`).
    int block = -1;
    // GUARDED_BY(mu_):
    // A join is opening its block or rewriting its filter for new peers: the
    // job's other tasks wait on `changed` before they start.
    bool opening = false;
    std::set<std::string> keys;
    std::set<std::string> peers;
    std::map<std::string, int> ports;  // key -> its forwarded port
    bool recovered = false;            // an earlier agent's: its forwarded ports are unknown
    // Held while its filter is rewritten, so that the last write has every peer.
    std::mutex filter_mu;
  };
  using NamespacePtr = std::shared_ptr<Namespace>;
  // REQUIRES: mu_ held.
  void Recover(const std::string& name);
  // Chooses the namespace's address (and a port block when `block`: only a
  // job that spans nodes needs its listeners forwarded) and enters it in
  // nets_ as being created. REQUIRES: mu_ held.
  StatusOr<NamespacePtr> Reserve(const std::string& name, bool block);
  // Claims a free ephemeral port block for `ns`; false when all are in use.
  // REQUIRES: mu_ held.
  bool ClaimBlock(Namespace& ns);
  // Forwards `ns`'s block to it and makes it the namespace's own port range.
  Status OpenBlock(const Namespace& ns);
  // The kernel's part, without mu_.
  Status Build(const Namespace& ns, int bridge, const FilterRules& rules);
  void Teardown(const Namespace& ns);
  // Forgets a namespace removed (or never built): its claims, its entry.
  // REQUIRES: mu_ held.
  void Release(const std::string& name, const NamespacePtr& ns);
  // Its filter, as the peers are now. REQUIRES: mu_ held.
  FilterRules Rules(const Namespace& ns) const;
  Status Refilter(Namespace& ns);
  // Claims "<what>-<index>" in the registry for namespace `path`; false
  // when another live namespace holds it.
  bool Claim(const std::string& what, int64_t index, const std::string& path);
  void Unclaim(const std::string& what, int64_t index, const std::string& path);
  // The node's map: `ports` ("P" or "LO-HI"), TCP and UDP, to `address`,
  // for task `key` ("" for a port block). An element left by an agent that
  // ended uncleanly is replaced. Unforward leaves a port another key holds.
  Status Forward(const std::string& ports, uint32_t address, const std::string& key);
  void Unforward(const std::string& ports, uint32_t address, const std::string& key);
  // Every port forwarded to `address` (a recovered namespace's).
  void UnforwardAll(uint32_t address);
  // REQUIRES: host_mu_ held.
  StatusOr<std::string> HostNft(const std::string& commands, const std::string& what);
  std::pair<int, int> BlockPorts(int block) const;

  JobNetworkOptions o_;
  ToolRunner run_;
  std::mutex mu_;
  std::map<std::string, NamespacePtr> nets_;  // GUARDED_BY(mu_), by name
  std::map<std::string, std::string> owner_;  // GUARDED_BY(mu_): task key -> namespace name
  bool mounted_ = false;                      // GUARDED_BY(mu_): Setup made the state dir's private mount
  int bridge_ = 0;                            // GUARDED_BY(mu_): the bridge's ifindex
  // The node's table through one context (not thread-safe); it is also
  // where a port's holder is known, so a late Leave never unforwards a port
  // the server has handed to a newer task.
  std::mutex host_mu_;
  std::unique_ptr<Nft> host_nft_;          // GUARDED_BY(host_mu_)
  std::map<std::string, std::string> forwarded_;  // GUARDED_BY(host_mu_): node port -> task key
};

}  // namespace ringmaster::net
