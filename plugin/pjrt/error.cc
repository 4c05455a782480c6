#include "pjrt/error.h"

#include <string>

#include "pjrt/entry_point.h"

namespace myplugin {

PJRT_Error* ToPjrtError(Status status) {
  if (status.ok()) return nullptr;
  return new PJRT_Error{std::move(status)};
}

void PjrtErrorDestroy(PJRT_Error_Destroy_Args* args) {
  delete args->error;
}

void PjrtErrorMessage(PJRT_Error_Message_Args* args) {
  const std::string& m = args->error->status.message();
  args->message = m.data();
  args->message_size = m.size();
}

PJRT_Error* CheckArgsSize(const char* entry, const void* args, size_t given, size_t needed) {
  if (args == nullptr) return ToPjrtError(InvalidArgument(std::string(entry) + ": the arguments struct is null"));
  if (given >= needed) return nullptr;
  return ToPjrtError(InvalidArgument(
      std::string(entry) + ": the caller's arguments struct is " + std::to_string(given) + " bytes, but the PJRT C API " +
      std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR) + " that myplugin was built with needs " +
      std::to_string(needed) + ": the caller was built against an older PJRT C API than myplugin supports"));
}

PJRT_Error* PjrtErrorGetCode(PJRT_Error_GetCode_Args* args) {
  args->code = static_cast<PJRT_Error_Code>(args->error->status.code());
  return nullptr;
}

}  // namespace myplugin
