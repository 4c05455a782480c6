#include "python/status_exception.h"

#include <string>
#include <utility>

#include "common/printable.h"

namespace myplugin::python {

const char* CodeName(Code code) {
  static const char* names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? names[i] : "UNKNOWN";
}

// Messages may carry a peer's bytes (a key, a failure reason): never let decoding them fail.
StatusError::StatusError(Status st)
    : std::runtime_error(std::string(CodeName(st.code())) + ": " + PrintableUtf8(st.message())),
      status_(std::move(st)) {}

void ThrowIfError(const Status& st) {
  if (!st.ok()) throw StatusError(st);
}

}  // namespace myplugin::python
