#include "pjrt/cross_host_transfers.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/process_runtime.h"
#include "common/profile_spans.h"
#include "coordination/runtime.h"
#include "pjrt/client.h"
#include "pjrt/device.h"
#include "pjrt/error.h"
#include "pjrt/forwarding.h"

namespace myplugin {
namespace {

constexpr uint32_t kHeaderMagic = 0x58484f53;  // "XHOS"

template <typename Args>
Args Init() {
  Args a{};
  a.struct_size = sizeof(Args);
  return a;
}

// What the sender publishes first: the array's type and shape, so that a
// receiver expecting another one fails with both named instead of reading
// bytes of the wrong size.
struct Header {
  int32_t element_type = 0;
  std::vector<int64_t> dims;
  uint64_t bytes = 0;

  std::string Encode() const {
    std::string out(4 + 4 + 4 + 8 * dims.size() + 8, '\0');
    char* p = out.data();
    auto put = [&p](const void* v, size_t n) {
      std::memcpy(p, v, n);
      p += n;
    };
    const uint32_t magic = kHeaderMagic, n = static_cast<uint32_t>(dims.size());
    put(&magic, 4);
    put(&element_type, 4);
    put(&n, 4);
    for (int64_t d : dims) put(&d, 8);
    put(&bytes, 8);
    return out;
  }

  static StatusOr<Header> Decode(const std::string& in) {
    Header h;
    uint32_t magic = 0, n = 0;
    if (in.size() < 12) return Status(Code::kDataLoss, "a cross-host transfer header is truncated");
    std::memcpy(&magic, in.data(), 4);
    std::memcpy(&h.element_type, in.data() + 4, 4);
    std::memcpy(&n, in.data() + 8, 4);
    if (magic != kHeaderMagic || in.size() != 12 + 8 * size_t{n} + 8) {
      return Status(Code::kDataLoss, "a cross-host transfer header is malformed");
    }
    h.dims.resize(n);
    if (n > 0) std::memcpy(h.dims.data(), in.data() + 12, 8 * size_t{n});
    std::memcpy(&h.bytes, in.data() + 12 + 8 * size_t{n}, 8);
    return h;
  }

  std::string Describe() const {
    std::string s = "type " + std::to_string(element_type) + " [";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
    return s + "]";
  }
};

// Piece 0 is the header; pieces 1.. the bytes.
std::string KeyOf(uint64_t epoch, int64_t transfer_key, int32_t src, int32_t dst, size_t piece) {
  return "myplugin/xhost/" + std::to_string(epoch) + "/" + std::to_string(transfer_key) + "/" + std::to_string(src) +
         "/" + std::to_string(dst) + "/" + std::to_string(piece);
}

size_t PiecesOf(uint64_t bytes) { return static_cast<size_t>((bytes + kCrossHostPieceBytes - 1) / kCrossHostPieceBytes); }

std::shared_ptr<coordination::CoordinationClient> Coordination() {
  return collectives::ProcessRuntime::Get().distributed().client();
}

Status Await(PJRT_Event* event) {
  if (event == nullptr) return OkStatus();
  auto await = Init<PJRT_Event_Await_Args>();
  await.event = event;
  Status st = MYPLUGIN_ENGINE_STATUS(PJRT_Event_Await, &await);
  auto destroy = Init<PJRT_Event_Destroy_Args>();
  destroy.event = event;
  (void)MYPLUGIN_ENGINE_STATUS(PJRT_Event_Destroy, &destroy);
  return st;
}

Status SendOne(PJRT_Buffer* buffer, int32_t dst, int64_t transfer_key) {
  profile::Span span("cross-host send");  // a profile's hook (common/profile_spans.h)
  auto coordination = Coordination();
  if (!coordination) {
    return FailedPrecondition("copying an array to another process's device needs a job of several processes");
  }
  auto device = Init<PJRT_Buffer_Device_Args>();
  device.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_Device, &device));
  Device* src_device = DeviceOfEngine(device.device);
  if (src_device == nullptr) return Internal("the buffer to send lives on a device myplugin does not know");
  auto type = Init<PJRT_Buffer_ElementType_Args>();
  type.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ElementType, &type));
  auto dims = Init<PJRT_Buffer_Dimensions_Args>();
  dims.buffer = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_Dimensions, &dims));
  Header header;
  header.element_type = static_cast<int32_t>(type.type);
  header.dims.assign(dims.dims, dims.dims + dims.num_dims);
  // The bytes, in the buffer's own layout (the receiver's default one: the
  // engines lay out every array of a shape alike).
  auto to_host = Init<PJRT_Buffer_ToHostBuffer_Args>();
  to_host.src = buffer;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ToHostBuffer, &to_host));
  std::string bytes(to_host.dst_size, '\0');
  to_host.dst = bytes.data();
  to_host.event = nullptr;
  MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ToHostBuffer, &to_host));
  MYPLUGIN_RETURN_IF_ERROR(Await(to_host.event));
  header.bytes = bytes.size();
  const uint64_t epoch = coordination->epoch();
  const int32_t src = src_device->id();
  for (size_t piece = 1; piece <= PiecesOf(bytes.size()); ++piece) {
    const size_t offset = (piece - 1) * kCrossHostPieceBytes;
    Status st = coordination->KeyValueSet(KeyOf(epoch, transfer_key, src, dst, piece),
                                          bytes.substr(offset, std::min(kCrossHostPieceBytes, bytes.size() - offset)));
    if (!st.ok()) {
      return Status(st.code(), "sending " + header.Describe() + " from device " + std::to_string(src) + " to device " +
                                   std::to_string(dst) + " (transfer " + std::to_string(transfer_key) +
                                   ") through the coordination service failed: " + st.message());
    }
  }
  // The header last: a receiver that has it finds every piece in place.
  return coordination->KeyValueSet(KeyOf(epoch, transfer_key, src, dst, 0), header.Encode());
}

