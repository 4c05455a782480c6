// The PJRT Layouts extension (PJRT_Extension_Type_Layouts): the on-device
// layout of a buffer, a client's default layout, an executable's parameter
// and output layouts. jaxlib reads a buffer's layout only through it; where
// the chain lacks it, jaxlib takes every buffer for row-major and reads a
// buffer put with another layout (jax.device_put with a Format) back with
// its elements out of order. So ours is chained exactly when the engine
// offers one, and forwards to it, unwrapping the objects that are ours
// (clients, topologies, compile-only executables).
//
// The structs below are the ABI of XLA's pjrt_c_api_layouts_extension.h (not
// shipped with the header we build against), version 4: seven functions,
// the last two (executable layouts) absent from engines with a smaller
// extension, which ours then leaves out too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pjrt_c_api.h"

namespace myplugin {

struct PJRT_Layouts_MemoryLayout;      // the engine's, opaque
struct PJRT_Layouts_SerializedLayout;  // the engine's, opaque

struct LayoutsMemoryLayoutDestroyArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Layouts_MemoryLayout* layout;
};

struct LayoutsMemoryLayoutSerializeArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Layouts_MemoryLayout* layout;
  const char* serialized_bytes;  // out, backed by serialized_layout
  size_t serialized_bytes_size;  // out
  PJRT_Layouts_SerializedLayout* serialized_layout;  // out
  void (*serialized_layout_deleter)(PJRT_Layouts_SerializedLayout* layout);  // out
};
static_assert(sizeof(LayoutsMemoryLayoutSerializeArgs) == 0x38, "the ABI's size");

struct LayoutsBufferMemoryLayoutArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Layouts_MemoryLayout* layout;  // out, freed with MemoryLayout_Destroy
};

// A client's or a topology's default layout for a type and dims.
template <typename Of>
struct LayoutsDefaultLayoutArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  Of* of;  // the client, or the topology description
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Layouts_MemoryLayout* layout;  // out
};
using LayoutsClientDefaultLayoutArgs = LayoutsDefaultLayoutArgs<PJRT_Client>;
using LayoutsTopologyDefaultLayoutArgs = LayoutsDefaultLayoutArgs<PJRT_TopologyDescription>;
static_assert(sizeof(LayoutsClientDefaultLayoutArgs) == 0x38, "the ABI's size");
static_assert(sizeof(LayoutsTopologyDefaultLayoutArgs) == 0x38, "the ABI's size");

// Output and parameter layouts: the executable owns the layouts it returns.
struct LayoutsExecutableLayoutsArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_layouts;  // out (num_outputs / num_parameters)
  PJRT_Layouts_MemoryLayout** layouts;  // out
};
static_assert(sizeof(LayoutsExecutableLayoutsArgs) == 0x28, "the ABI's size");

struct LayoutsExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*memory_layout_destroy)(LayoutsMemoryLayoutDestroyArgs* args);
  PJRT_Error* (*memory_layout_serialize)(LayoutsMemoryLayoutSerializeArgs* args);
  PJRT_Error* (*client_default_layout)(LayoutsClientDefaultLayoutArgs* args);
  PJRT_Error* (*buffer_memory_layout)(LayoutsBufferMemoryLayoutArgs* args);
  PJRT_Error* (*topology_default_layout)(LayoutsTopologyDefaultLayoutArgs* args);
  PJRT_Error* (*executable_output_layouts)(LayoutsExecutableLayoutsArgs* args);
  PJRT_Error* (*executable_parameter_layouts)(LayoutsExecutableLayoutsArgs* args);
};
static_assert(sizeof(LayoutsExtension) == 0x50, "the extension's layout (version 4)");

// Only after the engine loaded: ours chained before `next` when the engine
// offers a Layouts extension, else `next` itself.
PJRT_Extension_Base* OurLayoutsExtension(PJRT_Extension_Base* next);

}  // namespace myplugin
