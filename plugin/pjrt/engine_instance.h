// The process's one engine library. Loaded on first need (plugin
// initialization, client creation or FFI registration) from the library
// jax_plugin chose (engine/library_choice.h), which it hands over before it
// registers the plugin, and kept by the process runtime
// (collectives/process_runtime.h). A failed load is remembered and reported
// every time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/engine_library.h"

namespace myplugin {

// Loads the engine if needed; returns the reason when it cannot.
Status EnsureEngineLoaded();

// Only after EnsureEngineLoaded() succeeded: the C API entry points that
// take engine objects can only be reached through objects made after that.
const EngineLibrary& Engine();

// What the engine is (jax_plugin's engine selection): it decides the client
// options and the FFI platform.
enum class EngineKind { kCpu, kCuda };
EngineKind CurrentEngineKind();

// On the CUDA engine: the NCCL that its collectives run on, loaded and its
// version checked once (collectives::EnsureNcclLoaded), so that a client
// does not start on an NCCL it cannot use. OK on the CPU engine and in a
// build without the NCCL backend.
Status EnsureNcclForEngine();

// The CPU engine that partitions multi-process programs: the engine itself
// when it is the CPU one, else the shadow engine jax_plugin chose, loaded once.
StatusOr<const EngineLibrary*> ShadowEngine();

// XLA's CUDA engine as a compiler for compile-only GPU topologies: the
// engine itself when it is the CUDA one, else the one jax_plugin found,
// loaded once with our NCCL handlers registered for platform CUDA (so that
// the rewritten multi-process programs compile). Never makes a client.
StatusOr<const EngineLibrary*> CompileEngine();
// (target name, XLA_FFI_Handler*) of our NCCL handlers; empty when this
// build has no NCCL backend (built without NCCL's headers).
std::vector<std::pair<std::string, void*>> NcclHandlersForCompile();
// The CUDA major version of that engine (12 or 13), from its package.
int CompileEngineCudaMajor();

}  // namespace myplugin
