#include "collectives/dtype.h"

#include <complex>
#include <cstring>
#include <type_traits>

namespace myplugin::collectives {
namespace {

template <typename To, typename From>
To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

// 16-bit floats are reduced in float and rounded back to nearest-even, so
// that results match what XLA computes element by element.
struct Half {
  static float ToFloat(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
      if (mant == 0) {
        bits = sign;
      } else {  // subnormal: normalize
        exp = 127 - 15 + 1;
        while ((mant & 0x400) == 0) {
          mant <<= 1;
          --exp;
        }
        mant &= 0x3ff;
        bits = sign | (exp << 23) | (mant << 13);
      }
    } else if (exp == 0x1f) {
      bits = sign | 0x7f800000u | (mant << 13);
    } else {
      bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    return BitCast<float>(bits);
  }
  static uint16_t FromFloat(float f) {
    uint32_t x = BitCast<uint32_t>(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (absx < 0x38800000u) {  // subnormal or zero in half
      float a = BitCast<float>(absx);
      // Scale so that the half subnormal unit is 1, round to nearest even.
      float scaled = a * 16777216.0f;  // 2^24
      uint32_t m = static_cast<uint32_t>(scaled);
      float rem = scaled - static_cast<float>(m);
      if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
      return static_cast<uint16_t>(sign | m);
    }
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 127 + 15;
    uint32_t half = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
};

struct BFloat16 {
  static float ToFloat(uint16_t h) { return BitCast<float>(static_cast<uint32_t>(h) << 16); }
  static uint16_t FromFloat(float f) {
    uint32_t x = BitCast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
    uint32_t lsb = (x >> 16) & 1;
    return static_cast<uint16_t>((x + 0x7fff + lsb) >> 16);
  }
};

template <typename T, typename Op>
void Apply(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) o[i] = op(x[i], y[i]);
}

template <typename Codec, typename Op>
void Apply16(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) o[i] = Codec::FromFloat(op(Codec::ToFloat(x[i]), Codec::ToFloat(y[i])));
}

struct Add { template <typename T> T operator()(T a, T b) const { return a + b; } };
struct Mul { template <typename T> T operator()(T a, T b) const { return a * b; } };
// NaN propagates, as in XLA's min/max.
struct Min {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? b : a;
  }
};
struct And { uint8_t operator()(uint8_t a, uint8_t b) const { return (a && b) ? 1 : 0; } };
struct Or { uint8_t operator()(uint8_t a, uint8_t b) const { return (a || b) ? 1 : 0; } };
// For wrapping integer arithmetic without undefined behaviour.
struct AddU { template <typename T> T operator()(T a, T b) const {
  using U = std::make_unsigned_t<T>; return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); } };
struct MulU { template <typename T> T operator()(T a, T b) const {
  using U = std::make_unsigned_t<T>;
  using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
  return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)))); } };

template <typename T>
StatusOr<ReduceFunction> ForNumber(Reduction r) {
  switch (r) {
    case Reduction::kSum:
      if constexpr (std::is_integral_v<T>) return &Apply<T, AddU>; else return &Apply<T, Add>;
    case Reduction::kProduct:
      if constexpr (std::is_integral_v<T>) return &Apply<T, MulU>; else return &Apply<T, Mul>;
    case Reduction::kMin: return &Apply<T, Min>;
    case Reduction::kMax: return &Apply<T, Max>;
    default: return InvalidArgument(std::string("reduction '") + Name(r) + "' is for pred only");
  }
}

template <typename Codec>
StatusOr<ReduceFunction> For16(Reduction r) {
  switch (r) {
    case Reduction::kSum: return &Apply16<Codec, Add>;
    case Reduction::kProduct: return &Apply16<Codec, Mul>;
    case Reduction::kMin: return &Apply16<Codec, Min>;
    case Reduction::kMax: return &Apply16<Codec, Max>;
    default: return InvalidArgument(std::string("reduction '") + Name(r) + "' is for pred only");
  }
}

template <typename C>
StatusOr<ReduceFunction> ForComplex(Reduction r) {
  if (r == Reduction::kSum) return &Apply<C, Add>;
  if (r == Reduction::kProduct) return &Apply<C, Mul>;
  return InvalidArgument(std::string("reduction '") + Name(r) + "' is not defined for complex numbers");
}

}  // namespace

size_t ByteSize(DataType t) {
  switch (t) {
    case DataType::kPred: case DataType::kS8: case DataType::kU8: return 1;
    case DataType::kS16: case DataType::kU16: case DataType::kF16: case DataType::kBF16: return 2;
    case DataType::kS32: case DataType::kU32: case DataType::kF32: return 4;
    case DataType::kS64: case DataType::kU64: case DataType::kF64: case DataType::kC64: return 8;
    case DataType::kC128: return 16;
  }
  return 0;
}

