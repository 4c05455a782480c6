// An engine PJRT_LoadedExecutable, owned: destroyed through the engine
// library that made it.
#pragma once

#include "engine/engine_library.h"

namespace myplugin {

class EngineExecutable {
 public:
  // `executable` may be null: none (a program with no part on this process).
  EngineExecutable(const EngineLibrary& engine, PJRT_LoadedExecutable* executable)
      : engine_(engine), executable_(executable) {}
  ~EngineExecutable();
  EngineExecutable(const EngineExecutable&) = delete;
  EngineExecutable& operator=(const EngineExecutable&) = delete;

  const EngineLibrary& engine() const { return engine_; }
  PJRT_LoadedExecutable* get() const { return executable_; }

 private:
  const EngineLibrary& engine_;
  PJRT_LoadedExecutable* executable_;
};

}  // namespace myplugin
