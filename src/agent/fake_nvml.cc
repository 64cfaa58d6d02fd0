// A stand-in for libnvidia-ml.so.1 with the same C ABI for the entry points
// the agent uses: two "NVIDIA H200" devices with 141 GiB each. Built only
// for node_info_test.
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
  m->free = m->total;
  m->used = 0;
  return 0;
}
}
