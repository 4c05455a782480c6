#include "pjrt/forwarding.h"

#include "collectives/process_runtime.h"
#include "common/gil_aware_mutex.h"
#include "engine/buffer_capture.h"
#include "engine/buffer_holds.h"
#include "pjrt/api_table.h"
#include "pjrt/client.h"
#include "pjrt/cost_analysis.h"
#include "pjrt/device.h"
#include "pjrt/entry_point.h"
#include "pjrt/executable.h"
#include "pjrt/gpu_compile.h"

namespace myplugin {
namespace {

// ---- Plugin ----

PJRT_Error* PluginInitialize(PJRT_Plugin_Initialize_Args* args) {
  if (Status st = EnsureEngineLoaded(); !st.ok()) return ToPjrtError(st);
  ChainEngineExtensions();
  return nullptr;
}

// The engine's attributes (stablehlo versions among them) tell jax which
// StableHLO it may send; the engine is the one that parses it.
PJRT_Error* PluginAttributes(PJRT_Plugin_Attributes_Args* args) {
  if (Status st = EnsureEngineLoaded(); !st.ok()) return ToPjrtError(st);
  return MYPLUGIN_CALL_ENGINE(PJRT_Plugin_Attributes, args);
}

// ---- Events: the engine's, except that errors become ours ----

struct OnReadyThunk {
  PJRT_Event_OnReadyCallback callback;
  void* user_arg;
};

void OnReadyTrampoline(PJRT_Error* engine_error, void* arg) {
  OnReadyThunk thunk = *static_cast<OnReadyThunk*>(arg);
  delete static_cast<OnReadyThunk*>(arg);
  thunk.callback(engine_error == nullptr ? nullptr : ToPjrtError(Engine().Consume(engine_error)), thunk.user_arg);
}

PJRT_Error* EventOnReady(PJRT_Event_OnReady_Args* args) {
  auto* thunk = new OnReadyThunk{args->callback, args->user_arg};
  ScopedSwap<PJRT_Event_OnReadyCallback> callback(args->callback, &OnReadyTrampoline);
  ScopedSwap<void*> user_arg(args->user_arg, thunk);
  PJRT_Error* error = MYPLUGIN_CALL_ENGINE(PJRT_Event_OnReady, args);
  if (error != nullptr) delete thunk;  // the engine did not take it
  return error;
}

// ---- Client entry points that create buffers on our devices/memories ----

template <typename Args>
PJRT_Client* EngineClientOf(Args* args) {
  return FromC(args->client)->engine_client().get();
}

PJRT_Error* ClientBufferFromHostBuffer(PJRT_Client_BufferFromHostBuffer_Args* args) {
  ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args));
  ScopedSwap<PJRT_Device*> device(args->device, EngineOf(args->device));
  ScopedSwap<PJRT_Memory*> memory(args->memory, EngineOf(args->memory));
  return MYPLUGIN_CALL_ENGINE(PJRT_Client_BufferFromHostBuffer, args);
}

PJRT_Error* ClientCreateViewOfDeviceBuffer(PJRT_Client_CreateViewOfDeviceBuffer_Args* args) {
  ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args));
  ScopedSwap<PJRT_Device*> device(args->device, EngineOf(args->device));
  ScopedSwap<PJRT_Memory*> memory(args->memory, EngineOf(args->memory));
  return MYPLUGIN_CALL_ENGINE(PJRT_Client_CreateViewOfDeviceBuffer, args);
}

PJRT_Error* ClientCreateUninitializedBuffer(PJRT_Client_CreateUninitializedBuffer_Args* args) {
  ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args));
  ScopedSwap<PJRT_Device*> device(args->device, EngineOf(args->device));
  ScopedSwap<PJRT_Memory*> memory(args->memory, EngineOf(args->memory));
  return MYPLUGIN_CALL_ENGINE(PJRT_Client_CreateUninitializedBuffer, args);
}

PJRT_Error* ClientCreateBuffersForAsyncHostToDevice(PJRT_Client_CreateBuffersForAsyncHostToDevice_Args* args) {
  ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args));
  ScopedSwap<PJRT_Memory*> memory(args->memory, EngineOf(args->memory));
  return MYPLUGIN_CALL_ENGINE(PJRT_Client_CreateBuffersForAsyncHostToDevice, args);
}

