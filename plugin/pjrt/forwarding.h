// Calling the engine on jax's behalf. The engine owns buffers, events and
// compiled code, so most entry points pass jax's args struct straight
// through; the ones that carry our clients, devices or memories swap in the
// engine's objects for the call and restore jax's afterwards. The struct is
// reused, not copied, so fields from headers newer than ours survive.
#pragma once

#include <string>

#include "pjrt/engine_instance.h"
#include "pjrt/error.h"

namespace myplugin {

// Calls an entry point of `library` (the engine, or the CUDA engine that
// compiles for GPU targets); its error as a Status.
template <typename Args>
Status CallLibraryStatus(const EngineLibrary& library, PJRT_Error* (*fn)(Args*), Args* args, const char* name) {
  if (fn == nullptr) return Unimplemented(std::string("the XLA engine does not implement ") + name);
  return library.Consume(fn(args));
}

// The same, its error converted into ours (for entry points jax calls).
// A call that succeeds makes no Status: this is every dispatch's path.
template <typename Args>
PJRT_Error* CallLibrary(const EngineLibrary& library, PJRT_Error* (*fn)(Args*), Args* args, const char* name) {
  if (fn == nullptr) return ToPjrtError(Unimplemented(std::string("the XLA engine does not implement ") + name));
  PJRT_Error* error = fn(args);
  return error == nullptr ? nullptr : ToPjrtError(library.Consume(error));
}

#define MYPLUGIN_CALL_ENGINE(name, args) \
  ::myplugin::CallLibrary(::myplugin::Engine(), ::myplugin::Engine().api()->name, args, #name)
// For the plugin's own calls into the engine.
#define MYPLUGIN_ENGINE_STATUS(name, args) \
  ::myplugin::CallLibraryStatus(::myplugin::Engine(), ::myplugin::Engine().api()->name, args, #name)

// Replaces a field for the lifetime of the scope.
template <typename T>
class ScopedSwap {
 public:
  ScopedSwap(T& field, T replacement) : field_(field), saved_(field) { field_ = replacement; }
  ~ScopedSwap() { field_ = saved_; }
  ScopedSwap(const ScopedSwap&) = delete;
  ScopedSwap& operator=(const ScopedSwap&) = delete;

 private:
  T& field_;
  T saved_;
};

// Fills in every PJRT_Api entry that is a plain pass-through to the engine.
void InstallPassThroughEntries(PJRT_Api& api);

}  // namespace myplugin
