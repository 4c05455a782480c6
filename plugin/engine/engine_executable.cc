#include "engine/engine_executable.h"

namespace myplugin {

EngineExecutable::~EngineExecutable() {
  if (executable_ == nullptr) return;
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args);
  args.executable = executable_;
  engine_.Consume(engine_.api()->PJRT_LoadedExecutable_Destroy(&args));
}

StatusOr<std::string> EngineExecutable::Serialize() const {
  const PJRT_Api* api = engine_.api();
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, get);
  get.loaded_executable = executable_;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api->PJRT_LoadedExecutable_GetExecutable(&get)));
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Serialize_Args, ser);
  ser.executable = get.executable;
  Status st = engine_.Consume(api->PJRT_Executable_Serialize(&ser));
  std::string bytes;
  if (st.ok()) {
    bytes.assign(ser.serialized_bytes, ser.serialized_bytes_size);
    if (ser.serialized_executable_deleter) ser.serialized_executable_deleter(ser.serialized_executable);
  }
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Destroy_Args, destroy);
  destroy.executable = get.executable;
  engine_.Consume(api->PJRT_Executable_Destroy(&destroy));
  if (!st.ok()) return st;
  return bytes;
}

StatusOr<std::string> EngineExecutable::OptimizedProgram(std::string* format) const {
  const PJRT_Api* api = engine_.api();
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, get);
  get.loaded_executable = executable_;
  MYPLUGIN_RETURN_IF_ERROR(engine_.Consume(api->PJRT_LoadedExecutable_GetExecutable(&get)));
  StatusOr<std::string> bytes = OptimizedProgram(engine_, get.executable, format);
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_Destroy_Args, destroy);
  destroy.executable = get.executable;
  engine_.Consume(api->PJRT_Executable_Destroy(&destroy));
  return bytes;
}

StatusOr<std::string> EngineExecutable::OptimizedProgram(const EngineLibrary& engine, PJRT_Executable* executable,
                                                         std::string* format) {
  const PJRT_Api* api = engine.api();
  if (api->PJRT_Executable_OptimizedProgram == nullptr) {
    return Unimplemented("the XLA engine cannot return the optimized program of an executable");
  }
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_OptimizedProgram_Args, args);
  args.executable = executable;
  args.program = &program;
  // First the size, then the bytes.
  MYPLUGIN_RETURN_IF_ERROR(engine.Consume(api->PJRT_Executable_OptimizedProgram(&args)));
  std::string bytes(program.code_size, '\0');
  program.code = bytes.data();
  MYPLUGIN_RETURN_IF_ERROR(engine.Consume(api->PJRT_Executable_OptimizedProgram(&args)));
  bytes.resize(program.code_size);
  if (format != nullptr) format->assign(program.format, program.format_size);
  return bytes;
}

StatusOr<std::unique_ptr<EngineExecutable>> EngineExecutable::Deserialize(const EngineLibrary& engine,
                                                                          PJRT_Client* client,
                                                                          const std::string& bytes,
                                                                          const std::string& compile_options) {
  MYPLUGIN_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, args);
  args.client = client;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  if (!compile_options.empty()) {
    args.overridden_serialized_compile_options = compile_options.data();
    args.overridden_serialized_compile_options_size = compile_options.size();
  }
  MYPLUGIN_RETURN_IF_ERROR(engine.Consume(engine.api()->PJRT_Executable_DeserializeAndLoad(&args)));
  return std::make_unique<EngineExecutable>(engine, args.loaded_executable);
}

}  // namespace myplugin
