#include "pjrt/engine_instance.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#ifdef MYPLUGIN_HAVE_NCCL
#include "collectives/nccl_ffi_handlers.h"
#endif
#include "collectives/process_runtime.h"
#include "engine/library_choice.h"
#include "pjrt/engine_extensions.h"
#include "pjrt/ffi_extension.h"

namespace myplugin {
namespace {

using collectives::ProcessRuntime;
using LoadedEngine = ProcessRuntime::LoadedEngine;
using EngineRole = ProcessRuntime::EngineRole;

LibraryChoice Choice() { return ProcessRuntime::Get().library_choice(); }

// `path` loaded, or the reason it is not.
LoadedEngine LoadEngine(const std::string& path) {
  LoadedEngine e;
  StatusOr<std::unique_ptr<EngineLibrary>> lib = EngineLibrary::Load(path);
  if (lib.ok()) {
    e.library = lib.take();
  } else {
    e.status = lib.status();
  }
  return e;
}

// The same, with `missing` as the reason when no path was chosen.
LoadedEngine LoadChosenEngine(const std::string& path, const std::string& missing) {
  if (path.empty()) return LoadedEngine{nullptr, FailedPrecondition(missing)};
  return LoadEngine(path);
}

// The process runtime keeps the engines, loaded once, for the life of the
// process (collectives/process_runtime.h says why).
const LoadedEngine& Instance() {
  return ProcessRuntime::Get().Engine(EngineRole::kMain, [] {
    LoadedEngine e = LoadEngine(Choice().engine_path);
    if (e.status.ok()) e.status = AddPartitioningEngine(*e.library);
    return e;
  });
}

}  // namespace

Status EnsureEngineLoaded() { return Instance().status; }

const EngineLibrary& Engine() {
  // Loaded once for the life of the process: kept after the first call, so
  // that forwarding a call (two lookups each, several calls a dispatch)
  // reads a pointer instead of going through the runtime's call_once.
  static const EngineLibrary* const library = Instance().library.get();
  return *library;
}

EngineKind CurrentEngineKind() { return Choice().engine_kind == "cuda" ? EngineKind::kCuda : EngineKind::kCpu; }

Status EnsureNcclForEngine() {
#ifdef MYPLUGIN_HAVE_NCCL
  if (CurrentEngineKind() == EngineKind::kCuda) return collectives::EnsureNcclLoaded();
#endif
  return OkStatus();
}

StatusOr<const EngineLibrary*> ShadowEngine() {
  if (CurrentEngineKind() == EngineKind::kCpu) {
    MYPLUGIN_RETURN_IF_ERROR(EnsureEngineLoaded());
    return &Engine();
  }
  const LoadedEngine& shadow = ProcessRuntime::Get().Engine(EngineRole::kShadow, [] {
    return LoadChosenEngine(Choice().shadow_engine_path,
                            "multi-process programs on the CUDA engine are partitioned on XLA's CPU engine: "
                            "install lammps-jax-pjrt-cpu (or set MYPLUGIN_SHADOW_ENGINE_PATH)");
  });
  if (!shadow.status.ok()) return shadow.status;
  return shadow.library.get();
}

std::vector<std::pair<std::string, void*>> NcclHandlersForCompile() {
#ifdef MYPLUGIN_HAVE_NCCL
  return collectives::NcclFfiHandlers();
#else
  return {};
#endif
}

namespace {

// Our NCCL handlers in the compile engine's FFI registry: the compiler
// refuses a custom call whose target it does not know.
Status RegisterNcclHandlers(const EngineLibrary& engine) {
  PJRT_Extension_Base* ext = engine.FindExtension(PJRT_Extension_Type_FFI);
  if (ext == nullptr || ext->struct_size < sizeof(FfiExtension)) {
    return Unimplemented("XLA's CUDA engine (" + engine.path() + ") has no FFI extension");
  }
  const auto* ffi = reinterpret_cast<const FfiExtension*>(ext);
  static const char kCuda[] = "CUDA";
  EngineFfiProbe probe;  // this engine's own FFI version, not the running engine's
  for (const auto& [name, handler] : NcclHandlersForCompile()) {
    FfiRegisterHandlerArgs args{};
    args.struct_size = kFfiRegisterHandlerArgsSize;
    args.target_name = name.data();
    args.target_name_size = name.size();
    args.handler = handler;
    args.platform_name = kCuda;
    args.platform_name_size = sizeof(kCuda) - 1;
    StatusOr<void*> checked = VersionCheckedHandler(engine, ffi, probe, args);
    MYPLUGIN_RETURN_IF_ERROR(checked.status());
    args.handler = checked.value();
    MYPLUGIN_RETURN_IF_ERROR(engine.Consume(ffi->register_handler(&args)));
  }
  return OkStatus();
}

}  // namespace

StatusOr<const EngineLibrary*> CompileEngine() {
  if (CurrentEngineKind() == EngineKind::kCuda) {
    MYPLUGIN_RETURN_IF_ERROR(EnsureEngineLoaded());
    return &Engine();
  }
  const LoadedEngine& compiler = ProcessRuntime::Get().Engine(EngineRole::kCompile, [] {
    LoadedEngine e = LoadChosenEngine(Choice().compile_engine_path,
                                      "compiling for NVIDIA GPUs needs XLA's CUDA engine of the installed jaxlib's "
                                      "release and the CUDA compiler pieces it runs (ptxas, libdevice): pip install "
                                      "'myplugin[gpu-compile]'");
    if (e.status.ok()) e.status = RegisterNcclHandlers(*e.library);
    if (e.status.ok()) e.status = AddPartitioningEngine(*e.library);
    return e;
  });
  if (!compiler.status.ok()) return compiler.status;
  return compiler.library.get();
}

int CompileEngineCudaMajor() {
  const LibraryChoice choice = Choice();
  const std::string& path = CurrentEngineKind() == EngineKind::kCuda ? choice.engine_path : choice.compile_engine_path;
  return path.find("cuda12") != std::string::npos ? 12 : 13;
}

}  // namespace myplugin
