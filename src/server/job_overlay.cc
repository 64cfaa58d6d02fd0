// The container overlay as JobService keeps it (docs/cluster.md): each
// node's block of the overlay subnet, and the peers a node's agent tunnels
// to. Task addresses are taken in the plan (scheduler/pools.h).
#include <set>

#include <fmt/format.h>

#include "server/job_service.h"

namespace ringmaster::server {

StatusOr<int> JobService::OverlayBlockLocked(const store::Node& node) {
  // The block it had (a block stays with a node's name, also while it is
  // back on the host network, so its containers keep their addresses), else
  // the lowest one no node holds.
  RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  std::set<int> taken;
  int block = -1;
  for (const auto& n : nodes) {
    if (n.name == node.name) block = n.overlay_block;
    else if (n.overlay_block >= 0) taken.insert(n.overlay_block);
  }
  const int blocks = net::BlockCount(options_.overlay_subnet, options_.overlay_block_prefix);
  if (node.network == "host" || (block >= 0 && block < blocks && !taken.count(block))) return block;
  for (int k = 0; k < blocks; ++k) {
    if (!taken.count(k)) return k;
  }
  return ResourceExhausted(fmt::format("the overlay subnet {} has no free /{} block for node {}",
                                       net::FormatCidr(options_.overlay_subnet), options_.overlay_block_prefix,
                                       node.name));
}

StatusOr<nlohmann::json> JobService::Overlay(int64_t node_id) {
  RM_ASSIGN_OR_RETURN(store::Node self, store_->GetNode(node_id));
  auto block = net::Block(options_.overlay_subnet, options_.overlay_block_prefix, self.overlay_block);
  if (self.network == "host" || !block) return nlohmann::json();
  RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  nlohmann::json peers = nlohmann::json::array();
  // A lost node is gone for now: no tunnel to it (it keeps its block, and is
  // listed again once it is back). Until then its tasks may run on.
  for (const auto& n : nodes) {
    auto b = net::Block(options_.overlay_subnet, options_.overlay_block_prefix, n.overlay_block);
    if (n.network != self.network || !b || n.address.empty()) continue;
    if (n.id != self.id && SilentMs(n.id) > LostAfterMs(n)) continue;
    peers.push_back({{"node", n.name}, {"address", n.address}, {"block", net::FormatCidr(*b)}});
  }
  return nlohmann::json{{"mode", self.network},
                        {"subnet", net::FormatCidr(options_.overlay_subnet)},
                        {"block", net::FormatCidr(*block)},
                        {"peers", peers}};
}

}  // namespace ringmaster::server
