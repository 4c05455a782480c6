#include "pjrt/layouts_extension.h"

#include <string>

#include "pjrt/client.h"
#include "pjrt/engine_instance.h"
#include "pjrt/entry_point.h"
#include "pjrt/error.h"
#include "pjrt/forwarding.h"
#include "pjrt/gpu_compile.h"
#include "pjrt/topology.h"

namespace myplugin {
namespace {

// The engine's extension; ours is chained only when it exists.
const LayoutsExtension& EngineLayouts() {
  return *reinterpret_cast<const LayoutsExtension*>(Engine().FindExtension(PJRT_Extension_Type_Layouts));
}

// The engine's entry `field`, or null where its table (older than ours)
// ends before it.
template <typename Fn>
Fn EngineEntry(Fn LayoutsExtension::*field) {
  const LayoutsExtension& engine = EngineLayouts();
  const size_t end =
      reinterpret_cast<const char*>(&(engine.*field)) - reinterpret_cast<const char*>(&engine) + sizeof(Fn);
  return engine.base.struct_size >= end ? engine.*field : nullptr;
}

// The gate of pjrt/entry_point.h: the struct present and as large as the
// ABI's before a field is read.
template <typename Args>
PJRT_Error* CheckArgs(Args* args, const char* name) {
  return CheckArgsSize(name, args, args ? args->struct_size : 0, sizeof(Args));
}

template <typename Args>
PJRT_Error* CallEngine(PJRT_Error* (*LayoutsExtension::*field)(Args*), Args* args, const char* name) {
  return CallLibrary(Engine(), EngineEntry(field), args, name);
}

PJRT_Error* MemoryLayoutDestroy(LayoutsMemoryLayoutDestroyArgs* args) {
  if (PJRT_Error* e = CheckArgs(args, "PJRT_Layouts_MemoryLayout_Destroy")) return e;
  return CallEngine(&LayoutsExtension::memory_layout_destroy, args, "PJRT_Layouts_MemoryLayout_Destroy");
}

PJRT_Error* MemoryLayoutSerialize(LayoutsMemoryLayoutSerializeArgs* args) {
  if (PJRT_Error* e = CheckArgs(args, "PJRT_Layouts_MemoryLayout_Serialize")) return e;
  return CallEngine(&LayoutsExtension::memory_layout_serialize, args, "PJRT_Layouts_MemoryLayout_Serialize");
}

PJRT_Error* BufferMemoryLayout(LayoutsBufferMemoryLayoutArgs* args) {
  if (PJRT_Error* e = CheckArgs(args, "PJRT_Layouts_PJRT_Buffer_MemoryLayout")) return e;
  return CallEngine(&LayoutsExtension::buffer_memory_layout, args, "PJRT_Layouts_PJRT_Buffer_MemoryLayout");
}

PJRT_Error* ClientDefaultLayout(LayoutsClientDefaultLayoutArgs* args) {
  if (PJRT_Error* e = CheckArgs(args, "PJRT_Layouts_PJRT_Client_GetDefaultLayout")) return e;
  ScopedSwap<PJRT_Client*> client(args->of, FromC(args->of)->engine_client().get());
  return CallEngine(&LayoutsExtension::client_default_layout, args, "PJRT_Layouts_PJRT_Client_GetDefaultLayout");
}

// Our topologies hold no engine topology; a client's answers through its
// engine client (the same layouts). A compile-only one belongs to an engine
// whose layout objects our table cannot hand on.
PJRT_Error* TopologyDefaultLayout(LayoutsTopologyDefaultLayoutArgs* args) {
  if (PJRT_Error* e = CheckArgs(args, "PJRT_Layouts_PJRT_Topology_GetDefaultLayout")) return e;
  Client* owner = FromC(args->of)->owner();
  if (owner == nullptr) {
    return ToPjrtError(Unimplemented(
        "myplugin answers default layouts only for a client's topology, not for a compile-only or deserialized one"));
  }
  LayoutsClientDefaultLayoutArgs c{};
  c.struct_size = sizeof(c);
  c.of = owner->engine_client().get();
  c.type = args->type;
  c.dims = args->dims;
  c.num_dims = args->num_dims;
  PJRT_Error* error =
      CallEngine(&LayoutsExtension::client_default_layout, &c, "PJRT_Layouts_PJRT_Client_GetDefaultLayout");
  if (error == nullptr) args->layout = c.layout;
  return error;
}

// A compile-only GPU program (pjrt/gpu_compile.h) is the CUDA engine's: its
// layouts are that library's objects, which our Serialize/Destroy (the
// engine's) must not be handed; jax then goes without them.
template <typename Fn>
PJRT_Error* ExecutableLayouts(LayoutsExecutableLayoutsArgs* args, Fn fn, const char* name) {
  if (PJRT_Error* e = CheckArgs(args, name)) return e;
  if (TargetExecutable* target = TargetExecutableOf(args->executable)) {
    if (&target->engine() != &Engine()) {
      return ToPjrtError(Unimplemented(std::string(name) + " of a program compiled for a GPU target through another "
                                                           "XLA engine than the one in use"));
    }
    ScopedSwap<PJRT_Executable*> executable(args->executable, target->primary());
    return CallEngine(fn, args, name);
  }
  return CallEngine(fn, args, name);
}

PJRT_Error* ExecutableOutputLayouts(LayoutsExecutableLayoutsArgs* args) {
  return ExecutableLayouts(args, &LayoutsExtension::executable_output_layouts,
                           "PJRT_Layouts_PJRT_Executable_GetOutputLayouts");
}

PJRT_Error* ExecutableParameterLayouts(LayoutsExecutableLayoutsArgs* args) {
  return ExecutableLayouts(args, &LayoutsExtension::executable_parameter_layouts,
                           "PJRT_Layouts_PJRT_Executable_GetParameterLayouts");
}

// jaxlib reads every field of the version it was built with, without
// looking at struct_size, so the table is always whole; an entry the
// engine lacks stays null, which jaxlib takes as "not supported".
template <typename Fn>
Fn IfEngineHas(Fn LayoutsExtension::*field, Fn ours) {
  return EngineEntry(field) != nullptr ? ours : nullptr;
}

}  // namespace

PJRT_Extension_Base* OurLayoutsExtension(PJRT_Extension_Base* next) {
  if (Engine().FindExtension(PJRT_Extension_Type_Layouts) == nullptr) return next;
  static LayoutsExtension extension = [] {
    LayoutsExtension e{};
    e.base.struct_size = sizeof(LayoutsExtension);
    e.base.type = PJRT_Extension_Type_Layouts;
    e.memory_layout_destroy = IfEngineHas(&LayoutsExtension::memory_layout_destroy, &MemoryLayoutDestroy);
    e.memory_layout_serialize = IfEngineHas(&LayoutsExtension::memory_layout_serialize, &MemoryLayoutSerialize);
    e.client_default_layout = IfEngineHas(&LayoutsExtension::client_default_layout, &ClientDefaultLayout);
    e.buffer_memory_layout = IfEngineHas(&LayoutsExtension::buffer_memory_layout, &BufferMemoryLayout);
    // Answered through a client (TopologyDefaultLayout).
    e.topology_default_layout = e.client_default_layout != nullptr ? &TopologyDefaultLayout : nullptr;
    e.executable_output_layouts =
        IfEngineHas(&LayoutsExtension::executable_output_layouts, &ExecutableOutputLayouts);
    e.executable_parameter_layouts =
        IfEngineHas(&LayoutsExtension::executable_parameter_layouts, &ExecutableParameterLayouts);
    return e;
  }();
  extension.base.next = next;
  return &extension.base;
}

}  // namespace myplugin
