// The device topology that a client reports: every device of every process
// (in one process, the local ones), as our own descriptions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt_c_api.h"

namespace myplugin {

class Client;            // pjrt/client.h
class GpuCompileTarget;  // pjrt/gpu_compile.h

class Topology {
 public:
  Topology(std::string platform_name, std::string platform_version,
           std::vector<PJRT_DeviceDescription*> descriptions)
      : platform_name_(std::move(platform_name)),
        platform_version_(std::move(platform_version)),
        descriptions_(std::move(descriptions)) {}

  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  const std::vector<PJRT_DeviceDescription*>& descriptions() const { return descriptions_; }

  // Set for a detached, compile-only topology (jax's get_topology_desc),
  // which jax owns and destroys; null for a client's.
  const std::shared_ptr<const GpuCompileTarget>& compile_target() const { return compile_target_; }
  void set_compile_target(std::shared_ptr<const GpuCompileTarget> target) { compile_target_ = std::move(target); }
  // The client whose topology this is (it answers default layouts); null
  // for a detached one.
  Client* owner() const { return owner_; }
  void set_owner(Client* owner) { owner_ = owner; }

 private:
  std::string platform_name_;
  std::string platform_version_;
  std::vector<PJRT_DeviceDescription*> descriptions_;
  std::shared_ptr<const GpuCompileTarget> compile_target_;
  Client* owner_ = nullptr;
};

inline PJRT_TopologyDescription* ToC(Topology* t) { return reinterpret_cast<PJRT_TopologyDescription*>(t); }
inline const Topology* FromC(const PJRT_TopologyDescription* t) { return reinterpret_cast<const Topology*>(t); }
inline Topology* FromC(PJRT_TopologyDescription* t) { return reinterpret_cast<Topology*>(t); }

// C API adapters.
PJRT_Error* PjrtTopologyCreate(PJRT_TopologyDescription_Create_Args* args);
PJRT_Error* PjrtTopologyDestroy(PJRT_TopologyDescription_Destroy_Args* args);
PJRT_Error* PjrtTopologyPlatformName(PJRT_TopologyDescription_PlatformName_Args* args);
PJRT_Error* PjrtTopologyPlatformVersion(PJRT_TopologyDescription_PlatformVersion_Args* args);
PJRT_Error* PjrtTopologyGetDeviceDescriptions(PJRT_TopologyDescription_GetDeviceDescriptions_Args* args);
PJRT_Error* PjrtTopologySerialize(PJRT_TopologyDescription_Serialize_Args* args);
PJRT_Error* PjrtTopologyDeserialize(PJRT_TopologyDescription_Deserialize_Args* args);
PJRT_Error* PjrtTopologyAttributes(PJRT_TopologyDescription_Attributes_Args* args);
PJRT_Error* PjrtCompileForTopology(PJRT_Compile_Args* args);

}  // namespace myplugin
