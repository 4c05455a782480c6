// A stand-in for an engine with a profiler of its own (as the CUDA engine
// has): the real CPU engine (its path in MYPLUGIN_TEST_REAL_ENGINE), with a
// PJRT profiler extension put in front of its extension chain. The
// profiler counts the calls it gets, and its data is an XSpace of one plane
// whose name says them, so a test can tell that myplugin started, stopped
// and collected it within jax's profile. Built by tests/test_profiles.py.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pjrt_c_api.h"

namespace {

// The profiler ABI (plugin/pjrt/profiler_extension.h has the whole story).
struct Profiler {
  int started = 0, stopped = 0, collected = 0;
  std::string data;
};
struct ProfilerArgs {
  size_t struct_size;
  Profiler* profiler;
};
struct CreateArgs {
  size_t struct_size;
  const char* options;
  size_t options_size;
  Profiler* profiler;
};
struct CollectArgs {
  size_t struct_size;
  Profiler* profiler;
  uint8_t* buffer;
  size_t buffer_size;
};
struct ProfilerApi {
  size_t struct_size;
  void* priv;
  void* error_destroy;
  void* error_message;
  void* error_get_code;
  void* (*create)(CreateArgs*);
  void* (*destroy)(ProfilerArgs*);
  void* (*start)(ProfilerArgs*);
  void* (*stop)(ProfilerArgs*);
  void* (*collect_data)(CollectArgs*);
};
struct ProfilerExtension {
  PJRT_Extension_Base base;
  ProfilerApi* api;
  int64_t traceme_context_id;
};

void* Create(CreateArgs* a) {
  a->profiler = new Profiler;
  return nullptr;
}
void* Destroy(ProfilerArgs* a) {
  delete a->profiler;
  return nullptr;
}
void* Start(ProfilerArgs* a) {
  ++a->profiler->started;
  return nullptr;
}
void* Stop(ProfilerArgs* a) {
  ++a->profiler->stopped;
  return nullptr;
}

// An XSpace {planes: [XPlane {name}]}: field 1 of XSpace, field 2 of XPlane.
void* Collect(CollectArgs* a) {
  Profiler* p = a->profiler;
  ++p->collected;
  const std::string name = "/device:CUSTOM:test engine started=" + std::to_string(p->started) +
                           " stopped=" + std::to_string(p->stopped) + " collected=" + std::to_string(p->collected);
  const std::string plane = std::string(1, '\x12') + static_cast<char>(name.size()) + name;
  p->data = std::string(1, '\x0a') + static_cast<char>(plane.size()) + plane;
  if (a->buffer == nullptr) {
    a->buffer_size = p->data.size();  // the older contract: the caller allocates and calls again
  } else {
    std::memcpy(a->buffer, p->data.data(), p->data.size());
    a->buffer_size = p->data.size();
  }
  return nullptr;
}

ProfilerApi api = {sizeof(ProfilerApi), nullptr, nullptr, nullptr, nullptr, Create, Destroy, Start, Stop, Collect};
ProfilerExtension extension = {{sizeof(ProfilerExtension), PJRT_Extension_Type_Profiler, nullptr}, &api, 0};

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static PJRT_Api* table = [] {
    const char* path = std::getenv("MYPLUGIN_TEST_REAL_ENGINE");
    void* real = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    auto get = real ? reinterpret_cast<const PJRT_Api* (*)()>(dlsym(real, "GetPjrtApi")) : nullptr;
    if (get == nullptr) {
      std::fprintf(stderr, "profiling_engine: cannot load the engine at %s\n", path ? path : "(unset)");
      std::abort();
    }
    const PJRT_Api* engine = get();
    auto* copy = static_cast<PJRT_Api*>(std::malloc(engine->struct_size));
    std::memcpy(copy, engine, engine->struct_size);
    extension.base.next = engine->extension_start;
    copy->extension_start = &extension.base;
    return copy;
  }();
  return table;
}
