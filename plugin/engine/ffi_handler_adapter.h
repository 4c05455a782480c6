// A handler registered through an adapter: the adapter forwards every call
// to the handler unchanged, except that in the engine's metadata call it
// reports the engine's FFI API version in place of the handler's. Used only
// for the pairs of ffi_api_version.h marked `adapted`, where the handler is
// newer than the engine and known not to read past what the engine gives.
//
// An XLA_FFI_Handler is a bare function pointer, with no place for state,
// so each adapter is its own function: a fixed pool of them, one per
// handler, handed out once and never reused (the engine keeps the pointer
// for the life of the process).
#pragma once

#include <cstddef>

#include "common/status.h"
#include "engine/ffi_api_version.h"

namespace myplugin {

// The pool's size: jaxlib 0.12 needs 65 for its CPU handlers; the rest is
// for a program's own handlers.
inline constexpr size_t kFfiAdapterSlots = 1024;

// The adapter for `handler` (an XLA_FFI_Handler*), reporting `reported` in
// metadata calls. The same handler gets the same adapter every time, so a
// second registration of a name is the same registration for the engine.
// An error when the pool is spent, or when the handler was already adapted
// to report another version.
StatusOr<void*> AdaptFfiHandler(void* handler, FfiApiVersion reported);

// Adapters handed out so far.
size_t FfiAdaptersInUse();

}  // namespace myplugin
