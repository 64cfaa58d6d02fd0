#include "comm/types.h"

#include <algorithm>
#include <cstring>

namespace ringmaster::comm {
namespace {

#if defined(__FLT16_MANT_DIG__)
using Half = _Float16;
#else
// Compilers without _Float16 on this target (clang before 15 on x86-64, which
// the fuzz build uses) convert in software, rounding to nearest even.
uint16_t SoftFloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  uint32_t mant = x & 0x007fffff;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
  exp = exp - 127 + 15;
  if (exp >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x00800000;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(h);
}
float SoftHalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  if (exp == 0 && mant == 0) {
    x = sign;
  } else if (exp == 0) {  // subnormal
    exp = 127 - 15 + 1;
    while (!(mant & 0x400)) {
      mant <<= 1;
      --exp;
    }
    x = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000 | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
struct Half {
  uint16_t bits;
  Half() = default;
  explicit Half(float f) : bits(SoftFloatToHalf(f)) {}
  explicit operator float() const { return SoftHalfToFloat(bits); }
};
#endif

inline float Bf16ToF(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t FToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

struct Sum {
  template <typename T>
  T operator()(T a, T b) const { return a + b; }
};
struct Prod {
  template <typename T>
  T operator()(T a, T b) const { return a * b; }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const { return b < a ? b : a; }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const { return a < b ? b : a; }
};

template <typename T, typename F>
inline void Loop(T* __restrict d, const T* __restrict s, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(f(d[i], s[i]));
}

// Half and bfloat16 reduce in float, as NCCL and Gloo do.
template <typename F>
inline void LoopHalf(Half* __restrict d, const Half* __restrict s, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<Half>(f(static_cast<float>(d[i]), static_cast<float>(s[i])));
}
template <typename F>
inline void LoopBf16(uint16_t* __restrict d, const uint16_t* __restrict s, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) d[i] = FToBf16(f(Bf16ToF(d[i]), Bf16ToF(s[i])));
}

// AVX2 and baseline clones, picked by an ifunc resolver at load time. Not
// under ThreadSanitizer: the instrumented resolver runs during relocation,
// before the TSan runtime is up, and crashes.
#if defined(__SANITIZE_THREAD__)
#define RM_CLONES
#else
#define RM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif

#define RM_KERNELS(NAME, F)                                                                          \
  RM_CLONES void NAME##F32(void* d, const void* s, size_t n) { Loop((float*)d, (const float*)s, n, F{}); } \
  RM_CLONES void NAME##F64(void* d, const void* s, size_t n) { Loop((double*)d, (const double*)s, n, F{}); } \
  RM_CLONES void NAME##F16(void* d, const void* s, size_t n) { LoopHalf((Half*)d, (const Half*)s, n, F{}); } \
  RM_CLONES void NAME##BF16(void* d, const void* s, size_t n) { LoopBf16((uint16_t*)d, (const uint16_t*)s, n, F{}); } \
  RM_CLONES void NAME##I32(void* d, const void* s, size_t n) { Loop((int32_t*)d, (const int32_t*)s, n, F{}); } \
  RM_CLONES void NAME##I64(void* d, const void* s, size_t n) { Loop((int64_t*)d, (const int64_t*)s, n, F{}); } \
  RM_CLONES void NAME##U8(void* d, const void* s, size_t n) { Loop((uint8_t*)d, (const uint8_t*)s, n, F{}); }

RM_KERNELS(Sum, Sum)
RM_KERNELS(Prod, Prod)
RM_KERNELS(Min, Min)
RM_KERNELS(Max, Max)

using Kernel = void (*)(void*, const void*, size_t);

#define RM_ROW(NAME) {NAME##F32, NAME##F64, NAME##F16, NAME##BF16, NAME##I32, NAME##I64, NAME##U8}
const Kernel kKernels[4][7] = {RM_ROW(Sum), RM_ROW(Prod), RM_ROW(Min), RM_ROW(Max)};

// Reducing in blocks keeps the destination in L1/L2 while it is worked on.
constexpr size_t kBlockBytes = 64 << 10;

}  // namespace

size_t ElementSize(DataType t) {
  switch (t) {
    case DataType::kFloat32: case DataType::kInt32: return 4;
    case DataType::kFloat64: case DataType::kInt64: return 8;
    case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kUInt8: return 1;
  }
  return 1;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
  }
  return "?";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "?";
}

std::optional<DataType> ParseDataType(const std::string& s) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kInt32, DataType::kInt64, DataType::kUInt8}) {
    if (s == DataTypeName(t)) return t;
  }
  return std::nullopt;
}

std::optional<ReduceOp> ParseReduceOp(const std::string& s) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    if (s == ReduceOpName(op)) return op;
  }
  return std::nullopt;
}

void ReduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op) {
  int row = op == ReduceOp::kProduct ? 1 : op == ReduceOp::kMin ? 2 : op == ReduceOp::kMax ? 3 : 0;
  Kernel k = kKernels[row][static_cast<int>(type)];
  const size_t es = ElementSize(type), block = kBlockBytes / es;
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  for (size_t i = 0; i < count; i += block) {
    size_t n = std::min(block, count - i);
    k(d + i * es, s + i * es, n);
  }
}

void DivideBy(void* dst, size_t count, DataType type, int n) {
  switch (type) {
    case DataType::kFloat32: { auto* p = static_cast<float*>(dst); for (size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n); break; }
    case DataType::kFloat64: { auto* p = static_cast<double*>(dst); for (size_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DataType::kFloat16: { auto* p = static_cast<Half*>(dst); for (size_t i = 0; i < count; ++i) p[i] = static_cast<Half>(static_cast<float>(p[i]) / n); break; }
    case DataType::kBFloat16: { auto* p = static_cast<uint16_t*>(dst); for (size_t i = 0; i < count; ++i) p[i] = FToBf16(Bf16ToF(p[i]) / n); break; }
    case DataType::kInt32: { auto* p = static_cast<int32_t*>(dst); for (size_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DataType::kInt64: { auto* p = static_cast<int64_t*>(dst); for (size_t i = 0; i < count; ++i) p[i] /= n; break; }
    case DataType::kUInt8: { auto* p = static_cast<uint8_t*>(dst); for (size_t i = 0; i < count; ++i) p[i] = static_cast<uint8_t>(p[i] / n); break; }
  }
}

uint16_t FloatToBFloat16(float f) { return FToBf16(f); }
float BFloat16ToFloat(uint16_t b) { return Bf16ToF(b); }
uint16_t FloatToHalf(float f) {
  Half h = static_cast<Half>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float HalfToFloat(uint16_t u) {
  Half h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

}  // namespace ringmaster::comm