PJRT_Error* ClientCreateAliasBuffer(PJRT_Client_CreateAliasBuffer_Args* args) {
  ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args));
  ScopedSwap<PJRT_Memory*> memory(args->memory, EngineOf(args->memory));
  return MYPLUGIN_CALL_ENGINE(PJRT_Client_CreateAliasBuffer, args);
}

// Entry points whose only object of ours is the client.
#define MYPLUGIN_CLIENT_FORWARD(name)                                    \
  PJRT_Error* Forward_##name(name##_Args* args) {                        \
    ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args)); \
    return MYPLUGIN_CALL_ENGINE(name, args);                             \
  }
MYPLUGIN_CLIENT_FORWARD(PJRT_Client_DmaMap)
MYPLUGIN_CLIENT_FORWARD(PJRT_Client_DmaUnmap)
MYPLUGIN_CLIENT_FORWARD(PJRT_Client_FulfillAliasBuffer)
#undef MYPLUGIN_CLIENT_FORWARD

// The engine answers with its own device ids; jax wants global ones.
PJRT_Error* ClientDefaultDeviceAssignment(PJRT_Client_DefaultDeviceAssignment_Args* args) {
  Client* ours = FromC(args->client);
  {
    ScopedSwap<PJRT_Client*> client(args->client, EngineClientOf(args));
    if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Client_DefaultDeviceAssignment, args)) return e;
  }
  if (ours->ids_are_engine_ids()) return nullptr;
  for (size_t i = 0; i < args->default_assignment_size; ++i) {
    StatusOr<int64_t> global = ours->GlobalIdOf(args->default_assignment[i]);
    if (!global.ok()) return ToPjrtError(global.status());
    args->default_assignment[i] = static_cast<int>(global.value());
  }
  return nullptr;
}

// ---- Buffers: the engine's, with devices and memories mapped to ours ----

PJRT_Error* BufferDevice(PJRT_Buffer_Device_Args* args) {
  if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Buffer_Device, args)) return e;
  Device* device = DeviceOfEngine(args->device);
  if (device == nullptr) return ToPjrtError(Internal("buffer lives on an engine device that myplugin does not know"));
  args->device = ToC(device);
  return nullptr;
}

PJRT_Error* BufferMemory(PJRT_Buffer_Memory_Args* args) {
  if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_Buffer_Memory, args)) return e;
  Memory* memory = MemoryOfEngine(args->memory);
  if (memory == nullptr) return ToPjrtError(Internal("buffer lives in an engine memory that myplugin does not know"));
  args->memory = ToC(memory);
  return nullptr;
}

// Notes the buffer for a DLPack export waiting on this thread
// (engine/buffer_capture.h), then answers as the engine does.
PJRT_Error* BufferUnsafePointer(PJRT_Buffer_UnsafePointer_Args* args) {
  NoteBufferPointerQuery(args->buffer);
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_UnsafePointer, args);
}

// A buffer that a send, a receive or a DLPack export of ours still uses is
// deleted and destroyed by the last of them (engine/buffer_holds.h).
PJRT_Error* BufferDestroy(PJRT_Buffer_Destroy_Args* args) {
  if (collectives::ProcessRuntime::Get().buffer_holds().DeferDestroy(args->buffer)) return nullptr;
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_Destroy, args);
}

PJRT_Error* BufferDelete(PJRT_Buffer_Delete_Args* args) {
  BufferHolds& holds = collectives::ProcessRuntime::Get().buffer_holds();
  if (holds.DeferDelete(args->buffer)) return nullptr;
  PJRT_Error* error = MYPLUGIN_CALL_ENGINE(PJRT_Buffer_Delete, args);
  holds.DeleteEnded(args->buffer);
  return error;
}

// The engine keeps a buffer's external references in a list that it
// changes without a lock (DESIGN §11), and jaxlib changes it from several
// threads: np.asarray, the buffer protocol and its DLPack export add
// references with the GIL let go, and a DLPack consumer drops one on any
// thread. Every change goes under one lock, for which a thread holding the
// GIL waits without it: a last release may run numpy's deleter, which takes
// the GIL (common/gil_aware_mutex.h). No thread of ours changes the list
// (engine/buffer_holds.h).
GilAwareMutex& ExternalReferencesMutex() {
  // The runtime's attachment, never destroyed: buffers are released while
  // the process exits.
  static GilAwareMutex& mutex = collectives::ProcessRuntime::Get().Attached<GilAwareMutex>();
  return mutex;
}

