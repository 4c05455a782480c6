// The PJRT CrossHostTransfers extension: jax.device_put of an array onto
// devices of another process. jaxlib asks for it by its presence in the
// PJRT_Api extension chain (then `supports_cross_host_transfers` is true),
// and on every process calls, in the same order, CrossHostSendBuffers where
// it owns the source shard and CrossHostReceiveBuffers where it owns the
// destination, with transfer keys that every process numbers alike.
//
// The bytes go straight from the sending process to the receiving one
// (collectives/transfer_endpoint.h): read from the source buffer a piece at
// a time (PJRT_Buffer_CopyRawToHost, so on the CUDA engine the path is
// staged through host memory), and handed to the destination buffer a piece
// at a time (an async host-to-device transfer manager). A send returns at
// once; its event fires when the last byte left, and the source buffer is
// kept (its destroy deferred) until then. A receive returns its buffers at
// once; they become ready when their data arrived, or carry the error (a
// peer that failed, a timeout, a shape that differs).
//
// The structs below are the ABI of XLA's
// pjrt_c_api_cross_host_transfers_extension.h (not shipped with the header we
// build against), as the served jaxlibs (0.10.2 to 0.12) call it: version 6
// and 7 layouts, field for field.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pjrt_c_api.h"

namespace myplugin {

struct CrossHostSendArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  size_t num_buffers;
  PJRT_Buffer** buffers;
  const int32_t* dst_global_device_ids;
  const int64_t* transfer_keys;
  PJRT_Event** send_events;  // out, one per buffer
};
static_assert(sizeof(CrossHostSendArgs) == 0x40, "the size jaxlib passes");

struct CrossHostReceiveArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  size_t num_shapes;
  size_t* shape_num_dims;
  const int64_t** num_dims;  // dims of shape i (XLA's name)
  PJRT_Buffer_Type* element_types;
  PJRT_Buffer_MemoryLayout** layouts;  // may be null per shape
  PJRT_Device* device;
  const int32_t* src_global_device_ids;
  const int64_t* transfer_keys;
  PJRT_Buffer** buffers;  // out
};
static_assert(sizeof(CrossHostReceiveArgs) == 0x60, "the size jaxlib passes");

// The older API (receive descriptors through jax's key-value store):
// answered UNIMPLEMENTED; jaxlib uses it only when the two above are.
struct CrossHostRemoteSendCallbackInfo {
  void* user_arg;
  void (*on_done)(PJRT_Error* error, bool sends_were_enqueued, void* user_arg);
};
struct CopyToRemoteDeviceArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Event* event;
  char** serialized_descriptor;
  size_t* serialized_descriptor_size;
  CrossHostRemoteSendCallbackInfo on_done;
  void (*descriptor_destructor)(char** data, size_t* size);  // version 6 on
};
static_assert(sizeof(CopyToRemoteDeviceArgs) == 0x48, "the size jaxlib passes");

struct CrossHostTransfersExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*make_cross_host_receive_buffers)(void* args);
  void (*copy_to_remote_device)(CopyToRemoteDeviceArgs* args);
  PJRT_Error* (*cross_host_receive_buffers)(CrossHostReceiveArgs* args);
  PJRT_Error* (*cross_host_send_buffers)(CrossHostSendArgs* args);
};
static_assert(sizeof(CrossHostTransfersExtension) == 0x38, "the extension's layout");

// The extension, to chain into PJRT_Api (`next` is the rest of the chain).
PJRT_Extension_Base* OurCrossHostTransfersExtension(PJRT_Extension_Base* next);

}  // namespace myplugin
