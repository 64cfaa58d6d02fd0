// The scheduler's extension points, one small interface each, registered by
// name (like the Kubernetes scheduler framework's Filter and Score plugins):
//
//   Filter  may one replica of a job go on this node? If not, why, in words.
//           Built in: health, gpu-type, labels, executor, resources.
//   Score   how good is this node for the next replica, in [0, 1]; a
//           profile weighs several. Built in: binpack, spread, load-aware
//           (low measured CPU/GPU/memory use first) and locality (a gang
//           on as few hosts as possible).
//
// Plugins are stateless and thread-safe; a registry maps names to factories.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "scheduler/scheduler.h"

namespace ringmaster::scheduler {

class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  virtual std::string_view Name() const = 0;
  // A static filter looks only at node facts that do not change within a pass
  // (health, GPU model, labels): the scheduler evaluates it once per distinct
  // job constraint, not once per replica.
  virtual bool Static() const = 0;
  virtual bool Pass(const NodeState& node, const JobRequest& job) const = 0;
  // Why Pass is false, e.g. "node a has no a100 gpus (it has Tesla V100)".
  virtual std::string Reject(const NodeState& node, const JobRequest& job) const = 0;
};

// What a score plugin knows about the gang being placed.
struct GangState {
  int remaining = 0;     // replicas still to place, this one included
  int already_here = 0;  // replicas of this gang already on the node
};

class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  virtual std::string_view Name() const = 0;
  // In [0, 1], higher is better. REQUIRES: the replica fits on `node`.
  virtual double Score(const NodeState& node, const JobRequest& job, const GangState& gang) const = 0;
};

using FilterFactory = std::function<std::unique_ptr<FilterPlugin>()>;
using ScoreFactory = std::function<std::unique_ptr<ScorePlugin>()>;

// Registration is for startup (not thread-safe against concurrent Make*).
void RegisterFilter(const std::string& name, FilterFactory factory);
void RegisterScore(const std::string& name, ScoreFactory factory);
// NotFound naming the known plugins.
StatusOr<std::unique_ptr<FilterPlugin>> MakeFilter(const std::string& name);
StatusOr<std::unique_ptr<ScorePlugin>> MakeScore(const std::string& name);
std::vector<std::string> FilterNames();
std::vector<std::string> ScoreNames();

// Shared by the filters and the scheduler.
bool GpuTypeMatches(const std::string& gpu_model, const std::string& type);
inline Resources Free(const NodeState& n) {
  return {n.capacity.cpu_milli - n.allocated.cpu_milli, n.capacity.memory_bytes - n.allocated.memory_bytes,
          n.capacity.gpus - n.allocated.gpus};
}
inline bool Fits(const Resources& have, const Resources& need) {
  return have.cpu_milli >= need.cpu_milli && have.memory_bytes >= need.memory_bytes && have.gpus >= need.gpus;
}

// 1 - the node's measured use (0..1) once `already_here` replicas of the
// job are added to it: the larger of CPU and memory, and of GPUs when the
// job asks for them. What the load-aware score and measured-use placement rank by.
double MeasuredHeadroom(const NodeState& n, const JobRequest& job, int already_here);

}  // namespace ringmaster::scheduler
