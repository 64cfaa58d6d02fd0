// Shared by the benchmark workers: size lists, medians, result lines.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ringmaster::bench {

// "4K:256M" -> 4K, 8K, ..., 256M (x2 steps, like nccl-tests -f 2); "1M" -> {1M}.
inline bool ParseSizes(const std::string& spec, std::vector<size_t>* out) {
  auto one = [](const std::string& s, size_t* v) {
    if (s.empty()) return false;
    char unit = s.back();
    size_t mult = 1;
    std::string num = s;
    if (unit == 'K' || unit == 'k') mult = 1 << 10;
    else if (unit == 'M' || unit == 'm') mult = 1 << 20;
    else if (unit == 'G' || unit == 'g') mult = 1 << 30;
    if (mult != 1) num.pop_back();
    try {
      *v = std::stoull(num) * mult;
    } catch (...) {
      return false;
    }
    return *v > 0;
  };
  auto colon = spec.find(':');
  size_t lo, hi;
  if (!one(spec.substr(0, colon), &lo)) return false;
  hi = lo;
  if (colon != std::string::npos && !one(spec.substr(colon + 1), &hi)) return false;
  if (hi < lo) return false;
  for (size_t s = lo; s <= hi; s *= 2) out->push_back(s);
  return true;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The line every worker's rank 0 prints; the driver collects them.
inline void PrintResult(const char* impl, const char* algorithm, int ranks, size_t bytes, double time_us) {
  std::printf("RESULT %s %s %d %zu %.3f\n", impl, algorithm, ranks, bytes, time_us);
  std::fflush(stdout);
}

// Inputs that sum exactly in float: rank r, element i.
inline float Input(int rank, size_t i) { return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 3) % 5); }
inline float Expected(int ranks, size_t i) {
  float s = 0;
  for (int r = 0; r < ranks; ++r) s += Input(r, i);
  return s;
}

}  // namespace ringmaster::bench
