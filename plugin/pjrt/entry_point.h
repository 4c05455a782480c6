// One gate in front of every entry point in our PJRT_Api table: the
// caller's args struct must be present and at least as large as the header
// we were built against says, before any field of it is read. This is the
// rule of XLA's own C API wrapper (an older caller's smaller struct is an
// error, a newer caller's larger one is fine), applied to every entry
// alike, ours and the engine's: a forwarded call reads jax's struct too
// (to swap in the engine's objects) before the engine could check it.
//
// PJRT_Error_Destroy and PJRT_Error_Message are the two exceptions: they
// return nothing, so they cannot report a short struct.
#pragma once

#include <cstddef>

#include "pjrt/error.h"

namespace myplugin {

// nullptr when `args` is non-null and `given` >= `needed`; else the error,
// naming the entry point and both sizes.
PJRT_Error* CheckArgsSize(const char* entry, const void* args, size_t given, size_t needed);

}  // namespace myplugin

// A function for the PJRT_Api slot `name` that checks the args struct and
// then calls `impl`.
#define MYPLUGIN_ENTRY_POINT(name, impl)                                                        \
  [](name##_Args* args) -> PJRT_Error* {                                                        \
    if (args == nullptr || args->struct_size < name##_Args_STRUCT_SIZE) {                       \
      return ::myplugin::CheckArgsSize(#name, args, args ? args->struct_size : 0,               \
                                       name##_Args_STRUCT_SIZE);                                \
    }                                                                                           \
    return impl(args);                                                                          \
  }