PJRT_Error* SendBuffers(CrossHostSendArgs* args) {
  if (args == nullptr || args->struct_size < sizeof(CrossHostSendArgs)) {
    return ToPjrtError(InvalidArgument("CrossHostSendBuffers: the args struct is smaller than this plugin needs"));
  }
  for (size_t i = 0; i < args->num_buffers; ++i) args->send_events[i] = nullptr;
  for (size_t i = 0; i < args->num_buffers; ++i) {
    Status st = SendOne(args->buffers[i], args->dst_global_device_ids[i], args->transfer_keys[i]);
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) (void)Await(args->send_events[j]);
      for (size_t j = 0; j < i; ++j) args->send_events[j] = nullptr;
      return ToPjrtError(st);
    }
    // The data has left the buffer: the send is done once the buffer is
    // (it is already).
    auto ready = Init<PJRT_Buffer_ReadyEvent_Args>();
    ready.buffer = args->buffers[i];
    if (Status r = MYPLUGIN_ENGINE_STATUS(PJRT_Buffer_ReadyEvent, &ready); !r.ok()) return ToPjrtError(r);
    args->send_events[i] = ready.event;
  }
  return nullptr;
}

struct Expected {
  int32_t element_type;
  std::vector<int64_t> dims;
  int32_t src;
  int64_t transfer_key;
};

class Receiver {
 public:
  Receiver(PJRT_AsyncHostToDeviceTransferManager* manager, std::vector<Expected> expected, int32_t dst,
           uint64_t epoch, double timeout_s, std::shared_ptr<coordination::CoordinationClient> coordination)
      : manager_(manager),
        expected_(std::move(expected)),
        dst_(dst),
        epoch_(epoch),
        timeout_s_(timeout_s),
        coordination_(std::move(coordination)) {}

  ~Receiver() {
    auto destroy = Init<PJRT_AsyncHostToDeviceTransferManager_Destroy_Args>();
    destroy.transfer_manager = manager_;
    (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_Destroy, &destroy);
  }

  // After a failure the rest fail with it: their sender is as gone.
  void Run() {
    Status failed;
    for (size_t i = 0; i < expected_.size(); ++i) {
      if (failed.ok()) failed = ReceiveOne(static_cast<int>(i));
      if (!failed.ok()) Fail(static_cast<int>(i), failed);
    }
  }

