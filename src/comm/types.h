// ringcomm's element types and reduction operators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ringmaster::comm {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8 };
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

size_t ElementSize(DataType t);
const char* DataTypeName(DataType t);
const char* ReduceOpName(ReduceOp op);
std::optional<DataType> ParseDataType(const std::string& s);
std::optional<ReduceOp> ParseReduceOp(const std::string& s);

// dst[i] = op(dst[i], src[i]) for i < count. kAvg reduces as kSum; call
// DivideBy once on the final result. Vectorised (AVX2 where the CPU has it).
void ReduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op);
// dst[i] /= n (integer division for integer types).
void DivideBy(void* dst, size_t count, DataType type, int n);

// bfloat16 <-> float (round to nearest even), for callers and tests.
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

}  // namespace ringmaster::comm
