// A node's resources by identity (its ports, GPU indices and overlay
// addresses), which the scheduler takes inside a gang's all-or-none
// placement so that a gang refused for one never shapes the rest of the
// plan. The filters here say per node why a replica finds none. Pure functions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "scheduler/plugins.h"
#include "scheduler/scheduler.h"

namespace ringmaster::scheduler {

// Whether a replica of `job` on `node` takes one of its overlay addresses
// (if the whole gang joins: GangJoinsOverlay).
bool TakesAddress(const NodeState& node, const JobRequest& job);
// Whether a gang on `nodes` (one per replica) joins their overlay: it asks
// to, and every node is on one overlay whose agent runs its containers.
bool GangJoinsOverlay(const std::vector<const NodeState*>& nodes, const JobRequest& job);
// The lowest free port, GPU indices and (where TakesAddress) address, taken.
// REQUIRES: the pool filters pass for `node`.
ReplicaSlot TakeSlot(NodeState& node, const JobRequest& job);
// Gives back what TakeSlot took (a gang not placed after all).
void GiveSlot(NodeState& node, const ReplicaSlot& slot);
// Takes exactly `slot` again (a running job's, put back in a what-if).
void HoldSlot(NodeState& node, const ReplicaSlot& slot);
// Gives back the address only (a gang that does not join the overlay).
void GiveAddress(NodeState& node, ReplicaSlot& slot);

// The pool filters, in the order a refused gang's reason is looked for:
// "ports", "gpu-index", "overlay-address". Every scheduler runs them.
std::vector<std::unique_ptr<FilterPlugin>> MakePoolFilters();
// What a gang refused by pool filter k waits for: "waiting for ports: ...".
std::string PoolWaitPrefix(size_t k);
// Why a gang needing the overlay is refused although each node passes.
inline constexpr const char* kSplitOverlay = "the gang's nodes are not all on one overlay (agents' --network differ)";

}  // namespace ringmaster::scheduler
