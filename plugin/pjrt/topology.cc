#include "pjrt/topology.h"

#include "pjrt/error.h"
#include "pjrt/gpu_compile.h"

namespace myplugin {

// A detached topology is a compile-only GPU target (pjrt/gpu_compile.h).
PJRT_Error* PjrtTopologyCreate(PJRT_TopologyDescription_Create_Args* args) {
  std::string name(args->topology_name ? args->topology_name : "", args->topology_name ? args->topology_name_size : 0);
  StatusOr<std::unique_ptr<Topology>> topology =
      GpuCompileTarget::CreateTopology(name, args->create_options, args->num_options);
  if (!topology.ok()) return ToPjrtError(topology.status());
  args->topology = ToC(topology.take().release());
  return nullptr;
}

// A client's topology is the client's; jax destroys only the detached ones.
PJRT_Error* PjrtTopologyDestroy(PJRT_TopologyDescription_Destroy_Args* args) {
  Topology* topology = args->topology ? FromC(args->topology) : nullptr;
  if (topology != nullptr && topology->compile_target()) delete topology;
  return nullptr;
}

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
  const std::shared_ptr<const GpuCompileTarget>& target = FromC(args->topology)->compile_target();
  if (!target) {
    return ToPjrtError(Unimplemented(
        "myplugin compiles ahead of time only for its GPU topologies (jax.experimental.topologies."
        "get_topology_desc(platform='myplugin', topology='1x1x8', gpu='h100')); compile for a client's devices "
        "through the client (jax.jit)"));
  }
  StatusOr<std::unique_ptr<TargetExecutable>> exec =
      target->Compile(*args->program, std::string(args->compile_options, args->compile_options_size));
  if (!exec.ok()) return ToPjrtError(exec.status());
  args->executable = ToC(exec.take().release());
  return nullptr;
}

}  // namespace myplugin
