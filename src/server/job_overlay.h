// The container overlay as JobService keeps it (docs/cluster.md): which
// gangs join a node's overlay, and the addresses their tasks get there.
// The blocks of nodes and the peer lists are JobService's methods
// (RegisterNode, Overlay), defined in job_overlay.cc. Split from job_service.cc.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "net/ipv4.h"
#include "protocol/job_spec.h"
#include "store/meta_store.h"

namespace ringmaster::server {

// Whether a gang of `spec` placed on `nodes` (one per task) joins their
// container overlay: an image run by runc (the runtime the overlay
// attaches), unless the job asked for the host's network or none, and only
// if every node is on the same overlay (ranks split between an overlay and
// a host network, or two overlays, could not reach each other).
bool GangJoinsOverlay(const protocol::JobSpec& spec, const std::vector<const store::Node*>& nodes);

// Task addresses on the overlay during one scheduling pass: the lowest one
// of a node's block that no placed task there holds.
class OverlayAddresses {
 public:
  OverlayAddresses(net::Ipv4Net subnet, int block_prefix, const std::vector<store::Task>& placed);
  // "" when the node has no block or its block is full.
  std::string Take(const store::Node& node);
  // Gives back what Take gave (a gang that is not placed after all); "" is ignored.
  void Give(int64_t node_id, const std::string& address);

 private:
  net::Ipv4Net subnet_;
  int block_prefix_;
  std::map<int64_t, std::set<uint32_t>> used_;
};

}  // namespace ringmaster::server
