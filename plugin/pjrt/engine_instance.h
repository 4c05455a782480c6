// The process's one engine library. Loaded on first need (plugin
// initialization, client creation or FFI registration) from
// MYPLUGIN_ENGINE_PATH, which jax_plugin sets to the installed engine unless
// the user set it. A failed load is remembered and reported every time.
#pragma once

#include "common/status.h"
#include "engine/engine_library.h"

namespace myplugin {

// Loads the engine if needed; returns the reason when it cannot.
Status EnsureEngineLoaded();

// Only after EnsureEngineLoaded() succeeded: the C API entry points that
// take engine objects can only be reached through objects made after that.
const EngineLibrary& Engine();

}  // namespace myplugin
