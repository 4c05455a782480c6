#include "python/status_exception.h"

#include <stdexcept>
#include <string>

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

void ThrowIfError(const Status& st) {
  // Messages may carry a peer's bytes (a key, a failure reason): never let decoding them fail.
  if (!st.ok()) throw std::runtime_error(std::string(CodeName(st.code())) + ": " + PrintableUtf8(st.message()));
}

}  // namespace myplugin::python
