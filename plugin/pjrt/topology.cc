#include "pjrt/topology.h"

#include "pjrt/error.h"

namespace myplugin {

PJRT_Error* PjrtTopologyCreate(PJRT_TopologyDescription_Create_Args* args) {
  return ToPjrtError(Unimplemented(
      "myplugin has no detached topologies: use the topology of a client (jax.devices())"));
}

// Topologies are owned by their client; jax never destroys those.
PJRT_Error* PjrtTopologyDestroy(PJRT_TopologyDescription_Destroy_Args* args) { return nullptr; }

PJRT_Error* PjrtTopologyPlatformName(PJRT_TopologyDescription_PlatformName_Args* args) {
  const std::string& name = FromC(args->topology)->platform_name();
  args->platform_name = name.data();
  args->platform_name_size = name.size();
  return nullptr;
}

PJRT_Error* PjrtTopologyPlatformVersion(PJRT_TopologyDescription_PlatformVersion_Args* args) {
  const std::string& version = FromC(args->topology)->platform_version();
  args->platform_version = version.data();
  args->platform_version_size = version.size();
  return nullptr;
}

PJRT_Error* PjrtTopologyGetDeviceDescriptions(PJRT_TopologyDescription_GetDeviceDescriptions_Args* args) {
  const auto& d = FromC(args->topology)->descriptions();
  args->descriptions = d.data();
  args->num_descriptions = d.size();
  return nullptr;
}

PJRT_Error* PjrtTopologySerialize(PJRT_TopologyDescription_Serialize_Args* args) {
  return ToPjrtError(Unimplemented("myplugin topologies cannot be serialized"));
}

PJRT_Error* PjrtTopologyDeserialize(PJRT_TopologyDescription_Deserialize_Args* args) {
  return ToPjrtError(Unimplemented("myplugin topologies cannot be deserialized"));
}

PJRT_Error* PjrtTopologyAttributes(PJRT_TopologyDescription_Attributes_Args* args) {
  args->attributes = nullptr;
  args->num_attributes = 0;
  return nullptr;
}

PJRT_Error* PjrtCompileForTopology(PJRT_Compile_Args* args) {
  return ToPjrtError(Unimplemented(
      "myplugin does not compile ahead of time for a topology: compile through a client (jax.jit)"));
}

}  // namespace myplugin
