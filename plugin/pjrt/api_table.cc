// The PJRT_Api table: our entry points where the object is ours, the
// engine's (through forwarding.cc) where it is the engine's. The table is
// built against the header we compile with, so it reports that header's
// version and size; jaxlib then calls nothing beyond it.
#include "pjrt/api_table.h"

#include <mutex>

#include "pjrt/client.h"
#include "pjrt/cross_host_transfers.h"
#include "pjrt/device.h"
#include "pjrt/engine_extensions.h"
#include "pjrt/entry_point.h"
#include "pjrt/error.h"
#include "pjrt/executable.h"
#include "pjrt/ffi_extension.h"
#include "pjrt/forwarding.h"
#include "pjrt/layouts_extension.h"
#include "pjrt/profiler_extension.h"
#include "pjrt/topology.h"

namespace myplugin {
namespace {

PJRT_Api BuildApi() {
  PJRT_Api api{};
  api.struct_size = PJRT_Api_STRUCT_SIZE;
  // Our extensions: the FFI's, cross-host transfers (whose presence tells
  // jaxlib that jax.device_put may cross processes), the custom partitioner
  // and the profiler's (jaxlib looks for both when it loads the plugin,
  // before any engine is known). The engine's forwarded ones (layouts among
  // them) join them once the engine is known (ChainEngineExtensions;
  // pjrt/engine_extensions.h).
  api.extension_start = OurProfilerExtension(
      OurCustomPartitionerExtension(OurCrossHostTransfersExtension(OurFfiExtension())));
  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;
  api.pjrt_api_version.major_version = PJRT_API_MAJOR;
  api.pjrt_api_version.minor_version = PJRT_API_MINOR;

  InstallPassThroughEntries(api);

  // Every entry goes through MYPLUGIN_ENTRY_POINT (pjrt/entry_point.h) but
  // these two, which cannot report an error.
  api.PJRT_Error_Destroy = PjrtErrorDestroy;
  api.PJRT_Error_Message = PjrtErrorMessage;
  api.PJRT_Error_GetCode = MYPLUGIN_ENTRY_POINT(PJRT_Error_GetCode, PjrtErrorGetCode);

  api.PJRT_Client_Create = MYPLUGIN_ENTRY_POINT(PJRT_Client_Create, PjrtClientCreate);
  api.PJRT_Client_Destroy = MYPLUGIN_ENTRY_POINT(PJRT_Client_Destroy, PjrtClientDestroy);
  api.PJRT_Client_PlatformName = MYPLUGIN_ENTRY_POINT(PJRT_Client_PlatformName, PjrtClientPlatformName);
  api.PJRT_Client_ProcessIndex = MYPLUGIN_ENTRY_POINT(PJRT_Client_ProcessIndex, PjrtClientProcessIndex);
  api.PJRT_Client_PlatformVersion = MYPLUGIN_ENTRY_POINT(PJRT_Client_PlatformVersion, PjrtClientPlatformVersion);
  api.PJRT_Client_TopologyDescription = MYPLUGIN_ENTRY_POINT(PJRT_Client_TopologyDescription, PjrtClientTopologyDescription);
  api.PJRT_Client_Devices = MYPLUGIN_ENTRY_POINT(PJRT_Client_Devices, PjrtClientDevices);
  api.PJRT_Client_AddressableDevices = MYPLUGIN_ENTRY_POINT(PJRT_Client_AddressableDevices, PjrtClientAddressableDevices);
  api.PJRT_Client_LookupDevice = MYPLUGIN_ENTRY_POINT(PJRT_Client_LookupDevice, PjrtClientLookupDevice);
  api.PJRT_Client_LookupAddressableDevice = MYPLUGIN_ENTRY_POINT(PJRT_Client_LookupAddressableDevice, PjrtClientLookupAddressableDevice);
  api.PJRT_Client_AddressableMemories = MYPLUGIN_ENTRY_POINT(PJRT_Client_AddressableMemories, PjrtClientAddressableMemories);
  api.PJRT_Client_UpdateGlobalProcessInfo = MYPLUGIN_ENTRY_POINT(PJRT_Client_UpdateGlobalProcessInfo, PjrtClientUpdateGlobalProcessInfo);
  api.PJRT_Client_Compile = MYPLUGIN_ENTRY_POINT(PJRT_Client_Compile, PjrtClientCompile);
  api.PJRT_Executable_DeserializeAndLoad = MYPLUGIN_ENTRY_POINT(PJRT_Executable_DeserializeAndLoad, PjrtExecutableDeserializeAndLoad);

  api.PJRT_DeviceDescription_Id = MYPLUGIN_ENTRY_POINT(PJRT_DeviceDescription_Id, PjrtDeviceDescriptionId);
  api.PJRT_DeviceDescription_ProcessIndex = MYPLUGIN_ENTRY_POINT(PJRT_DeviceDescription_ProcessIndex, PjrtDeviceDescriptionProcessIndex);
  api.PJRT_DeviceDescription_Attributes = MYPLUGIN_ENTRY_POINT(PJRT_DeviceDescription_Attributes, PjrtDeviceDescriptionAttributes);
  api.PJRT_DeviceDescription_Kind = MYPLUGIN_ENTRY_POINT(PJRT_DeviceDescription_Kind, PjrtDeviceDescriptionKind);
  api.PJRT_DeviceDescription_DebugString = MYPLUGIN_ENTRY_POINT(PJRT_DeviceDescription_DebugString, PjrtDeviceDescriptionDebugString);
  api.PJRT_DeviceDescription_ToString = MYPLUGIN_ENTRY_POINT(PJRT_DeviceDescription_ToString, PjrtDeviceDescriptionToString);
  api.PJRT_Device_GetDescription = MYPLUGIN_ENTRY_POINT(PJRT_Device_GetDescription, PjrtDeviceGetDescription);
  api.PJRT_Device_IsAddressable = MYPLUGIN_ENTRY_POINT(PJRT_Device_IsAddressable, PjrtDeviceIsAddressable);
  api.PJRT_Device_LocalHardwareId = MYPLUGIN_ENTRY_POINT(PJRT_Device_LocalHardwareId, PjrtDeviceLocalHardwareId);
  api.PJRT_Device_AddressableMemories = MYPLUGIN_ENTRY_POINT(PJRT_Device_AddressableMemories, PjrtDeviceAddressableMemories);
  api.PJRT_Device_DefaultMemory = MYPLUGIN_ENTRY_POINT(PJRT_Device_DefaultMemory, PjrtDeviceDefaultMemory);
  api.PJRT_Device_MemoryStats = MYPLUGIN_ENTRY_POINT(PJRT_Device_MemoryStats, PjrtDeviceMemoryStats);
  api.PJRT_Memory_Id = MYPLUGIN_ENTRY_POINT(PJRT_Memory_Id, PjrtMemoryId);
  api.PJRT_Memory_Kind = MYPLUGIN_ENTRY_POINT(PJRT_Memory_Kind, PjrtMemoryKind);
  api.PJRT_Memory_Kind_Id = MYPLUGIN_ENTRY_POINT(PJRT_Memory_Kind_Id, PjrtMemoryKindId);
  api.PJRT_Memory_DebugString = MYPLUGIN_ENTRY_POINT(PJRT_Memory_DebugString, PjrtMemoryDebugString);
  api.PJRT_Memory_ToString = MYPLUGIN_ENTRY_POINT(PJRT_Memory_ToString, PjrtMemoryToString);
  api.PJRT_Memory_AddressableByDevices = MYPLUGIN_ENTRY_POINT(PJRT_Memory_AddressableByDevices, PjrtMemoryAddressableByDevices);

  api.PJRT_LoadedExecutable_Destroy = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_Destroy, PjrtLoadedExecutableDestroy);
  api.PJRT_LoadedExecutable_GetExecutable = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_GetExecutable, PjrtLoadedExecutableGetExecutable);
  api.PJRT_LoadedExecutable_AddressableDevices = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_AddressableDevices, PjrtLoadedExecutableAddressableDevices);
  api.PJRT_LoadedExecutable_Delete = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_Delete, PjrtLoadedExecutableDelete);
  api.PJRT_LoadedExecutable_IsDeleted = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_IsDeleted, PjrtLoadedExecutableIsDeleted);
  api.PJRT_LoadedExecutable_Execute = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_Execute, PjrtLoadedExecutableExecute);
  api.PJRT_LoadedExecutable_Fingerprint = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_Fingerprint, PjrtLoadedExecutableFingerprint);
  api.PJRT_LoadedExecutable_GetDeviceAssignment = MYPLUGIN_ENTRY_POINT(PJRT_LoadedExecutable_GetDeviceAssignment, PjrtLoadedExecutableGetDeviceAssignment);

  api.PJRT_TopologyDescription_Create = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_Create, PjrtTopologyCreate);
  api.PJRT_TopologyDescription_Destroy = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_Destroy, PjrtTopologyDestroy);
  api.PJRT_TopologyDescription_PlatformName = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_PlatformName, PjrtTopologyPlatformName);
  api.PJRT_TopologyDescription_PlatformVersion = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_PlatformVersion, PjrtTopologyPlatformVersion);
  api.PJRT_TopologyDescription_GetDeviceDescriptions = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_GetDeviceDescriptions, PjrtTopologyGetDeviceDescriptions);
  api.PJRT_TopologyDescription_Serialize = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_Serialize, PjrtTopologySerialize);
  api.PJRT_TopologyDescription_Deserialize = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_Deserialize, PjrtTopologyDeserialize);
  api.PJRT_TopologyDescription_Attributes = MYPLUGIN_ENTRY_POINT(PJRT_TopologyDescription_Attributes, PjrtTopologyAttributes);
  api.PJRT_Compile = MYPLUGIN_ENTRY_POINT(PJRT_Compile, PjrtCompileForTopology);
  return api;
}

PJRT_Api& TheApi() {
  static PJRT_Api api = BuildApi();
  return api;
}

}  // namespace

void ChainEngineExtensions() {
  static std::once_flag once;
  std::call_once(once, [] {
    PJRT_Api& api = TheApi();
    api.extension_start = ForwardEngineExtensions(Engine(), OurLayoutsExtension(api.extension_start));
  });
}

}  // namespace myplugin

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() { return &myplugin::TheApi(); }
