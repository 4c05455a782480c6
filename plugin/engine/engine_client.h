// An engine PJRT_Client, owned. It is what our client layers over: the
// engine compiles, allocates and executes; we own names, devices, topology.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/gpu_memory_settings.h"
#include "common/status.h"
#include "engine/engine_library.h"

namespace myplugin {

struct EngineClientOptions {
  int num_devices = 1;
  // The CPU engine makes `num_devices` devices; the CUDA engine has one per
  // GPU it sees, restricted to `visible_devices` (CUDA ordinals) if given,
  // and must match `num_devices` unless that is 0.
  bool cpu = true;
  std::vector<int64_t> visible_devices;
  // jax's GPU memory settings: the CUDA engine's create options.
  GpuMemorySettings gpu_memory;
};

// The create options of the engine's client: the CPU engine's device count,
// or the CUDA engine's visible devices and jax's GPU memory settings (with
// jax's names and types). The values point into `options`, which must
// outlive them.
std::vector<PJRT_NamedValue> EngineCreateOptions(const EngineClientOptions& options);

class EngineClient {
 public:
  static StatusOr<std::unique_ptr<EngineClient>> Create(const EngineLibrary& engine,
                                                        const EngineClientOptions& options);
  ~EngineClient();
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  const EngineLibrary& engine() const { return engine_; }
  const PJRT_Api* api() const { return engine_.api(); }
  PJRT_Client* get() const { return client_; }

  // The engine's view of itself, read once at creation.
  const std::vector<PJRT_Device*>& addressable_devices() const { return devices_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }

  // Thin queries on engine devices and memories.
  StatusOr<int> DeviceId(PJRT_Device* device) const;
  StatusOr<std::string> DeviceKind(PJRT_Device* device) const;
  StatusOr<int> LocalHardwareId(PJRT_Device* device) const;
  StatusOr<std::vector<PJRT_Memory*>> DeviceMemories(PJRT_Device* device) const;
  StatusOr<PJRT_Memory*> DefaultMemory(PJRT_Device* device) const;
  StatusOr<std::string> MemoryKind(PJRT_Memory* memory) const;
  StatusOr<int> MemoryKindId(PJRT_Memory* memory) const;
  StatusOr<int> MemoryId(PJRT_Memory* memory) const;

 private:
  EngineClient(const EngineLibrary& engine, PJRT_Client* client) : engine_(engine), client_(client) {}
  Status ReadTopology();

  const EngineLibrary& engine_;
  PJRT_Client* client_;
  std::vector<PJRT_Device*> devices_;
  std::string platform_name_;
  std::string platform_version_;
};

}  // namespace myplugin