const char* Name(DataType t) {
  switch (t) {
    case DataType::kPred: return "pred";
    case DataType::kS8: return "s8";
    case DataType::kS16: return "s16";
    case DataType::kS32: return "s32";
    case DataType::kS64: return "s64";
    case DataType::kU8: return "u8";
    case DataType::kU16: return "u16";
    case DataType::kU32: return "u32";
    case DataType::kU64: return "u64";
    case DataType::kF16: return "f16";
    case DataType::kBF16: return "bf16";
    case DataType::kF32: return "f32";
    case DataType::kF64: return "f64";
    case DataType::kC64: return "c64";
    case DataType::kC128: return "c128";
  }
  return "?";
}

const char* Name(Reduction r) {
  switch (r) {
    case Reduction::kNone: return "none";
    case Reduction::kSum: return "sum";
    case Reduction::kProduct: return "product";
    case Reduction::kMin: return "min";
    case Reduction::kMax: return "max";
    case Reduction::kAnd: return "and";
    case Reduction::kOr: return "or";
  }
  return "?";
}

StatusOr<DataType> ParseDataType(const std::string& n) {
  static const std::pair<const char*, DataType> names[] = {
      {"pred", DataType::kPred}, {"bool", DataType::kPred},     {"s8", DataType::kS8},
      {"int8", DataType::kS8},   {"s16", DataType::kS16},       {"int16", DataType::kS16},
      {"s32", DataType::kS32},   {"int32", DataType::kS32},     {"s64", DataType::kS64},
      {"int64", DataType::kS64}, {"u8", DataType::kU8},         {"uint8", DataType::kU8},
      {"u16", DataType::kU16},   {"uint16", DataType::kU16},    {"u32", DataType::kU32},
      {"uint32", DataType::kU32}, {"u64", DataType::kU64},      {"uint64", DataType::kU64},
      {"f16", DataType::kF16},   {"float16", DataType::kF16},   {"bf16", DataType::kBF16},
      {"bfloat16", DataType::kBF16}, {"f32", DataType::kF32},   {"float32", DataType::kF32},
      {"f64", DataType::kF64},   {"float64", DataType::kF64},   {"c64", DataType::kC64},
      {"complex64", DataType::kC64}, {"c128", DataType::kC128}, {"complex128", DataType::kC128},
  };
  for (const auto& [name, type] : names) {
    if (n == name) return type;
  }
  return InvalidArgument("collectives do not support element type '" + n + "'");
}

StatusOr<Reduction> ParseReduction(const std::string& n) {
  static const std::pair<const char*, Reduction> names[] = {
      {"sum", Reduction::kSum}, {"add", Reduction::kSum}, {"product", Reduction::kProduct},
      {"mul", Reduction::kProduct}, {"min", Reduction::kMin}, {"max", Reduction::kMax},
      {"and", Reduction::kAnd}, {"or", Reduction::kOr},
  };
  for (const auto& [name, r] : names) {
    if (n == name) return r;
  }
  return InvalidArgument("unknown reduction '" + n + "' (sum, product, min, max, and, or)");
}

StatusOr<ReduceFunction> ReduceFunctionFor(DataType t, Reduction r) {
  switch (t) {
    case DataType::kPred:
      if (r == Reduction::kAnd || r == Reduction::kMin || r == Reduction::kProduct) return &Apply<uint8_t, And>;
      if (r == Reduction::kOr || r == Reduction::kMax || r == Reduction::kSum) return &Apply<uint8_t, Or>;
      return InvalidArgument("bad reduction for pred");
    case DataType::kS8: return ForNumber<int8_t>(r);
    case DataType::kS16: return ForNumber<int16_t>(r);
    case DataType::kS32: return ForNumber<int32_t>(r);
    case DataType::kS64: return ForNumber<int64_t>(r);
    case DataType::kU8: return ForNumber<uint8_t>(r);
    case DataType::kU16: return ForNumber<uint16_t>(r);
    case DataType::kU32: return ForNumber<uint32_t>(r);
    case DataType::kU64: return ForNumber<uint64_t>(r);
    case DataType::kF16: return For16<Half>(r);
    case DataType::kBF16: return For16<BFloat16>(r);
    case DataType::kF32: return ForNumber<float>(r);
    case DataType::kF64: return ForNumber<double>(r);
    case DataType::kC64: return ForComplex<std::complex<float>>(r);
    case DataType::kC128: return ForComplex<std::complex<double>>(r);
  }
  return InvalidArgument("unknown element type");
}

}  // namespace myplugin::collectives
