#include "pjrt/error.h"

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

PJRT_Error* PjrtErrorGetCode(PJRT_Error_GetCode_Args* args) {
  args->code = static_cast<PJRT_Error_Code>(args->error->status.code());
  return nullptr;
}

}  // namespace myplugin
