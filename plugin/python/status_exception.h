// How our Status crosses into Python: a RuntimeError whose message starts
// with the code's name ("NOT_FOUND: ..."), which jax_plugin and the tests
// match on.
#pragma once

#include <utility>

#include "common/status.h"

namespace myplugin::python {

// The name of `code` as PJRT and absl spell it.
const char* CodeName(Code code);

// Raises the RuntimeError for a failed status; a no-op for OK.
void ThrowIfError(const Status& st);

template <typename T>
T ValueOrThrow(StatusOr<T> v) {
  ThrowIfError(v.status());
  return v.take();
}

}  // namespace myplugin::python