 private:
  std::string Describe(const Expected& e) const {
    return "transfer " + std::to_string(e.transfer_key) + " from device " + std::to_string(e.src) + " to device " +
           std::to_string(dst_);
  }

  Status ReceiveOne(int i) {
    profile::Span span("cross-host receive");  // a profile's hook (common/profile_spans.h)
    const Expected& e = expected_[i];
    StatusOr<std::string> encoded =
        coordination_->KeyValueGet(KeyOf(epoch_, e.transfer_key, e.src, dst_, 0), timeout_s_);
    if (!encoded.ok()) {
      return Status(encoded.status().code(), Describe(e) + ": " + encoded.status().message());
    }
    StatusOr<Header> header = Header::Decode(encoded.value());
    if (!header.ok()) return Status(header.status().code(), Describe(e) + ": " + header.status().message());
    Header want;
    want.element_type = e.element_type;
    want.dims = e.dims;
    if (header.value().element_type != e.element_type || header.value().dims != e.dims) {
      return InvalidArgument(Describe(e) + ": the sender sent " + header.value().Describe() + ", this process expects " +
                             want.Describe());
    }
    const uint64_t bytes = header.value().bytes;
    const size_t pieces = PiecesOf(bytes);
    (void)coordination_->KeyValueDelete(KeyOf(epoch_, e.transfer_key, e.src, dst_, 0));
    if (pieces == 0) {
      static const char kNothing = 0;
      return Transfer(i, &kNothing, 0, 0, true);
    }
    for (size_t piece = 1; piece <= pieces; ++piece) {
      const std::string key = KeyOf(epoch_, e.transfer_key, e.src, dst_, piece);
      StatusOr<std::string> data = coordination_->KeyValueGet(key, timeout_s_);
      if (!data.ok()) return Status(data.status().code(), Describe(e) + ": " + data.status().message());
      (void)coordination_->KeyValueDelete(key);
      const uint64_t offset = (piece - 1) * uint64_t{kCrossHostPieceBytes};
      if (data.value().size() != std::min<uint64_t>(kCrossHostPieceBytes, bytes - offset)) {
        return Status(Code::kDataLoss, Describe(e) + ": piece " + std::to_string(piece) + " has " +
                                           std::to_string(data.value().size()) + " bytes");
      }
      MYPLUGIN_RETURN_IF_ERROR(Transfer(i, data.value().data(), static_cast<int64_t>(offset),
                                        static_cast<int64_t>(data.value().size()), piece == pieces));
    }
    return OkStatus();
  }

  // Hands bytes to the engine and waits until it has them (so that `data`
  // may go away).
  Status Transfer(int i, const void* data, int64_t offset, int64_t size, bool last) {
    auto t = Init<PJRT_AsyncHostToDeviceTransferManager_TransferData_Args>();
    t.transfer_manager = manager_;
    t.buffer_index = i;
    t.data = data;
    t.offset = offset;
    t.transfer_size = size;
    t.is_last_transfer = last;
    MYPLUGIN_RETURN_IF_ERROR(MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_TransferData, &t));
    return Await(t.done_with_h2d_transfer);
  }

  void Fail(int i, const Status& why) {
    const std::string message = "myplugin: copying an array across processes failed: " + why.message();
    auto e = Init<PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args>();
    e.transfer_manager = manager_;
    e.buffer_index = i;
    e.error_code = static_cast<PJRT_Error_Code>(why.code());
    e.error_message = message.data();
    e.error_message_size = message.size();
    (void)MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_SetBufferError, &e);
  }

  PJRT_AsyncHostToDeviceTransferManager* manager_;
  std::vector<Expected> expected_;
  int32_t dst_;
  uint64_t epoch_;
  double timeout_s_;
  std::shared_ptr<coordination::CoordinationClient> coordination_;
};

