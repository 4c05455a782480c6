// Our devices, device descriptions and memories. jax sees only these; each
// local one stands for one engine object, and the maps in DeviceRegistry
// turn the engine pointers that forwarded calls return back into ours.
#pragma once

#include <string>
#include <vector>

#include "pjrt_c_api.h"

namespace myplugin {

class Memory;

class DeviceDescription {
 public:
  DeviceDescription(int id, int process_index, std::string kind);
  // attributes_ points into the strings: never copied or moved.
  DeviceDescription(const DeviceDescription&) = delete;
  DeviceDescription& operator=(const DeviceDescription&) = delete;

  int id() const { return id_; }
  int process_index() const { return process_index_; }
  const std::string& kind() const { return kind_; }
  const std::string& debug_string() const { return debug_string_; }
  const std::string& to_string() const { return to_string_; }
  const std::vector<PJRT_NamedValue>& attributes() const { return attributes_; }

 private:
  int id_;
  int process_index_;
  std::string kind_;
  std::string debug_string_;
  std::string to_string_;
  std::vector<PJRT_NamedValue> attributes_;
};

class Device {
 public:
  Device(int id, int process_index, std::string kind, PJRT_Device* engine_device, int local_hardware_id,
         int engine_id = -1)
      : description_(id, process_index, std::move(kind)),
        engine_(engine_device),
        local_hardware_id_(local_hardware_id),
        engine_id_(engine_id) {}
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceDescription& description() const { return description_; }
  int id() const { return description_.id(); }
  // Null for a device of another process.
  PJRT_Device* engine() const { return engine_; }
  bool addressable() const { return engine_ != nullptr; }
  int local_hardware_id() const { return local_hardware_id_; }
  // The engine's id for this device (local devices only), which compile
  // options and device assignments use on the engine side.
  int engine_id() const { return engine_id_; }

  void AddMemory(Memory* memory, bool is_default);
  const std::vector<PJRT_Memory*>& c_memories() const { return c_memories_; }
  Memory* default_memory() const { return default_memory_; }

 private:
  DeviceDescription description_;
  PJRT_Device* engine_;
  int local_hardware_id_;
  int engine_id_;
  std::vector<PJRT_Memory*> c_memories_;
  Memory* default_memory_ = nullptr;
};

class Memory {
 public:
  Memory(int id, std::string kind, int kind_id, PJRT_Memory* engine_memory);

  int id() const { return id_; }
  const std::string& kind() const { return kind_; }
  int kind_id() const { return kind_id_; }
  const std::string& debug_string() const { return debug_string_; }
  const std::string& to_string() const { return to_string_; }
  PJRT_Memory* engine() const { return engine_; }

  void AddDevice(Device* device);
  const std::vector<PJRT_Device*>& c_devices() const { return c_devices_; }

 private:
  int id_;
  std::string kind_;
  int kind_id_;
  std::string debug_string_;
  std::string to_string_;
  PJRT_Memory* engine_;
  std::vector<PJRT_Device*> c_devices_;
};

// The opaque C types are our C++ objects seen through a cast.
inline PJRT_Device* ToC(Device* d) { return reinterpret_cast<PJRT_Device*>(d); }
inline Device* FromC(PJRT_Device* d) { return reinterpret_cast<Device*>(d); }
inline PJRT_Memory* ToC(Memory* m) { return reinterpret_cast<PJRT_Memory*>(m); }
inline Memory* FromC(PJRT_Memory* m) { return reinterpret_cast<Memory*>(m); }
inline PJRT_DeviceDescription* ToC(const DeviceDescription* d) {
  return reinterpret_cast<PJRT_DeviceDescription*>(const_cast<DeviceDescription*>(d));
}
inline const DeviceDescription* FromC(const PJRT_DeviceDescription* d) {
  return reinterpret_cast<const DeviceDescription*>(d);
}

// Null stays null, so optional device/memory fields pass through.
inline PJRT_Device* EngineOf(PJRT_Device* d) { return d == nullptr ? nullptr : FromC(d)->engine(); }
inline PJRT_Memory* EngineOf(PJRT_Memory* m) { return m == nullptr ? nullptr : FromC(m)->engine(); }

}  // namespace myplugin

namespace myplugin {

// C API adapters.
PJRT_Error* PjrtDeviceDescriptionId(PJRT_DeviceDescription_Id_Args* args);
PJRT_Error* PjrtDeviceDescriptionProcessIndex(PJRT_DeviceDescription_ProcessIndex_Args* args);
PJRT_Error* PjrtDeviceDescriptionAttributes(PJRT_DeviceDescription_Attributes_Args* args);
PJRT_Error* PjrtDeviceDescriptionKind(PJRT_DeviceDescription_Kind_Args* args);
PJRT_Error* PjrtDeviceDescriptionDebugString(PJRT_DeviceDescription_DebugString_Args* args);
PJRT_Error* PjrtDeviceDescriptionToString(PJRT_DeviceDescription_ToString_Args* args);
PJRT_Error* PjrtDeviceGetDescription(PJRT_Device_GetDescription_Args* args);
PJRT_Error* PjrtDeviceIsAddressable(PJRT_Device_IsAddressable_Args* args);
PJRT_Error* PjrtDeviceLocalHardwareId(PJRT_Device_LocalHardwareId_Args* args);
PJRT_Error* PjrtDeviceAddressableMemories(PJRT_Device_AddressableMemories_Args* args);
PJRT_Error* PjrtDeviceDefaultMemory(PJRT_Device_DefaultMemory_Args* args);
PJRT_Error* PjrtDeviceMemoryStats(PJRT_Device_MemoryStats_Args* args);
PJRT_Error* PjrtMemoryId(PJRT_Memory_Id_Args* args);
PJRT_Error* PjrtMemoryKind(PJRT_Memory_Kind_Args* args);
PJRT_Error* PjrtMemoryKindId(PJRT_Memory_Kind_Id_Args* args);
PJRT_Error* PjrtMemoryDebugString(PJRT_Memory_DebugString_Args* args);
PJRT_Error* PjrtMemoryToString(PJRT_Memory_ToString_Args* args);
PJRT_Error* PjrtMemoryAddressableByDevices(PJRT_Memory_AddressableByDevices_Args* args);

}  // namespace myplugin
