#include "scheduler/pools.h"

#include <algorithm>

#include <fmt/format.h>

namespace ringmaster::scheduler {
namespace {

int FreePorts(const NodeState& n) {
  const int lo = std::max(1, n.port_lo);
  if (n.port_hi < lo) return 0;
  auto used = std::distance(n.ports_used.lower_bound(lo), n.ports_used.upper_bound(n.port_hi));
  return n.port_hi - lo + 1 - static_cast<int>(used);
}

int FreeGpuIndices(const NodeState& n) {
  auto used = std::distance(n.gpus_used.lower_bound(0), n.gpus_used.lower_bound(n.capacity.gpus));
  return n.capacity.gpus - static_cast<int>(used);
}

int FreeAddresses(const NodeState& n) {
  auto used = std::distance(n.addresses_used.lower_bound(n.address_first),
                            n.addresses_used.lower_bound(n.address_first + static_cast<uint32_t>(n.address_count)));
  return n.address_count - static_cast<int>(used);
}

bool RunsRunc(const NodeState& n, const JobRequest& job) {
  if (job.executors.size() == 1 && job.executors[0] == "runc") return true;  // pinned: the executor filter checks
  return std::find(n.executors.begin(), n.executors.end(), "runc") != n.executors.end();
}

// A node with a port range gives each replica one port of it.
class PortsFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "ports"; }
  bool Static() const override { return false; }
  bool Pass(const NodeState& n, const JobRequest&) const override { return n.port_hi < n.port_lo || FreePorts(n) > 0; }
  std::string Reject(const NodeState& n, const JobRequest&) const override {
    return fmt::format("node {} has no free port in {}-{}", n.name, n.port_lo, n.port_hi);
  }
};

// Two tasks never share a GPU: each takes its own indices.
class GpuIndexFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "gpu-index"; }
  bool Static() const override { return false; }
  bool Pass(const NodeState& n, const JobRequest& job) const override {
    return !n.gpu_indices || job.per_task.gpus <= 0 || FreeGpuIndices(n) >= job.per_task.gpus;
  }
  std::string Reject(const NodeState& n, const JobRequest& job) const override {
    return fmt::format("node {} has no {} free GPUs", n.name, job.per_task.gpus);
  }
};

class OverlayAddressFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "overlay-address"; }
  bool Static() const override { return false; }
  bool Pass(const NodeState& n, const JobRequest& job) const override {
    return !TakesAddress(n, job) || FreeAddresses(n) > 0;
  }
  std::string Reject(const NodeState& n, const JobRequest&) const override {
    return fmt::format("node {} has no free overlay address", n.name);
  }
};

}  // namespace

bool TakesAddress(const NodeState& n, const JobRequest& job) {
  return job.joins_overlay && n.overlay && RunsRunc(n, job);
}

bool GangJoinsOverlay(const std::vector<const NodeState*>& nodes, const JobRequest& job) {
  if (nodes.empty()) return false;
  return std::all_of(nodes.begin(), nodes.end(), [&](const NodeState* n) {
    return TakesAddress(*n, job) && n->overlay_network == nodes[0]->overlay_network;
  });
}

ReplicaSlot TakeSlot(NodeState& n, const JobRequest& job) {
  ReplicaSlot s;
  for (int port = std::max(1, n.port_lo); port <= n.port_hi; ++port) {
    if (n.ports_used.insert(port).second) {
      s.port = port;
      break;
    }
  }
  for (int g = 0; n.gpu_indices && g < n.capacity.gpus && static_cast<int>(s.gpus.size()) < job.per_task.gpus; ++g) {
    if (n.gpus_used.insert(g).second) s.gpus.push_back(g);
  }
  for (int i = 0; TakesAddress(n, job) && i < n.address_count; ++i) {
    if (n.addresses_used.insert(n.address_first + static_cast<uint32_t>(i)).second) {
      s.address = n.address_first + static_cast<uint32_t>(i);
      break;
    }
  }
  return s;
}

void GiveAddress(NodeState& n, ReplicaSlot& s) {
  if (s.address != 0) n.addresses_used.erase(s.address);
  s.address = 0;
}

void HoldSlot(NodeState& n, const ReplicaSlot& s) {
  if (s.port != 0) n.ports_used.insert(s.port);
  n.gpus_used.insert(s.gpus.begin(), s.gpus.end());
  if (s.address != 0) n.addresses_used.insert(s.address);
}

void GiveSlot(NodeState& n, const ReplicaSlot& s) {
  if (s.port != 0) n.ports_used.erase(s.port);
  for (int g : s.gpus) n.gpus_used.erase(g);
  if (s.address != 0) n.addresses_used.erase(s.address);
}

std::vector<std::unique_ptr<FilterPlugin>> MakePoolFilters() {
  std::vector<std::unique_ptr<FilterPlugin>> out;
  out.push_back(std::make_unique<PortsFilter>());
  out.push_back(std::make_unique<GpuIndexFilter>());
  out.push_back(std::make_unique<OverlayAddressFilter>());
  return out;
}

std::string PoolWaitPrefix(size_t k) {
  static const char* const kPrefixes[] = {"waiting for ports: ", "waiting for GPUs: ", "waiting for the overlay: "};
  return k < 3 ? kPrefixes[k] : "";
}

}  // namespace ringmaster::scheduler
