// Our FFI extension (PJRT_Extension_Type_FFI) in the PJRT_Api chain. jax
// does not install a custom-call handler for plugins, so jax_plugin installs
// one that calls this extension; it forwards to the engine's, translating
// the platform name and the argument layout.
//
// The layouts below are the facts of XLA's pjrt_c_api_ffi_extension.h (not
// shipped with the header we build against): register_handler's args are
// 52 bytes with no api_version field, and an engine reads exactly that.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "engine/engine_library.h"
#include "engine/ffi_api_version.h"
#include "pjrt_c_api.h"

namespace myplugin {

struct FfiRegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;  // XLA_FFI_Handler*
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
};
constexpr size_t kFfiRegisterHandlerArgsSize = offsetof(FfiRegisterHandlerArgs, traits) + sizeof(uint32_t);

using FfiOpaqueFn = PJRT_Error* (*)(void* args);
using FfiRegisterHandlerFn = PJRT_Error* (*)(FfiRegisterHandlerArgs* args);

struct FfiExtension {
  PJRT_Extension_Base base;
  FfiOpaqueFn type_id_register;
  FfiOpaqueFn user_data_add;
  FfiRegisterHandlerFn register_handler;
};

// What one engine's probe showed (engine/ffi_api_version.h), read once.
struct EngineFfiProbe {
  bool tried = false;
  ProbedEngineFfi seen;
};

// The handler to register with an engine for `args`: the caller's, an
// adapter of it, or an error for a version pair nobody has shown to work.
// The engine's own refusal of a version would be lost on the way (its FFI
// extension drops it), so the decision is made here, before it. The first
// call for an engine reads its FFI version through `probe`.
StatusOr<void*> VersionCheckedHandler(const EngineLibrary& engine, const FfiExtension* engine_ffi,
                                      EngineFfiProbe& probe, const FfiRegisterHandlerArgs& args);

// The extension, ready to be chained into our PJRT_Api.
PJRT_Extension_Base* OurFfiExtension();

// The FFI platform of the engine that handlers for "myplugin" belong to.
const char* EngineFfiPlatform();

}  // namespace myplugin
