// The process's one engine library. Loaded on first need (plugin
// initialization, client creation or FFI registration) from the library
// jax_plugin chose (engine/library_choice.h), which it hands over before it
// registers the plugin. A failed load is remembered and reported every time.
#pragma once

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

// The CPU engine that partitions multi-process programs: the engine itself
// when it is the CPU one, else the shadow engine jax_plugin chose, loaded once.
StatusOr<const EngineLibrary*> ShadowEngine();

}  // namespace myplugin