PJRT_Error* BufferIncreaseExternalReferenceCount(PJRT_Buffer_IncreaseExternalReferenceCount_Args* args) {
  GilAwareMutex::Lock lock(ExternalReferencesMutex());
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_IncreaseExternalReferenceCount, args);
}

PJRT_Error* BufferDecreaseExternalReferenceCount(PJRT_Buffer_DecreaseExternalReferenceCount_Args* args) {
  GilAwareMutex::Lock lock(ExternalReferencesMutex());
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_DecreaseExternalReferenceCount, args);
}

PJRT_Error* BufferIsDeleted(PJRT_Buffer_IsDeleted_Args* args) {
  if (collectives::ProcessRuntime::Get().buffer_holds().DeleteDeferred(args->buffer)) {
    args->is_deleted = true;
    return nullptr;
  }
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_IsDeleted, args);
}

PJRT_Error* BufferCopyToDevice(PJRT_Buffer_CopyToDevice_Args* args) {
  ScopedSwap<PJRT_Device*> device(args->dst_device, EngineOf(args->dst_device));
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_CopyToDevice, args);
}

PJRT_Error* BufferCopyToMemory(PJRT_Buffer_CopyToMemory_Args* args) {
  ScopedSwap<PJRT_Memory*> memory(args->dst_memory, EngineOf(args->dst_memory));
  return MYPLUGIN_CALL_ENGINE(PJRT_Buffer_CopyToMemory, args);
}

PJRT_Error* TransferManagerDevice(PJRT_AsyncHostToDeviceTransferManager_Device_Args* args) {
  if (PJRT_Error* e = MYPLUGIN_CALL_ENGINE(PJRT_AsyncHostToDeviceTransferManager_Device, args)) return e;
  Device* device = DeviceOfEngine(args->device_out);
  if (device == nullptr) return ToPjrtError(Internal("transfer targets an engine device that myplugin does not know"));
  args->device_out = ToC(device);
  return nullptr;
}

// ---- Executables: the engine's; cost analysis is answered for them (cost_analysis.h) ----

PJRT_Error* ExecutableDestroy(PJRT_Executable_Destroy_Args* args) {
  ForgetCostAnalysis(args->executable);
  if (TargetExecutable* target = TargetExecutableOf(args->executable)) {
    delete target;
    return nullptr;
  }
  ForgetExecutableOrigin(args->executable);
  return MYPLUGIN_CALL_ENGINE(PJRT_Executable_Destroy, args);
}

// Entry points that hold no object of ours: the engine's own, unchanged
// but for the error type.
#define MYPLUGIN_PASS_THROUGH(name) \
  PJRT_Error* Forward_##name(name##_Args* args) { return MYPLUGIN_CALL_ENGINE(name, args); }
MYPLUGIN_PASS_THROUGH(PJRT_Event_Destroy)
MYPLUGIN_PASS_THROUGH(PJRT_Event_IsReady)
MYPLUGIN_PASS_THROUGH(PJRT_Event_Error)
MYPLUGIN_PASS_THROUGH(PJRT_Event_Await)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_ElementType)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_Dimensions)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_UnpaddedDimensions)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_DynamicDimensionIndices)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_GetMemoryLayout)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_OnDeviceSizeInBytes)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_ToHostBuffer)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_IsOnCpu)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_ReadyEvent)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_OpaqueDeviceMemoryDataPointer)
MYPLUGIN_PASS_THROUGH(PJRT_Buffer_CopyRawToHost)
MYPLUGIN_PASS_THROUGH(PJRT_CopyToDeviceStream_Destroy)
MYPLUGIN_PASS_THROUGH(PJRT_CopyToDeviceStream_AddChunk)
MYPLUGIN_PASS_THROUGH(PJRT_CopyToDeviceStream_TotalBytes)
MYPLUGIN_PASS_THROUGH(PJRT_CopyToDeviceStream_GranuleSize)
MYPLUGIN_PASS_THROUGH(PJRT_CopyToDeviceStream_CurrentBytes)
MYPLUGIN_PASS_THROUGH(PJRT_ExecuteContext_Create)
MYPLUGIN_PASS_THROUGH(PJRT_ExecuteContext_Destroy)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_Destroy)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_TransferData)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_BufferCount)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_BufferSize)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_SetBufferError)
MYPLUGIN_PASS_THROUGH(PJRT_AsyncHostToDeviceTransferManager_AddMetadata)
#undef MYPLUGIN_PASS_THROUGH

