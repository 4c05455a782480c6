#include "pjrt/engine_instance.h"

#include <memory>
#include <mutex>
#include <string>

#include "engine/library_choice.h"

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
    StatusOr<std::unique_ptr<EngineLibrary>> lib = EngineLibrary::Load(CurrentLibraryChoice().engine_path);
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

EngineKind CurrentEngineKind() {
  return CurrentLibraryChoice().engine_kind == "cuda" ? EngineKind::kCuda : EngineKind::kCpu;
}

StatusOr<const EngineLibrary*> ShadowEngine() {
  if (CurrentEngineKind() == EngineKind::kCpu) {
    MYPLUGIN_RETURN_IF_ERROR(EnsureEngineLoaded());
    return &Engine();
  }
  static LoadedEngine* shadow = [] {
    auto* e = new LoadedEngine;
    const std::string path = CurrentLibraryChoice().shadow_engine_path;
    if (path.empty()) {
      e->status = FailedPrecondition("multi-process programs on the CUDA engine are partitioned on XLA's CPU "
                                     "engine: install lammps-jax-pjrt-cpu (or set MYPLUGIN_SHADOW_ENGINE_PATH)");
      return e;
    }
    StatusOr<std::unique_ptr<EngineLibrary>> lib = EngineLibrary::Load(path);
    if (lib.ok()) {
      e->library = lib.take();
    } else {
      e->status = lib.status();
    }
    return e;
  }();
  if (!shadow->status.ok()) return shadow->status;
  return shadow->library.get();
}

}  // namespace myplugin
