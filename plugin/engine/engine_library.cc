#include "engine/engine_library.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstring>

namespace myplugin {

DlHandle::~DlHandle() {
  if (handle_ != nullptr) dlclose(handle_);
}

StatusOr<std::unique_ptr<EngineLibrary>> EngineLibrary::Load(const std::string& path) {
  if (path.empty()) {
    return FailedPrecondition(
        "no XLA engine library configured: install the engine package "
        "(pip install lammps-jax-pjrt-cpu==0.11.2) or set MYPLUGIN_ENGINE_PATH");
  }
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return NotFound("XLA engine library not found: " + path +
                    " (set MYPLUGIN_ENGINE_PATH to a PJRT plugin .so, or reinstall the engine package)");
  }
  // RTLD_LOCAL: the engine's XLA must not interpose symbols on jaxlib's own XLA.
  DlHandle handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (handle.get() == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("cannot load XLA engine library " + path + ": " +
                              (why != nullptr ? why : "unknown dlopen error"));
  }
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(dlsym(handle.get(), "GetPjrtApi"));
  if (get_api == nullptr) {
    return FailedPrecondition("XLA engine library " + path +
                              " is not a PJRT plugin: it does not export GetPjrtApi");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) {
    return FailedPrecondition("XLA engine library " + path + ": GetPjrtApi returned null");
  }
  if (api->pjrt_api_version.major_version != PJRT_API_MAJOR) {
    return FailedPrecondition(
        "XLA engine library " + path + " speaks PJRT C API major version " +
        std::to_string(api->pjrt_api_version.major_version) + ", this build of myplugin speaks " +
        std::to_string(PJRT_API_MAJOR));
  }
  // Every function we forward must be inside the engine's table.
  if (api->struct_size < PJRT_Api_STRUCT_SIZE) {
    return FailedPrecondition(
        "XLA engine library " + path + " is too old: its PJRT C API is " +
        std::to_string(api->pjrt_api_version.major_version) + "." +
        std::to_string(api->pjrt_api_version.minor_version) + ", myplugin needs 0." +
        std::to_string(PJRT_API_MINOR) + " or newer");
  }
  std::unique_ptr<EngineLibrary> lib(new EngineLibrary(std::move(handle), api, path));
  MYPLUGIN_PJRT_ARGS(PJRT_Plugin_Initialize_Args, init);
  Status st = lib->Consume(api->PJRT_Plugin_Initialize(&init));
  if (!st.ok()) {
    return Status(st.code(), "XLA engine library " + path + " failed to initialize: " + st.message());
  }
  return lib;
}

std::string EngineLibrary::ApiVersionString() const {
  return std::to_string(api_->pjrt_api_version.major_version) + "." +
         std::to_string(api_->pjrt_api_version.minor_version);
}

Status EngineLibrary::Consume(PJRT_Error* error) const {
  if (error == nullptr) return OkStatus();
  MYPLUGIN_PJRT_ARGS(PJRT_Error_Message_Args, msg);
  msg.error = error;
  api_->PJRT_Error_Message(&msg);
  MYPLUGIN_PJRT_ARGS(PJRT_Error_GetCode_Args, code);
  code.error = error;
  PJRT_Error* code_error = api_->PJRT_Error_GetCode(&code);
  Status status(code_error == nullptr ? static_cast<Code>(code.code) : Code::kUnknown,
                std::string(msg.message, msg.message_size));
  MYPLUGIN_PJRT_ARGS(PJRT_Error_Destroy_Args, destroy);
  if (code_error != nullptr) {
    destroy.error = code_error;
    api_->PJRT_Error_Destroy(&destroy);
  }
  destroy.error = error;
  api_->PJRT_Error_Destroy(&destroy);
  return status;
}

PJRT_Extension_Base* FindExtensionIn(PJRT_Extension_Base* first, PJRT_Extension_Type type) {
  // Loading a value outside the enum's range (e.g. 24 from a newer engine)
  // as PJRT_Extension_Type is undefined behaviour (UBSan: "not a valid
  // value"): read the stored int instead.
  static_assert(sizeof(PJRT_Extension_Type) == sizeof(int), "PJRT_Extension_Type is stored as an int");
  for (PJRT_Extension_Base* ext = first; ext != nullptr; ext = ext->next) {
    int stored;
    std::memcpy(&stored, &ext->type, sizeof(stored));
    if (stored == static_cast<int>(type)) return ext;
  }
  return nullptr;
}

PJRT_Extension_Base* EngineLibrary::FindExtension(PJRT_Extension_Type type) const {
  return FindExtensionIn(api_->extension_start, type);
}

}  // namespace myplugin