// Executables: the engine's, or a compile-only GPU program's
// (pjrt/gpu_compile.h), which the CUDA engine that compiled it answers.
#define MYPLUGIN_EXECUTABLE_FORWARD(name)                                                   \
  PJRT_Error* Forward_##name(name##_Args* args) {                                           \
    if (TargetExecutable* target = TargetExecutableOf(args->executable)) {                  \
      ScopedSwap<decltype(args->executable)> executable(args->executable, target->primary()); \
      return CallLibrary(target->engine(), target->engine().api()->name, args, #name);      \
    }                                                                                       \
    return MYPLUGIN_CALL_ENGINE(name, args);                                                \
  }
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_Name)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_NumOutputs)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_SizeOfGeneratedCodeInBytes)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_OutputMemoryKinds)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_OutputElementTypes)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_OutputDimensions)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_Fingerprint)
MYPLUGIN_EXECUTABLE_FORWARD(PJRT_Executable_GetCompiledMemoryStats)
#undef MYPLUGIN_EXECUTABLE_FORWARD

}  // namespace

void InstallPassThroughEntries(PJRT_Api& api) {
  api.PJRT_Plugin_Initialize = MYPLUGIN_ENTRY_POINT(PJRT_Plugin_Initialize, PluginInitialize);
  api.PJRT_Plugin_Attributes = MYPLUGIN_ENTRY_POINT(PJRT_Plugin_Attributes, PluginAttributes);
  api.PJRT_Event_OnReady = MYPLUGIN_ENTRY_POINT(PJRT_Event_OnReady, EventOnReady);
  api.PJRT_Client_BufferFromHostBuffer = MYPLUGIN_ENTRY_POINT(PJRT_Client_BufferFromHostBuffer, ClientBufferFromHostBuffer);
  api.PJRT_Client_CreateViewOfDeviceBuffer = MYPLUGIN_ENTRY_POINT(PJRT_Client_CreateViewOfDeviceBuffer, ClientCreateViewOfDeviceBuffer);
  api.PJRT_Client_CreateUninitializedBuffer = MYPLUGIN_ENTRY_POINT(PJRT_Client_CreateUninitializedBuffer, ClientCreateUninitializedBuffer);
  api.PJRT_Client_CreateBuffersForAsyncHostToDevice = MYPLUGIN_ENTRY_POINT(PJRT_Client_CreateBuffersForAsyncHostToDevice, ClientCreateBuffersForAsyncHostToDevice);
  api.PJRT_Client_CreateAliasBuffer = MYPLUGIN_ENTRY_POINT(PJRT_Client_CreateAliasBuffer, ClientCreateAliasBuffer);
  api.PJRT_Buffer_Device = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_Device, BufferDevice);
  api.PJRT_Buffer_Memory = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_Memory, BufferMemory);
  api.PJRT_Buffer_UnsafePointer = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_UnsafePointer, BufferUnsafePointer);
  api.PJRT_Buffer_Destroy = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_Destroy, BufferDestroy);
  api.PJRT_Buffer_Delete = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_Delete, BufferDelete);
  api.PJRT_Buffer_IsDeleted = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_IsDeleted, BufferIsDeleted);
  api.PJRT_Buffer_IncreaseExternalReferenceCount =
      MYPLUGIN_ENTRY_POINT(PJRT_Buffer_IncreaseExternalReferenceCount, BufferIncreaseExternalReferenceCount);
  api.PJRT_Buffer_DecreaseExternalReferenceCount =
      MYPLUGIN_ENTRY_POINT(PJRT_Buffer_DecreaseExternalReferenceCount, BufferDecreaseExternalReferenceCount);
  api.PJRT_Buffer_CopyToDevice = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_CopyToDevice, BufferCopyToDevice);
  api.PJRT_Buffer_CopyToMemory = MYPLUGIN_ENTRY_POINT(PJRT_Buffer_CopyToMemory, BufferCopyToMemory);
  api.PJRT_AsyncHostToDeviceTransferManager_Device = MYPLUGIN_ENTRY_POINT(PJRT_AsyncHostToDeviceTransferManager_Device, TransferManagerDevice);
  api.PJRT_Client_DefaultDeviceAssignment = MYPLUGIN_ENTRY_POINT(PJRT_Client_DefaultDeviceAssignment, ClientDefaultDeviceAssignment);
  api.PJRT_Executable_Destroy = MYPLUGIN_ENTRY_POINT(PJRT_Executable_Destroy, ExecutableDestroy);
  api.PJRT_Executable_GetCostAnalysis = MYPLUGIN_ENTRY_POINT(PJRT_Executable_GetCostAnalysis, ExecutableGetCostAnalysis);
  // Serialized executables are ours (pjrt/executable.h): the engine's bytes
  // in an envelope that names the build and, for multi-process programs,
  // their local and global parts.
  api.PJRT_Executable_Serialize = MYPLUGIN_ENTRY_POINT(PJRT_Executable_Serialize, PjrtExecutableSerialize);

