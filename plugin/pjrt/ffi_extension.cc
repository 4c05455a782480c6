#include "pjrt/ffi_extension.h"

#include <atomic>
#include <string>

#include "common/log.h"
#include "engine/ffi_api_version.h"
#include "engine/ffi_handler_adapter.h"
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

// Reads the engine's FFI API version once, by registering the probe on the
// platform of the first handler (ffi_api_version.h).
ProbedEngineFfi ProbeEngine(const FfiExtension* ffi, const FfiRegisterHandlerArgs& like) {
  static std::atomic<bool> probed{false};
  if (!probed.exchange(true)) {
    FfiRegisterHandlerArgs probe = like;
    probe.target_name = kFfiProbeTarget;
    probe.target_name_size = sizeof(kFfiProbeTarget) - 1;
    probe.handler = FfiProbeHandler();
    probe.traits = 0;
    Status status = Engine().Consume(ffi->register_handler(&probe));
    if (!ProbedEngine().known) {
      LogLine("myplugin: warning: the engine (" + Engine().path() +
              ") did not show its XLA FFI API version to a handler at registration" +
              (status.ok() ? std::string() : " (" + status.message() + ")") +
              "; FFI handlers are registered without a version check");
    }
  }
  return ProbedEngine();
}

// The handler the engine gets for `args`: the caller's, an adapter of it,
// or an error for a version pair nobody has shown to work. The engine's own
// refusal of a version would be lost on the way (its FFI extension drops
// it), so the decision is made here, before it.
StatusOr<void*> HandlerForEngine(const FfiExtension* ffi, const FfiRegisterHandlerArgs& args) {
  ProbedEngineFfi engine = ProbeEngine(ffi, args);
  if (!engine.known) return args.handler;
  std::string target(args.target_name, args.target_name_size);
  StatusOr<FfiApiVersion> version = HandlerFfiApiVersion(args.handler, engine.api);
  if (!version.ok()) return InvalidArgument("FFI target '" + target + "': " + version.status().message());
  StatusOr<FfiRegistrationPlan> plan = PlanFfiRegistration(target, version.value(), engine.version);
  if (!plan.ok()) return plan.status();
  if (!plan.value().adapt) return args.handler;
  return AdaptFfiHandler(args.handler, plan.value().report);
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
  StatusOr<void*> handler = HandlerForEngine(ffi.value(), engine_args);
  if (!handler.ok()) return ToPjrtError(handler.status());
  engine_args.handler = handler.value();
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
