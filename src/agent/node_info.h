// What an agent tells the server about its node: inventory at registration
// (CPU cores, memory, GPUs by model and memory through NVML, loaded with
// dlopen so a node without the NVIDIA driver needs nothing) and utilisation
// with every heartbeat. UsageSampler is not thread-safe; the rest is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

NodeInventory DetectNode();
// Empty when the NVML library is absent or reports no devices. `library` is
// the NVIDIA driver's by default; tests pass a fake with the same ABI.
std::vector<GpuInfo> DetectGpus(const std::string& library = "libnvidia-ml.so.1");

// CPU utilisation (0..1) between consecutive calls, from /proc/stat.
class UsageSampler {
 public:
  double CpuUtil();
  static int64_t MemoryUsedBytes();

 private:
  uint64_t last_total_ = 0, last_idle_ = 0;
};

}  // namespace ringmaster::agent
