#include "engine/engine_executable.h"

namespace myplugin {

EngineExecutable::~EngineExecutable() {
  if (executable_ == nullptr) return;
  MYPLUGIN_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args);
  args.executable = executable_;
  engine_.Consume(engine_.api()->PJRT_LoadedExecutable_Destroy(&args));
}

}  // namespace myplugin
