// Our PJRT client: the devices, memories and topology that jax sees, over
// one engine client that does the work.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordination/process_info.h"
#include "engine/engine_client.h"
#include "pjrt/client_options.h"
#include "pjrt/device.h"
#include "pjrt/topology.h"
#include "pjrt_c_api.h"
#include "spmd/multiprocess_compiler.h"

namespace myplugin {

inline constexpr char kPlatformName[] = "myplugin";
inline constexpr char kPluginVersion[] = "0.1.0";

class Client {
 public:
  static StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  EngineClient& engine_client() { return *engine_client_; }
  int process_index() const { return process_index_; }
  const std::string& platform_version() const { return platform_version_; }
  Topology* topology() { return topology_.get(); }
  // Parsed with the options at creation (client_options.h).
  const Settings& settings() const { return settings_; }

  const std::vector<PJRT_Device*>& c_devices() const { return c_devices_; }
  const std::vector<PJRT_Device*>& c_addressable_devices() const { return c_addressable_devices_; }
  const std::vector<PJRT_Memory*>& c_memories() const { return c_memories_; }

  // Null when no device has that id / local hardware id.
  Device* LookupDevice(int id) const;
  Device* LookupAddressableDevice(int local_hardware_id) const;

  // Global device ids (jax's) and the engine's ids for the same devices.
  // True only for a job of this process alone whose ids coincide with the
  // engine's: then nothing needs rewriting or checking.
  bool ids_are_engine_ids() const { return ids_are_engine_ids_; }
  StatusOr<int64_t> EngineIdOf(int64_t global_id) const;
  StatusOr<int64_t> GlobalIdOf(int64_t engine_id) const;

  // Whether a program with this [replica][partition] device assignment must
  // go through the multi-process compile: it names another process's
  // device (or MYPLUGIN_SPMD_REWRITE=always asks for it on any program of
  // several devices, which tests the path inside one process). An unknown
  // device id is an error.
  StatusOr<bool> NeedsMultiProcessCompile(const std::vector<std::vector<int64_t>>& assignment) const;
  spmd::MultiProcessCompiler& multiprocess_compiler();

 private:
  Client(std::unique_ptr<EngineClient> engine_client, int process_index, Settings settings)
      : engine_client_(std::move(engine_client)), process_index_(process_index), settings_(std::move(settings)) {}
  // `processes` is the global topology (just this process when alone).
  Status BuildDevices(const std::vector<coordination::ProcessInfo>& processes);
  Status AddLocalDevices(int first_id);
  void AddRemoteDevices(int process_index, const coordination::ProcessInfo& info, int first_id);

  std::unique_ptr<EngineClient> engine_client_;
  int process_index_;
  const Settings settings_;
  std::string platform_version_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Memory>> memories_;         // local: the engine's
  std::vector<std::unique_ptr<Memory>> remote_memories_;  // other processes' devices
  std::vector<PJRT_Device*> c_devices_;
  std::vector<PJRT_Device*> c_addressable_devices_;
  std::vector<PJRT_Memory*> c_memories_;
  std::unique_ptr<Topology> topology_;
  bool ids_are_engine_ids_ = true;
  std::once_flag compiler_once_;
  std::unique_ptr<spmd::MultiProcessCompiler> compiler_;
};

inline PJRT_Client* ToC(Client* c) { return reinterpret_cast<PJRT_Client*>(c); }
inline Client* FromC(PJRT_Client* c) { return reinterpret_cast<Client*>(c); }

// Engine objects that forwarded calls hand back, mapped to ours. Null when
// the engine object belongs to no live client of ours.
Device* DeviceOfEngine(PJRT_Device* engine_device);
Memory* MemoryOfEngine(PJRT_Memory* engine_memory);

// C API adapters.
PJRT_Error* PjrtClientCreate(PJRT_Client_Create_Args* args);
PJRT_Error* PjrtClientDestroy(PJRT_Client_Destroy_Args* args);
PJRT_Error* PjrtClientPlatformName(PJRT_Client_PlatformName_Args* args);
PJRT_Error* PjrtClientProcessIndex(PJRT_Client_ProcessIndex_Args* args);
PJRT_Error* PjrtClientPlatformVersion(PJRT_Client_PlatformVersion_Args* args);
PJRT_Error* PjrtClientTopologyDescription(PJRT_Client_TopologyDescription_Args* args);
PJRT_Error* PjrtClientDevices(PJRT_Client_Devices_Args* args);
PJRT_Error* PjrtClientAddressableDevices(PJRT_Client_AddressableDevices_Args* args);
PJRT_Error* PjrtClientLookupDevice(PJRT_Client_LookupDevice_Args* args);
PJRT_Error* PjrtClientLookupAddressableDevice(PJRT_Client_LookupAddressableDevice_Args* args);
PJRT_Error* PjrtClientAddressableMemories(PJRT_Client_AddressableMemories_Args* args);
PJRT_Error* PjrtClientUpdateGlobalProcessInfo(PJRT_Client_UpdateGlobalProcessInfo_Args* args);

}  // namespace myplugin
