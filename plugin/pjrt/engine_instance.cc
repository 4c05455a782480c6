#include "pjrt/engine_instance.h"

#include <cstdlib>
#include <memory>
#include <mutex>

namespace myplugin {
namespace {

struct LoadedEngine {
  std::unique_ptr<EngineLibrary> library;
  Status status;
};

LoadedEngine& Instance() {
  // Leaked on purpose: the engine outlives every static destructor that
  // might still hold an engine object.
  static LoadedEngine* engine = [] {
    auto* e = new LoadedEngine;
    const char* path = std::getenv("MYPLUGIN_ENGINE_PATH");
    StatusOr<std::unique_ptr<EngineLibrary>> lib = EngineLibrary::Load(path != nullptr ? path : "");
    if (lib.ok()) {
      e->library = lib.take();
    } else {
      e->status = lib.status();
    }
    return e;
  }();
  return *engine;
}

}  // namespace

Status EnsureEngineLoaded() { return Instance().status; }

const EngineLibrary& Engine() { return *Instance().library; }

}  // namespace myplugin
