// A stand-in for libnvidia-ml.so.1 with the same C ABI for the entry points
// the agent uses: two "NVIDIA H200" devices with 141 GiB each, busy at
// $FAKE_NVML_UTIL percent (default 0: idle), 1 GiB used, 70 W, 35 C. For
// node_info_test and the e2e tests of GPU jobs.
#include <cstdlib>
#include <cstring>

extern "C" {
struct FakeDevice {
  unsigned int index;
};
static FakeDevice devices[2] = {{0}, {1}};
struct NvmlMemory {
  unsigned long long total, free, used;
};

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, FakeDevice** d) {
  if (i >= 2) return 2;
  *d = &devices[i];
  return 0;
}
int nvmlDeviceGetName(FakeDevice*, char* buf, unsigned int len) {
  std::strncpy(buf, "NVIDIA H200", len);
  return 0;
}
int nvmlDeviceGetUUID(FakeDevice* d, char* buf, unsigned int len) {
  std::strncpy(buf, d->index == 0 ? "GPU-aaaa" : "GPU-bbbb", len);
  return 0;
}
int nvmlDeviceGetMemoryInfo(FakeDevice*, NvmlMemory* m) {
  m->total = 141ULL << 30;
  m->used = 1ULL << 30;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetMinorNumber(FakeDevice* d, unsigned int* minor) {
  *minor = d->index;
  return 0;
}
struct NvmlUtilization {
  unsigned int gpu, memory;
};
int nvmlDeviceGetUtilizationRates(FakeDevice*, NvmlUtilization* u) {
  const char* v = std::getenv("FAKE_NVML_UTIL");
  u->gpu = v ? static_cast<unsigned>(std::atoi(v)) : 0;
  u->memory = u->gpu;
  return 0;
}
int nvmlDeviceGetPowerUsage(FakeDevice*, unsigned int* mw) {
  *mw = 70000;
  return 0;
}
int nvmlDeviceGetTemperature(FakeDevice*, int, unsigned int* c) {
  *c = 35;
  return 0;
}
}