#define MYPLUGIN_INSTALL(name) api.name = MYPLUGIN_ENTRY_POINT(name, Forward_##name)
  MYPLUGIN_INSTALL(PJRT_Client_DmaMap);
  MYPLUGIN_INSTALL(PJRT_Client_DmaUnmap);
  MYPLUGIN_INSTALL(PJRT_Client_FulfillAliasBuffer);
  MYPLUGIN_INSTALL(PJRT_Event_Destroy);
  MYPLUGIN_INSTALL(PJRT_Event_IsReady);
  MYPLUGIN_INSTALL(PJRT_Event_Error);
  MYPLUGIN_INSTALL(PJRT_Event_Await);
  MYPLUGIN_INSTALL(PJRT_Executable_Name);
  api.PJRT_Executable_NumReplicas = MYPLUGIN_ENTRY_POINT(PJRT_Executable_NumReplicas, PjrtExecutableNumReplicas);
  api.PJRT_Executable_NumPartitions = MYPLUGIN_ENTRY_POINT(PJRT_Executable_NumPartitions, PjrtExecutableNumPartitions);
  MYPLUGIN_INSTALL(PJRT_Executable_NumOutputs);
  MYPLUGIN_INSTALL(PJRT_Executable_SizeOfGeneratedCodeInBytes);
  MYPLUGIN_INSTALL(PJRT_Executable_OutputMemoryKinds);
  api.PJRT_Executable_OptimizedProgram =
      MYPLUGIN_ENTRY_POINT(PJRT_Executable_OptimizedProgram, PjrtExecutableOptimizedProgram);
  MYPLUGIN_INSTALL(PJRT_Executable_OutputElementTypes);
  MYPLUGIN_INSTALL(PJRT_Executable_OutputDimensions);
  MYPLUGIN_INSTALL(PJRT_Executable_Fingerprint);
  MYPLUGIN_INSTALL(PJRT_Executable_GetCompiledMemoryStats);
  MYPLUGIN_INSTALL(PJRT_Buffer_ElementType);
  MYPLUGIN_INSTALL(PJRT_Buffer_Dimensions);
  MYPLUGIN_INSTALL(PJRT_Buffer_UnpaddedDimensions);
  MYPLUGIN_INSTALL(PJRT_Buffer_DynamicDimensionIndices);
  MYPLUGIN_INSTALL(PJRT_Buffer_GetMemoryLayout);
  MYPLUGIN_INSTALL(PJRT_Buffer_OnDeviceSizeInBytes);
  MYPLUGIN_INSTALL(PJRT_Buffer_ToHostBuffer);
  MYPLUGIN_INSTALL(PJRT_Buffer_IsOnCpu);
  MYPLUGIN_INSTALL(PJRT_Buffer_ReadyEvent);
  MYPLUGIN_INSTALL(PJRT_Buffer_OpaqueDeviceMemoryDataPointer);
  MYPLUGIN_INSTALL(PJRT_Buffer_CopyRawToHost);
  MYPLUGIN_INSTALL(PJRT_CopyToDeviceStream_Destroy);
  MYPLUGIN_INSTALL(PJRT_CopyToDeviceStream_AddChunk);
  MYPLUGIN_INSTALL(PJRT_CopyToDeviceStream_TotalBytes);
  MYPLUGIN_INSTALL(PJRT_CopyToDeviceStream_GranuleSize);
  MYPLUGIN_INSTALL(PJRT_CopyToDeviceStream_CurrentBytes);
  MYPLUGIN_INSTALL(PJRT_ExecuteContext_Create);
  MYPLUGIN_INSTALL(PJRT_ExecuteContext_Destroy);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_Destroy);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_TransferData);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_BufferCount);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_BufferSize);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_SetBufferError);
  MYPLUGIN_INSTALL(PJRT_AsyncHostToDeviceTransferManager_AddMetadata);
#undef MYPLUGIN_INSTALL
}

}  // namespace myplugin
