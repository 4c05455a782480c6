#include "pjrt/executable.h"

#include "pjrt/client.h"
#include "pjrt/forwarding.h"

namespace myplugin {

StatusOr<std::unique_ptr<LoadedExecutable>> LoadedExecutable::Wrap(PJRT_LoadedExecutable* engine_executable) {
  std::unique_ptr<LoadedExecutable> exec(new LoadedExecutable(engine_executable));
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, args);
  args.executable = engine_executable;
  MYPLUGIN_RETURN_IF_ERROR(Engine().Consume(Engine().api()->PJRT_LoadedExecutable_AddressableDevices(&args)));
  for (size_t i = 0; i < args.num_addressable_devices; ++i) {
    Device* device = DeviceOfEngine(args.addressable_devices[i]);
    if (device == nullptr) return Internal("the XLA engine compiled for a device that myplugin does not know");
    exec->c_addressable_devices_.push_back(ToC(device));
  }
  return exec;
}

LoadedExecutable::~LoadedExecutable() {
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args);
  args.executable = engine_;
  Engine().Consume(Engine().api()->PJRT_LoadedExecutable_Destroy(&args));
}

namespace {

PJRT_Error* WrapInto(PJRT_LoadedExecutable*& slot) {
  StatusOr<std::unique_ptr<LoadedExecutable>> exec = LoadedExecutable::Wrap(slot);
  if (!exec.ok()) {
    slot = nullptr;
    return ToPjrtError(exec.status());
  }
  slot = ToC(exec.take().release());
  return nullptr;
}

}  // namespace

PJRT_Error* PjrtClientCompile(PJRT_Client_Compile_Args* args) {
  {
    ScopedSwap<PJRT_Client*> client(args->client, FromC(args->client)->engine_client().get());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Client_Compile, args)) return e;
  }
  return WrapInto(args->executable);
}

PJRT_Error* PjrtExecutableDeserializeAndLoad(PJRT_Executable_DeserializeAndLoad_Args* args) {
  {
    ScopedSwap<PJRT_Client*> client(args->client, FromC(args->client)->engine_client().get());
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Executable_DeserializeAndLoad, args)) return e;
  }
  return WrapInto(args->loaded_executable);
}

PJRT_Error* PjrtLoadedExecutableDestroy(PJRT_LoadedExecutable_Destroy_Args* args) {
  delete FromC(args->executable);
  return nullptr;
}

PJRT_Error* PjrtLoadedExecutableGetExecutable(PJRT_LoadedExecutable_GetExecutable_Args* args) {
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->loaded_executable, FromC(args->loaded_executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_GetExecutable, args);
}

PJRT_Error* PjrtLoadedExecutableAddressableDevices(PJRT_LoadedExecutable_AddressableDevices_Args* args) {
  const auto& d = FromC(args->executable)->c_addressable_devices();
  args->addressable_devices = d.data();
  args->num_addressable_devices = d.size();
  return nullptr;
}

PJRT_Error* PjrtLoadedExecutableDelete(PJRT_LoadedExecutable_Delete_Args* args) {
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Delete, args);
}

PJRT_Error* PjrtLoadedExecutableIsDeleted(PJRT_LoadedExecutable_IsDeleted_Args* args) {
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_IsDeleted, args);
}

PJRT_Error* PjrtLoadedExecutableExecute(PJRT_LoadedExecutable_Execute_Args* args) {
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  if (MYPLUGIN_HAS_FIELD(args, PJRT_LoadedExecutable_Execute_Args, execute_device) &&
      args->execute_device != nullptr) {
    ScopedSwap<PJRT_Device*> device(args->execute_device, EngineOf(args->execute_device));
    return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Execute, args);
  }
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Execute, args);
}

PJRT_Error* PjrtLoadedExecutableFingerprint(PJRT_LoadedExecutable_Fingerprint_Args* args) {
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_Fingerprint, args);
}

PJRT_Error* PjrtLoadedExecutableGetDeviceAssignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args* args) {
  ScopedSwap<PJRT_LoadedExecutable*> exec(args->executable, FromC(args->executable)->engine());
  return MYPLUGIN_CALL_ENGINE(PJRT_LoadedExecutable_GetDeviceAssignment, args);
}

}  // namespace myplugin
