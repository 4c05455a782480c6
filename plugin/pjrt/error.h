// PJRT_Error is our Status on the C side. Engine errors never reach jax as
// they are: every forwarded call converts them (EngineLibrary::Consume), so
// PJRT_Error_Destroy/Message/GetCode only ever see our own objects.
#pragma once

#include "common/status.h"
#include "pjrt_c_api.h"

struct PJRT_Error {
  myplugin::Status status;
};

namespace myplugin {

// nullptr for OK, else a new PJRT_Error that jax must destroy.
PJRT_Error* ToPjrtError(Status status);

void PjrtErrorDestroy(PJRT_Error_Destroy_Args* args);
void PjrtErrorMessage(PJRT_Error_Message_Args* args);
PJRT_Error* PjrtErrorGetCode(PJRT_Error_GetCode_Args* args);

}  // namespace myplugin
