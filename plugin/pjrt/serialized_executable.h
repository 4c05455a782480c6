// The bytes of PJRT_Executable_Serialize, as jax's persistent compilation
// cache stores them. An envelope of ours around the engine's own serialized
// executables: it names the build that wrote it (the client's platform
// version), so that a blob of another build or engine is refused instead of
// loaded, and for a multi-process program it carries what the load needs
// without a new partition: the local program's executable and options, the
// shadow's executable, and whose devices the local program was made for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace myplugin {

struct SerializedExecutable {
  std::string platform_version;   // of the client that wrote it
  std::string engine_executable;  // the engine's bytes (the local part of a multi-process program)
  bool multiprocess = false;

  // Multi-process programs only.
  // True when the local program is the same on every process (device ids
  // are read at run time): any process may load it. Otherwise it loads only
  // on a process with the writer's devices.
  bool process_independent = false;
  std::vector<std::vector<int64_t>> assignment;  // the whole program's [replica][partition] global ids
  std::vector<int64_t> device_order;             // the writer's local devices (global ids), in replica order
  std::vector<int64_t> engine_ids;               // the same devices' engine ids on the writer
  std::string local_compile_options;             // as the writer compiled the local program
  std::string shadow_executable;                 // the whole program, compiled on the shadow engine
};

std::string EncodeSerializedExecutable(const SerializedExecutable& e);
// Refuses bytes that are not ours, or of another version of this format.
StatusOr<SerializedExecutable> DecodeSerializedExecutable(const std::string& bytes);

}  // namespace myplugin