PJRT_Error* ReceiveBuffers(CrossHostReceiveArgs* args) {
  if (args == nullptr || args->struct_size < sizeof(CrossHostReceiveArgs)) {
    return ToPjrtError(InvalidArgument("CrossHostReceiveBuffers: the args struct is smaller than this plugin needs"));
  }
  auto coordination = Coordination();
  if (!coordination) {
    return ToPjrtError(
        FailedPrecondition("copying an array from another process's device needs a job of several processes"));
  }
  Client* client = FromC(args->client);
  Device* device = FromC(args->device);
  if (device->default_memory() == nullptr) return ToPjrtError(Internal("the destination device has no memory"));
  std::vector<PJRT_ShapeSpec> specs(args->num_shapes);
  std::vector<Expected> expected;
  for (size_t i = 0; i < args->num_shapes; ++i) {
    specs[i].struct_size = PJRT_ShapeSpec_STRUCT_SIZE;
    specs[i].dims = args->num_dims[i];
    specs[i].num_dims = args->shape_num_dims[i];
    specs[i].element_type = args->element_types[i];
    expected.push_back({static_cast<int32_t>(args->element_types[i]),
                        std::vector<int64_t>(args->num_dims[i], args->num_dims[i] + args->shape_num_dims[i]),
                        args->src_global_device_ids[i], args->transfer_keys[i]});
  }
  auto create = Init<PJRT_Client_CreateBuffersForAsyncHostToDevice_Args>();
  create.client = client->engine_client().get();
  create.shape_specs = specs.data();
  create.num_shape_specs = specs.size();
  create.memory = device->default_memory()->engine();
  if (Status st = MYPLUGIN_ENGINE_STATUS(PJRT_Client_CreateBuffersForAsyncHostToDevice, &create); !st.ok()) {
    return ToPjrtError(st);
  }
  auto receiver = std::make_unique<Receiver>(create.transfer_manager, std::move(expected), device->id(),
                                             coordination->epoch(), client->settings().collective_timeout_s,
                                             coordination);
  for (size_t i = 0; i < args->num_shapes; ++i) {
    auto retrieve = Init<PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args>();
    retrieve.transfer_manager = create.transfer_manager;
    retrieve.buffer_index = static_cast<int>(i);
    if (Status st = MYPLUGIN_ENGINE_STATUS(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer, &retrieve);
        !st.ok()) {
      return ToPjrtError(st);  // the receiver's destructor frees the manager and the buffers not yet taken
    }
    args->buffers[i] = retrieve.buffer_out;
  }
  // The buffers are returned now and become ready as their bytes come; a
  // failure (a dead peer, a timeout, another shape) becomes their error.
  std::thread([r = std::move(receiver)] { r->Run(); }).detach();
  return nullptr;
}

// The older API: jaxlib turns to it only when the two above answer UNIMPLEMENTED.
PJRT_Error* MakeCrossHostReceiveBuffers(void*) {
  return ToPjrtError(Unimplemented("myplugin receives cross-host transfers through CrossHostReceiveBuffers"));
}

void CopyToRemoteDevice(CopyToRemoteDeviceArgs* args) {
  if (args->event != nullptr) (void)Await(args->event);
  if (args->descriptor_destructor != nullptr && args->struct_size >= sizeof(CopyToRemoteDeviceArgs)) {
    args->descriptor_destructor(args->serialized_descriptor, args->serialized_descriptor_size);
  }
  if (args->on_done.on_done != nullptr) {
    args->on_done.on_done(
        ToPjrtError(Unimplemented("myplugin sends cross-host transfers through CrossHostSendBuffers")), false,
        args->on_done.user_arg);
  }
}

}  // namespace

PJRT_Extension_Base* OurCrossHostTransfersExtension(PJRT_Extension_Base* next) {
  static CrossHostTransfersExtension extension = [] {
    CrossHostTransfersExtension e{};
    e.base.struct_size = sizeof(CrossHostTransfersExtension);
    e.base.type = PJRT_Extension_Type_CrossHostTransfers;
    e.make_cross_host_receive_buffers = MakeCrossHostReceiveBuffers;
    e.copy_to_remote_device = CopyToRemoteDevice;
    e.cross_host_receive_buffers = ReceiveBuffers;
    e.cross_host_send_buffers = SendBuffers;
    return e;
  }();
  extension.base.next = next;
  return &extension.base;
}

}  // namespace myplugin
