#include "pjrt/ffi_extension.h"

#include <string>

#include "collectives/process_runtime.h"
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

}  // namespace

StatusOr<void*> VersionCheckedHandler(const EngineLibrary& engine, const FfiExtension* engine_ffi,
                                      EngineFfiProbe& probe, const FfiRegisterHandlerArgs& args) {
  if (!probe.tried) {
    probe.tried = true;
    FfiRegisterHandlerArgs probe_args = args;
    probe_args.target_name = kFfiProbeTarget;
    probe_args.target_name_size = sizeof(kFfiProbeTarget) - 1;
    probe_args.handler = FfiProbeHandler();
    probe_args.traits = 0;
    PJRT_Error* error = engine_ffi->register_handler(&probe_args);
    probe.seen = TakeProbedEngine();
    if (error != nullptr || !probe.seen.known) {
      LogLine("myplugin: warning: the engine (" + engine.path() +
              ") did not show its XLA FFI API version to a handler at registration" +
              (error == nullptr ? std::string() : " (its registration failed)") +
              "; FFI handlers are registered on it without a version check");
    }
    // An engine that fails here fails the real registration too, with its
    // message; this one is only freed.
    if (error != nullptr) (void)engine.Consume(error);
  }
  if (!probe.seen.known) return args.handler;
  std::string target(args.target_name, args.target_name_size);
  StatusOr<FfiApiVersion> version = HandlerFfiApiVersion(args.handler, probe.seen.api);
  if (!version.ok()) return InvalidArgument("FFI target '" + target + "': " + version.status().message());
  StatusOr<FfiRegistrationPlan> plan = PlanFfiRegistration(target, version.value(), probe.seen.version);
  if (!plan.ok()) return plan.status();
  if (!plan.value().adapt) return args.handler;
  return AdaptFfiHandler(args.handler, plan.value().report);
}

namespace {

// The running engine's FFI, probed on the first registration.
struct RunningEngineProbe {
  EngineFfiProbe probe;
};

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
  EngineFfiProbe& probe = collectives::ProcessRuntime::Get().Attached<RunningEngineProbe>().probe;
  const bool first = !probe.tried;
  StatusOr<void*> handler = VersionCheckedHandler(Engine(), ffi.value(), probe, engine_args);
  if (first) RecordRunningEngineFfi(probe.seen);
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
