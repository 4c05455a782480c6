// The XLA FFI binding of a target of the collective table
// (collective_table.h): after the contexts an engine's handler takes first,
// its operands and results by their form, then its attributes by the
// table's keys and types. A handler whose parameters disagree with its
// table entry does not compile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "collectives/collective_table.h"
#include "xla/ffi/api/ffi.h"

namespace myplugin::collectives {

// The C++ type a handler receives for an attribute of each type.
template <AttrType type>
struct FfiAttr;
template <>
struct FfiAttr<AttrType::kString> { using type = std::string_view; };
template <>
struct FfiAttr<AttrType::kI64> { using type = int64_t; };
template <>
struct FfiAttr<AttrType::kI64Array> { using type = xla::ffi::Span<const int64_t>; };

// A binding cannot be copied or moved into a parameter (xla::ffi::Binding),
// only extended: each step takes the one before by reference and returns
// the next as a temporary.
template <const CollectiveTarget& target, size_t i = 0, typename Binding>
auto BindAttributes(Binding&& binding) {
  using T = typename FfiAttr<target.attributes[i]->type>::type;
  auto next = [&] { return std::move(binding).template Attr<T>(target.attributes[i]->key); };
  if constexpr (i + 1 == target.attribute_count()) {
    return next();
  } else {
    return BindAttributes<target, i + 1>(next());
  }
}

template <const CollectiveTarget& target, typename Binding>
auto BindOperands(Binding&& leading) {
  if constexpr (target.operands == Operands::kAnyNumber) {
    static_assert(target.results == Results::kOnePerOperand, "a call of any number of operands has one result each");
    return std::move(leading).RemainingArgs().RemainingRets();
  } else if constexpr (target.operands == Operands::kOne) {
    return std::move(leading).template Arg<xla::ffi::AnyBuffer>().RemainingArgs().template Ret<xla::ffi::AnyBuffer>();
  } else if constexpr (target.operands == Operands::kRagged) {
    using xla::ffi::AnyBuffer;
    return std::move(leading)
        .template Arg<AnyBuffer>()
        .template Arg<AnyBuffer>()
        .template Arg<AnyBuffer>()
        .template Arg<AnyBuffer>()
        .template Arg<AnyBuffer>()
        .template Arg<AnyBuffer>()
        .RemainingArgs()
        .template Ret<AnyBuffer>();
  } else {
    static_assert(target.results == Results::kOne, "a call of no operands has one result");
    return std::move(leading).template Ret<xla::ffi::AnyBuffer>();
  }
}

// The binding of `target`'s handler, after `leading` (ffi::Ffi::Bind() and
// the contexts the handler takes first).
template <const CollectiveTarget& target, typename Binding>
auto Bind(Binding&& leading) {
  if constexpr (target.attribute_count() == 0) {
    return BindOperands<target>(std::move(leading));
  } else {
    return BindAttributes<target>(BindOperands<target>(std::move(leading)));
  }
}

}  // namespace myplugin::collectives
