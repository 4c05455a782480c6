// The element types and reductions that collectives carry. Names follow
// XLA's primitive types (pred, s8 … c128), which is also how the FFI
// handlers will receive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace myplugin::collectives {

enum class DataType : uint8_t {
  kPred = 1, kS8, kS16, kS32, kS64, kU8, kU16, kU32, kU64, kF16, kBF16, kF32, kF64, kC64, kC128,
};

enum class Reduction : uint8_t { kNone = 0, kSum, kProduct, kMin, kMax, kAnd, kOr };

size_t ByteSize(DataType type);
const char* Name(DataType type);
const char* Name(Reduction reduction);
// Accepts XLA names (f32) and numpy names (float32).
StatusOr<DataType> ParseDataType(const std::string& name);
StatusOr<Reduction> ParseReduction(const std::string& name);

// out[i] = a[i] (op) b[i] for `count` elements; the signature gloo's
// allreduce takes. INVALID_ARGUMENT for a reduction the type lacks (and/or
// on floats, min/max on complex numbers).
using ReduceFunction = void (*)(void* out, const void* a, const void* b, size_t count);
StatusOr<ReduceFunction> ReduceFunctionFor(DataType type, Reduction reduction);

}  // namespace myplugin::collectives
