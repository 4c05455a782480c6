#include "pjrt/ffi_extension.h"

#include <string>

#include "pjrt/client.h"
#include "pjrt/engine_instance.h"
#include "pjrt/error.h"

namespace myplugin {
namespace {

StatusOr<const FfiExtension*> EngineFfi() {
  MYPLUGIN_RETURN_IF_ERROR(EnsureEngineLoaded());
  PJRT_Extension_Base* ext = Engine().FindExtension(PJRT_Extension_Type_FFI);
  if (ext == nullptr) {
    return Unimplemented("the XLA engine (" + Engine().path() + ") has no FFI extension: custom calls cannot run");
  }
  return reinterpret_cast<const FfiExtension*>(ext);
}

PJRT_Error* TypeIdRegister(void* args) {
  StatusOr<const FfiExtension*> ffi = EngineFfi();
  if (!ffi.ok()) return ToPjrtError(ffi.status());
  return ToPjrtError(Engine().Consume(ffi.value()->type_id_register(args)));
}

PJRT_Error* UserDataAdd(void* args) {
  StatusOr<const FfiExtension*> ffi = EngineFfi();
  if (!ffi.ok()) return ToPjrtError(ffi.status());
  return ToPjrtError(Engine().Consume(ffi.value()->user_data_add(args)));
}

PJRT_Error* RegisterHandler(FfiRegisterHandlerArgs* args) {
  if (args->struct_size < kFfiRegisterHandlerArgsSize) {
    return ToPjrtError(InvalidArgument("PJRT_FFI_Register_Handler_Args is too small (" +
                                       std::to_string(args->struct_size) + " bytes)"));
  }
  StatusOr<const FfiExtension*> ffi = EngineFfi();
  if (!ffi.ok()) return ToPjrtError(ffi.status());
  if (ffi.value()->base.struct_size < sizeof(FfiExtension) || ffi.value()->register_handler == nullptr) {
    return ToPjrtError(Unimplemented("the XLA engine's FFI extension cannot register handlers"));
  }
  std::string platform(args->platform_name, args->platform_name_size);
  if (platform == kPlatformName) platform = EngineFfiPlatform();
  FfiRegisterHandlerArgs engine_args = *args;
  engine_args.struct_size = kFfiRegisterHandlerArgsSize;
  engine_args.platform_name = platform.data();
  engine_args.platform_name_size = platform.size();
  return ToPjrtError(Engine().Consume(ffi.value()->register_handler(&engine_args)));
}

}  // namespace

// XLA's CPU engine runs custom calls on platform "Host", its CUDA engine on "CUDA".
const char* EngineFfiPlatform() { return CurrentEngineKind() == EngineKind::kCuda ? "CUDA" : "Host"; }

PJRT_Extension_Base* OurFfiExtension() {
  static FfiExtension extension = [] {
    FfiExtension e{};
    e.base.struct_size = sizeof(FfiExtension);
    e.base.type = PJRT_Extension_Type_FFI;
    e.base.next = nullptr;
    e.type_id_register = TypeIdRegister;
    e.user_data_add = UserDataAdd;
    e.register_handler = RegisterHandler;
    return e;
  }();
  return &extension.base;
}

}  // namespace myplugin
