// What an agent tells the server about its node: inventory at registration
// (CPU cores, memory, GPUs by model and memory through NVML, loaded with
// dlopen so a node without the NVIDIA driver needs nothing) and, every
// second, what it uses (NodeSampler: CPU, memory, disk, network, each GPU's
// utilisation, memory, power and temperature). NodeSampler is not
// thread-safe; the rest is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/samples.h"

namespace ringmaster::agent {

struct GpuInfo {
  int index = 0;
  std::string model;
  int64_t memory_bytes = 0;
  std::string uuid;
};

struct NodeInventory {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<GpuInfo> gpus;
};

NodeInventory DetectNode(const std::string& nvml = "libnvidia-ml.so.1");
// Empty when the NVML library is absent or reports no devices. `library` is
// the NVIDIA driver's by default; tests pass a fake with the same ABI.
std::vector<GpuInfo> DetectGpus(const std::string& library = "libnvidia-ml.so.1");

// Samples the node: rates (CPU, disk and network bytes per second) are over
// the time since the previous Sample, so the first one reads them as 0.
class NodeSampler {
 public:
  // `data_dir`: whose file system's use is reported. `nvml`: as DetectGpus.
  explicit NodeSampler(std::string data_dir, const std::string& nvml = "libnvidia-ml.so.1");
  ~NodeSampler();
  NodeSampler(const NodeSampler&) = delete;
  NodeSampler& operator=(const NodeSampler&) = delete;

  protocol::NodeSample Sample(int64_t now_ms);
  static int64_t MemoryUsedBytes();

 private:
  struct Nvml;
  const std::string data_dir_;
  std::unique_ptr<Nvml> nvml_;
  uint64_t last_total_ = 0, last_idle_ = 0;
  int64_t last_ms_ = 0;
  uint64_t last_read_ = 0, last_written_ = 0, last_rx_ = 0, last_tx_ = 0;
};

}  // namespace ringmaster::agent
