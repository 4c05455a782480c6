// The PJRT Profiler extension (PJRT_Extension_Type_Profiler): how jax's
// profiler (jax.profiler.trace, start_trace) reaches a plugin. jaxlib finds
// it in the PJRT_Api's extension chain when it loads the plugin
// (xla_bridge.register_plugin → _profiler.register_plugin_profiler), and for
// every profiling session calls create, start, stop, collect_data and
// destroy; collect_data hands back a serialized XSpace whose planes jaxlib
// adds to the trace it writes.
//
// Ours returns a plane of myplugin's own spans (common/profile_spans.h),
// named for this process, and forwards each call to the engine's profiler
// where the engine has one (the CUDA engine: its device traces), appending
// the engine's XSpace to ours (serialized protobufs concatenate into one
// message whose repeated fields hold both).
//
// The structs below are the ABI of XLA's pjrt_c_api_profiler_extension.h
// and xla/backends/profiler/plugin/profiler_c_api.h (PLUGIN_PROFILER_VERSION
// 1), not shipped with the header we build against. jaxlib's caller
// (xla/backends/profiler/plugin/plugin_tracer.cc) requires the API table's
// struct_size to equal its own (0x50), leaves the arguments' struct_size
// unset, and calls collect_data once with a null buffer, reading the
// plugin's buffer from the answer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pjrt_c_api.h"

namespace myplugin {

struct PLUGIN_Profiler;        // a session: ours, or the engine's
struct PLUGIN_Profiler_Error;  // an error: ours, or the engine's

struct ProfilerErrorDestroyArgs {
  size_t struct_size;
  void* priv;
  PLUGIN_Profiler_Error* error;
};
struct ProfilerErrorMessageArgs {
  size_t struct_size;
  void* priv;
  const PLUGIN_Profiler_Error* error;
  const char* message;  // out, lives as long as the error
  size_t message_size;  // out
};
struct ProfilerErrorGetCodeArgs {
  size_t struct_size;
  void* priv;
  const PLUGIN_Profiler_Error* error;
  int code;  // out
};
struct ProfilerCreateArgs {
  size_t struct_size;
  const char* options;  // a serialized tensorflow.ProfileOptions
  size_t options_size;
  PLUGIN_Profiler* profiler;  // out
};
struct ProfilerArgs {  // destroy, start and stop
  size_t struct_size;
  PLUGIN_Profiler* profiler;
};
struct ProfilerCollectDataArgs {
  size_t struct_size;
  PLUGIN_Profiler* profiler;
  uint8_t* buffer;              // in: null, or a buffer of the size a first call gave; out: the data
  size_t buffer_size_in_bytes;  // out
};
static_assert(sizeof(ProfilerErrorMessageArgs) == 0x28, "the ABI's size");
static_assert(sizeof(ProfilerCreateArgs) == 0x20, "the ABI's size");
static_assert(sizeof(ProfilerCollectDataArgs) == 0x20, "the ABI's size");

struct ProfilerApi {
  size_t struct_size;
  void* priv;
  void (*error_destroy)(ProfilerErrorDestroyArgs* args);
  void (*error_message)(ProfilerErrorMessageArgs* args);
  PLUGIN_Profiler_Error* (*error_get_code)(ProfilerErrorGetCodeArgs* args);
  PLUGIN_Profiler_Error* (*create)(ProfilerCreateArgs* args);
  PLUGIN_Profiler_Error* (*destroy)(ProfilerArgs* args);
  PLUGIN_Profiler_Error* (*start)(ProfilerArgs* args);
  PLUGIN_Profiler_Error* (*stop)(ProfilerArgs* args);
  PLUGIN_Profiler_Error* (*collect_data)(ProfilerCollectDataArgs* args);
};
static_assert(sizeof(ProfilerApi) == 0x50, "jaxlib refuses any other size");

struct ProfilerExtension {
  PJRT_Extension_Base base;
  ProfilerApi* profiler_api;
  int64_t traceme_context_id;  // only where the struct rides on a call's arguments
};
static_assert(sizeof(ProfilerExtension) == 0x28, "the extension's layout");

// The extension, to chain into PJRT_Api (`next` is the rest of the chain).
PJRT_Extension_Base* OurProfilerExtension(PJRT_Extension_Base* next);

}  // namespace myplugin
