// An engine PJRT_LoadedExecutable, owned: destroyed through the engine
// library that made it.
#pragma once

#include <memory>
#include <string>

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

  // The engine's own serialized form of the executable.
  StatusOr<std::string> Serialize() const;
  // The engine's optimized program (PJRT_Executable_OptimizedProgram's
  // bytes); `format` gets its format when given.
  StatusOr<std::string> OptimizedProgram(std::string* format = nullptr) const;
  // The same for an engine PJRT_Executable (not owned, not loaded): the one
  // reader of the engine's optimized program.
  static StatusOr<std::string> OptimizedProgram(const EngineLibrary& engine, PJRT_Executable* executable,
                                                std::string* format = nullptr);
  // Loads `bytes` (from Serialize) into `client` with `compile_options` (a
  // serialized CompileOptionsProto; the device assignment counts), or with
  // the options inside `bytes` when they are empty.
  static StatusOr<std::unique_ptr<EngineExecutable>> Deserialize(const EngineLibrary& engine, PJRT_Client* client,
                                                                 const std::string& bytes,
                                                                 const std::string& compile_options);

  const EngineLibrary& engine() const { return engine_; }
  PJRT_LoadedExecutable* get() const { return executable_; }
  // Gives up ownership.
  PJRT_LoadedExecutable* release() {
    PJRT_LoadedExecutable* e = executable_;
    executable_ = nullptr;
    return e;
  }

 private:
  const EngineLibrary& engine_;
  PJRT_LoadedExecutable* executable_;
};

}  // namespace myplugin
