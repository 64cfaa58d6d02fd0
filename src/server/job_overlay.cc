#include "server/job_overlay.h"

#include <fmt/format.h>

#include "server/job_service.h"

namespace ringmaster::server {

bool GangJoinsOverlay(const protocol::JobSpec& spec, const std::vector<const store::Node*>& nodes) {
  if (spec.image.empty() || nodes.empty()) return false;
  if (!spec.network.empty() && spec.network != "overlay") return false;
  if (!spec.executor.empty() && spec.executor != "runc") return false;
  for (const store::Node* n : nodes) {
    if (n->network == "host" || n->overlay_block < 0 || n->network != nodes[0]->network) return false;
    if (spec.executor.empty() && ("," + n->executors + ",").find(",runc,") == std::string::npos) return false;
  }
  return true;
}

OverlayAddresses::OverlayAddresses(net::Ipv4Net subnet, int block_prefix, const std::vector<store::Task>& placed)
    : subnet_(subnet), block_prefix_(block_prefix) {
  for (const store::Task& t : placed) {
    if (auto a = net::ParseIpv4(t.overlay_ip)) used_[t.node_id].insert(*a);
  }
}

std::string OverlayAddresses::Take(const store::Node& node) {
  auto block = net::Block(subnet_, block_prefix_, node.overlay_block);
  for (int i = 2; block; ++i) {
    auto a = net::TaskAddress(*block, i);
    if (!a) break;
    if (used_[node.id].insert(*a).second) return net::FormatIpv4(*a);
  }
  return "";
}

void OverlayAddresses::Give(int64_t node_id, const std::string& address) {
  if (auto a = net::ParseIpv4(address)) used_[node_id].erase(*a);
}

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
