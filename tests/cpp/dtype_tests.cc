// Element types and reductions (collectives/dtype.h): sizes and names as
// XLA spells them, both spellings parsed, and each reduction against values
// worked out by hand (wrapping integers, NaN-propagating min/max, 16-bit
// floats rounded to nearest even).
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>

#include "check.h"
#include "collectives/dtype.h"

namespace {

using namespace myplugin::collectives;

template <typename T>
T Reduce(DataType type, Reduction r, T a, T b) {
  auto fn = ReduceFunctionFor(type, r);
  CHECK(fn.ok());
  T out{};
  if (fn.ok()) fn.value()(&out, &a, &b, 1);
  return out;
}

void TestSizesAndNames() {
  CHECK(ByteSize(DataType::kPred) == 1 && ByteSize(DataType::kBF16) == 2 && ByteSize(DataType::kF32) == 4);
  CHECK(ByteSize(DataType::kC64) == 8 && ByteSize(DataType::kC128) == 16 && ByteSize(DataType::kU64) == 8);
  CHECK(std::string(Name(DataType::kBF16)) == "bf16" && std::string(Name(DataType::kC128)) == "c128");
  CHECK(std::string(Name(Reduction::kProduct)) == "product");
  // Every type's XLA name parses back to it; numpy names give the same type.
  for (int t = static_cast<int>(DataType::kPred); t <= static_cast<int>(DataType::kC128); ++t) {
    auto type = static_cast<DataType>(t);
    auto back = ParseDataType(Name(type));
    CHECK(back.ok() && back.value() == type);
  }
  CHECK(ParseDataType("float32").value() == DataType::kF32 && ParseDataType("bool").value() == DataType::kPred);
  CHECK(ParseDataType("bfloat16").value() == DataType::kBF16 && ParseDataType("complex64").value() == DataType::kC64);
  auto bad = ParseDataType("f8e4m3");
  CHECK(!bad.ok() && bad.status().code() == myplugin::Code::kInvalidArgument &&
        bad.status().message().find("f8e4m3") != std::string::npos);
  CHECK(ParseReduction("add").value() == Reduction::kSum && ParseReduction("mul").value() == Reduction::kProduct);
  auto unknown = ParseReduction("mean");
  CHECK(!unknown.ok() && unknown.status().message().find("mean") != std::string::npos);
}

void TestIntegerReductions() {
  CHECK(Reduce<int32_t>(DataType::kS32, Reduction::kSum, 40, 2) == 42);
  CHECK(Reduce<int32_t>(DataType::kS32, Reduction::kMin, -7, 3) == -7);
  CHECK(Reduce<int64_t>(DataType::kS64, Reduction::kMax, -7, 3) == 3);
  // Two's-complement wrap, as XLA computes it (no undefined behaviour).
  CHECK(Reduce<int8_t>(DataType::kS8, Reduction::kSum, 127, 1) == -128);
  CHECK(Reduce<uint8_t>(DataType::kU8, Reduction::kProduct, 16, 17) == static_cast<uint8_t>(272));
  CHECK(Reduce<int16_t>(DataType::kS16, Reduction::kProduct, 300, 300) == static_cast<int16_t>(90000 - 131072));
  CHECK(Reduce<uint64_t>(DataType::kU64, Reduction::kSum, UINT64_MAX, 2) == 1);
  // and/or belong to pred; integers refuse them.
  CHECK(!ReduceFunctionFor(DataType::kS32, Reduction::kAnd).ok());
}

void TestPredReductions() {
  CHECK(Reduce<uint8_t>(DataType::kPred, Reduction::kAnd, 1, 0) == 0);
  CHECK(Reduce<uint8_t>(DataType::kPred, Reduction::kOr, 1, 0) == 1);
  CHECK(Reduce<uint8_t>(DataType::kPred, Reduction::kMax, 0, 1) == 1);  // max is or, min is and
  CHECK(Reduce<uint8_t>(DataType::kPred, Reduction::kMin, 0, 1) == 0);
}

void TestFloatReductions() {
  CHECK(Reduce<float>(DataType::kF32, Reduction::kSum, 1.5f, 2.25f) == 3.75f);
  CHECK(Reduce<double>(DataType::kF64, Reduction::kProduct, 1.5, -4.0) == -6.0);
  // NaN wins min and max, whichever side it is on.
  CHECK(std::isnan(Reduce<float>(DataType::kF32, Reduction::kMin, NAN, 1.0f)));
  CHECK(std::isnan(Reduce<float>(DataType::kF32, Reduction::kMax, 1.0f, NAN)));
  CHECK(!ReduceFunctionFor(DataType::kF32, Reduction::kOr).ok());
}

void TestSixteenBitFloats() {
  // f16: 1.0 = 0x3c00, 2.0 = 0x4000, 3.0 = 0x4200; 65504 (0x7bff) + 65504 overflows to inf (0x7c00).
  CHECK(Reduce<uint16_t>(DataType::kF16, Reduction::kSum, 0x3c00, 0x4000) == 0x4200);
  CHECK(Reduce<uint16_t>(DataType::kF16, Reduction::kSum, 0x7bff, 0x7bff) == 0x7c00);
  // 2^-24 (0x0001, the smallest subnormal) + 2^-24 = 2^-23 (0x0002).
  CHECK(Reduce<uint16_t>(DataType::kF16, Reduction::kSum, 0x0001, 0x0001) == 0x0002);
  CHECK(Reduce<uint16_t>(DataType::kF16, Reduction::kMax, 0xbc00, 0x3c00) == 0x3c00);  // max(-1, 1)
  // bf16: 1.0 = 0x3f80; 1 + 2^-8 (0x3b80) is a tie, rounded to even (1.0).
  CHECK(Reduce<uint16_t>(DataType::kBF16, Reduction::kSum, 0x3f80, 0x3b80) == 0x3f80);
  // 1 + 3*2^-9 (0x3bc0) rounds up to 1 + 2^-7 (0x3f81).
  CHECK(Reduce<uint16_t>(DataType::kBF16, Reduction::kSum, 0x3f80, 0x3bc0) == 0x3f81);
}

void TestComplexReductions() {
  using C = std::complex<float>;
  CHECK(Reduce<C>(DataType::kC64, Reduction::kProduct, C(1, 2), C(3, 4)) == C(-5, 10));
  CHECK(Reduce<std::complex<double>>(DataType::kC128, Reduction::kSum, {1, 2}, {3, 4}) == std::complex<double>(4, 6));
  auto min = ReduceFunctionFor(DataType::kC64, Reduction::kMin);
  CHECK(!min.ok() && min.status().message().find("complex") != std::string::npos);
}

void TestManyElements() {
  int32_t a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, out[5] = {};
  ReduceFunctionFor(DataType::kS32, Reduction::kSum).value()(out, a, b, 5);
  CHECK(out[0] == 11 && out[4] == 55);
  // In place (out aliases a), as the communicators call it.
  ReduceFunctionFor(DataType::kS32, Reduction::kSum).value()(a, a, b, 5);
  CHECK(std::memcmp(a, out, sizeof(out)) == 0);
}

}  // namespace

void RunDtypeTests() {
  TestSizesAndNames();
  TestIntegerReductions();
  TestPredReductions();
  TestFloatReductions();
  TestSixteenBitFloats();
  TestComplexReductions();
  TestManyElements();
}
