#include "agent/node/node_info.h"

#include <dlfcn.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
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
using NvmlMinorFn = int (*)(nvmlDevice_t, unsigned int*);

// A GPU's index as the agent's executor knows it: its device node's minor
// number (/dev/nvidiaN), which is not always NVML's enumeration order; that
// order where the driver does not say.
int GpuIndex(void* lib, nvmlDevice_t dev, unsigned int position) {
  auto minor = reinterpret_cast<NvmlMinorFn>(dlsym(lib, "nvmlDeviceGetMinorNumber"));
  unsigned int m = 0;
  if (minor && minor(dev, &m) == 0 && m < 1024) return static_cast<int>(m);
  return static_cast<int>(position);
}

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
        g.index = GpuIndex(lib, dev, i);
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

NodeInventory DetectNode(const std::string& nvml) {
  NodeInventory inv;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  inv.name = host;
  inv.cpu_milli = static_cast<int64_t>(std::thread::hardware_concurrency()) * 1000;
  inv.memory_bytes = MemInfoBytes("MemTotal");
  inv.gpus = DetectGpus(nvml);
  return inv;
}

// NVML kept open for sampling: the library, its entry points and the devices.
struct NodeSampler::Nvml {
  struct Utilization {
    unsigned int gpu, memory;
  };
  void* lib = nullptr;
  int (*shutdown)() = nullptr;
  int (*util)(nvmlDevice_t, Utilization*) = nullptr;
  int (*mem)(nvmlDevice_t, NvmlMemory*) = nullptr;
  int (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  int (*temp)(nvmlDevice_t, int, unsigned int*) = nullptr;
  std::vector<std::pair<int, nvmlDevice_t>> devices;  // (index, handle)
  ~Nvml() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

NodeSampler::NodeSampler(std::string data_dir, const std::string& nvml) : data_dir_(std::move(data_dir)) {
  void* lib = dlopen(nvml.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  auto n = std::make_unique<Nvml>();
  n->lib = lib;
  auto init = reinterpret_cast<NvmlInitFn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<NvmlCountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<NvmlHandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  n->util = reinterpret_cast<decltype(n->util)>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
  n->mem = reinterpret_cast<NvmlMemFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  n->power = reinterpret_cast<decltype(n->power)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
  n->temp = reinterpret_cast<decltype(n->temp)>(dlsym(lib, "nvmlDeviceGetTemperature"));
  if (!init || !count || !handle || !n->util || init() != 0) return;  // closes the library: no GPUs sampled
  n->shutdown = reinterpret_cast<NvmlShutdownFn>(dlsym(lib, "nvmlShutdown"));
  unsigned int c = 0;
  if (count(&c) == 0) {
    for (unsigned int i = 0; i < c && i < 64; ++i) {
      nvmlDevice_t dev;
      if (handle(i, &dev) == 0) n->devices.emplace_back(GpuIndex(lib, dev, i), dev);
    }
  }
  nvml_ = std::move(n);
}

NodeSampler::~NodeSampler() = default;

int64_t NodeSampler::MemoryUsedBytes() { return MemInfoBytes("MemTotal") - MemInfoBytes("MemAvailable"); }

protocol::NodeSample NodeSampler::Sample(int64_t now_ms) {
  protocol::NodeSample s;
  s.t_ms = now_ms;
  const double dt = last_ms_ > 0 && now_ms > last_ms_ ? static_cast<double>(now_ms - last_ms_) / 1000.0 : 0;
  {
    std::ifstream in("/proc/stat");
    std::string cpu;
    uint64_t v[10] = {0};
    in >> cpu;
    for (auto& x : v) in >> x;
    const uint64_t idle = v[3] + v[4];
    uint64_t total = 0;
    for (int i = 0; i < 8; ++i) total += v[i];  // guest time is already in user
    if (last_total_ != 0 && total > last_total_) {
      s.cpu = 1.0 - static_cast<double>(idle - last_idle_) / static_cast<double>(total - last_total_);
      s.cpu = s.cpu < 0 ? 0 : (s.cpu > 1 ? 1 : s.cpu);
    }
    last_total_ = total;
    last_idle_ = idle;
  }
  s.memory_used_bytes = std::max<int64_t>(0, MemoryUsedBytes());
  if (struct statvfs fs; statvfs(data_dir_.c_str(), &fs) == 0) {
    s.disk_used_bytes = static_cast<int64_t>((fs.f_blocks - fs.f_bfree) * fs.f_frsize);
  }
  auto rate = [dt](uint64_t now, uint64_t& last) {
    const double r = dt > 0 && now >= last ? static_cast<double>(now - last) / dt : 0;
    last = now;
    return r;
  };
  {
    // Whole block devices only (a partition's sectors are its disk's too).
    std::ifstream in("/proc/diskstats");
    uint64_t read = 0, written = 0;
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      unsigned major, minor;
      std::string name;
      uint64_t x[10] = {0};
      if (!(f >> major >> minor >> name)) continue;
      for (auto& v : x) f >> v;
      if (access(("/sys/block/" + name).c_str(), F_OK) != 0 || name.rfind("loop", 0) == 0 || name.rfind("ram", 0) == 0) continue;
      read += x[2] * 512;
      written += x[6] * 512;
    }
    s.disk_read_bps = rate(read, last_read_);
    s.disk_write_bps = rate(written, last_written_);
  }
  {
    std::ifstream in("/proc/net/dev");
    uint64_t rx = 0, tx = 0;
    for (std::string line; std::getline(in, line);) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      name.erase(0, name.find_first_not_of(' '));
      if (name == "lo") continue;
      std::istringstream f(line.substr(colon + 1));
      uint64_t v[9] = {0};
      for (auto& x : v) f >> x;
      rx += v[0];
      tx += v[8];
    }
    s.net_rx_bps = rate(rx, last_rx_);
    s.net_tx_bps = rate(tx, last_tx_);
  }
  last_ms_ = now_ms;
  if (nvml_) {
    for (const auto& [index, dev] : nvml_->devices) {
      protocol::GpuSample g;
      g.index = index;
      Nvml::Utilization u{};
      if (nvml_->util(dev, &u) != 0) continue;
      g.util = std::min(1.0, u.gpu / 100.0);
      if (NvmlMemory m{}; nvml_->mem && nvml_->mem(dev, &m) == 0) g.memory_used_bytes = static_cast<int64_t>(m.used);
      if (unsigned mw = 0; nvml_->power && nvml_->power(dev, &mw) == 0) g.power_w = mw / 1000.0;
      if (unsigned c = 0; nvml_->temp && nvml_->temp(dev, 0 /* NVML_TEMPERATURE_GPU */, &c) == 0) g.temperature_c = c;
      s.gpus.push_back(g);
    }
  }
  return s;
}

}  // namespace ringmaster::agent
