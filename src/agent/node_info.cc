#include "agent/node_info.h"

#include <dlfcn.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace ringmaster::agent {
namespace {

int64_t MemInfoBytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb;
  std::string unit;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == field + ":") return kb * 1024;
  }
  return 0;
}

// The few NVML entry points we need, declared here so no NVIDIA header is required.
using nvmlDevice_t = struct nvmlDevice_st*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
using NvmlInitFn = int (*)();
using NvmlCountFn = int (*)(unsigned int*);
using NvmlHandleFn = int (*)(unsigned int, nvmlDevice_t*);
using NvmlNameFn = int (*)(nvmlDevice_t, char*, unsigned int);
using NvmlMemFn = int (*)(nvmlDevice_t, NvmlMemory*);
using NvmlShutdownFn = int (*)();

}  // namespace

std::vector<GpuInfo> DetectGpus(const std::string& library) {
  std::vector<GpuInfo> gpus;
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return gpus;
  auto init = reinterpret_cast<NvmlInitFn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<NvmlCountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<NvmlHandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<NvmlNameFn>(dlsym(lib, "nvmlDeviceGetName"));
  auto uuid = reinterpret_cast<NvmlNameFn>(dlsym(lib, "nvmlDeviceGetUUID"));
  auto mem = reinterpret_cast<NvmlMemFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  auto shutdown = reinterpret_cast<NvmlShutdownFn>(dlsym(lib, "nvmlShutdown"));
  unsigned int n = 0;
  if (init && count && handle && name && mem && shutdown && init() == 0) {
    if (count(&n) == 0) {
      for (unsigned int i = 0; i < n; ++i) {
        nvmlDevice_t dev;
        if (handle(i, &dev) != 0) continue;
        GpuInfo g;
        g.index = static_cast<int>(i);
        char buf[96] = {0};
        if (name(dev, buf, sizeof buf) == 0) g.model = buf;
        char ubuf[96] = {0};
        if (uuid && uuid(dev, ubuf, sizeof ubuf) == 0) g.uuid = ubuf;
        NvmlMemory m{};
        if (mem(dev, &m) == 0) g.memory_bytes = static_cast<int64_t>(m.total);
        gpus.push_back(std::move(g));
      }
    }
    shutdown();
  }
  dlclose(lib);
  return gpus;
}

NodeInventory DetectNode() {
  NodeInventory inv;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  inv.name = host;
  inv.cpu_milli = static_cast<int64_t>(std::thread::hardware_concurrency()) * 1000;
  inv.memory_bytes = MemInfoBytes("MemTotal");
  inv.gpus = DetectGpus();
  return inv;
}

double UsageSampler::CpuUtil() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {0};
  in >> cpu;
  for (auto& x : v) in >> x;
  uint64_t idle = v[3] + v[4];
  uint64_t total = 0;
  for (int i = 0; i < 8; ++i) total += v[i];  // guest time is already in user
  double util = 0;
  if (last_total_ != 0 && total > last_total_) {
    util = 1.0 - static_cast<double>(idle - last_idle_) / static_cast<double>(total - last_total_);
  }
  last_total_ = total;
  last_idle_ = idle;
  return util < 0 ? 0 : (util > 1 ? 1 : util);
}

int64_t UsageSampler::MemoryUsedBytes() { return MemInfoBytes("MemTotal") - MemInfoBytes("MemAvailable"); }

}  // namespace ringmaster::agent
