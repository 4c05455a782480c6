// The XLA engine: a PJRT plugin shared library loaded at run time. This
// floor knows nothing of our own PJRT objects; it loads the library, checks
// that its C API is one we can speak, and turns its errors into Status.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "pjrt_c_api.h"

namespace myplugin {

// Owns a dlopen handle. The engine is never unloaded while the process runs
// (XLA keeps threads and static state alive), so the handle is only closed
// when loading fails half-way.
class DlHandle {
 public:
  DlHandle() = default;
  explicit DlHandle(void* handle) : handle_(handle) {}
  DlHandle(const DlHandle&) = delete;
  DlHandle& operator=(const DlHandle&) = delete;
  DlHandle(DlHandle&& other) noexcept : handle_(other.release()) {}
  ~DlHandle();
  void* get() const { return handle_; }
  void* release() {
    void* h = handle_;
    handle_ = nullptr;
    return h;
  }

 private:
  void* handle_ = nullptr;
};

// The extension of `type` in the chain that starts at `first`, or nullptr.
// An engine newer than our pjrt_c_api.h has extension types our enum lacks:
// each type is compared as the int it is stored as, never loaded as the enum.
PJRT_Extension_Base* FindExtensionIn(PJRT_Extension_Base* first, PJRT_Extension_Type type);

class EngineLibrary {
 public:
  // Loads the library at `path`, resolves GetPjrtApi and runs the engine's
  // PJRT_Plugin_Initialize. Errors name the path and what went wrong.
  static StatusOr<std::unique_ptr<EngineLibrary>> Load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  // "major.minor" of the engine's C API.
  std::string ApiVersionString() const;

  // Converts an engine error into a Status and frees it. nullptr is OK.
  Status Consume(PJRT_Error* error) const;

  // The engine's extension of `type`, or nullptr.
  PJRT_Extension_Base* FindExtension(PJRT_Extension_Type type) const;

 private:
  EngineLibrary(DlHandle handle, const PJRT_Api* api, std::string path)
      : handle_(std::move(handle)), api_(api), path_(std::move(path)) {}

  DlHandle handle_;
  const PJRT_Api* api_;
  std::string path_;
};

// Fills in struct_size for a PJRT args struct of the header we build with.
#define MYPLUGIN_PJRT_ARGS(type, name) \
  type name{};                         \
  name.struct_size = type##_STRUCT_SIZE

}  // namespace myplugin
