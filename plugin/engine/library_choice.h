// The shared libraries this process loads, as jax_plugin chose them
// (jax_plugin/engine_selection.py: the user's MYPLUGIN_ENGINE, MYPLUGIN_NCCL_PATH
// and MYPLUGIN_SHADOW_ENGINE_PATH, else the installed packages). Python hands
// its choice over once, through _myplugin.set_library_choice(), before it
// registers the PJRT library with jax; the process runtime
// (collectives/process_runtime.h, in libmyplugin_runtime, which both the
// Python module and the PJRT library link) keeps the one copy.
#pragma once

#include <string>

namespace myplugin {

struct LibraryChoice {
  // The XLA engine (a PJRT plugin .so); empty: none found.
  std::string engine_path;
  // "cpu" or "cuda": what the engine is, which decides the client options
  // and the FFI platform.
  std::string engine_kind = "cpu";
  // The CPU engine that partitions multi-process programs when the engine
  // is not itself the CPU one; empty: none installed.
  std::string shadow_engine_path;
  // The libnccl.so.2 the NCCL collectives load; empty: the system's.
  std::string nccl_library;
  // XLA's CUDA engine, for compiling ahead of time for NVIDIA GPUs with no
  // GPU here (compile-only topologies); empty: not installed. Only its
  // compiler is used: no client is ever created from it.
  std::string compile_engine_path;
};

}  // namespace myplugin
