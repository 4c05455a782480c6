// How our Status crosses into Python: a StatusError, which the module's
// translator (errors_bindings.cc) raises as jax_plugin.errors' exception
// for its code and failure kind, its text "CODE: message" as before.
#pragma once

#include <stdexcept>
#include <utility>

#include "common/status.h"

namespace myplugin::python {

// The name of `code` as PJRT and absl spell it.
const char* CodeName(Code code);

// A failed status on its way to Python: what() is its text.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status st);
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Raises the StatusError for a failed status; a no-op for OK.
void ThrowIfError(const Status& st);

template <typename T>
T ValueOrThrow(StatusOr<T> v) {
  ThrowIfError(v.status());
  return v.take();
}

}  // namespace myplugin::python
