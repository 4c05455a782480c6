#include "engine/ffi_handler_adapter.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "xla/ffi/api/c_api.h"

namespace myplugin {
namespace {

struct Slot {
  std::atomic<XLA_FFI_Handler*> handler{nullptr};
  FfiApiVersion reported;
};

std::array<Slot, kFfiAdapterSlots> slots;

template <size_t I>
XLA_FFI_Error* Adapter(XLA_FFI_CallFrame* frame) {
  // Written before the adapter was handed out (under the registry's lock):
  // every caller sees it.
  XLA_FFI_Handler* handler = slots[I].handler.load(std::memory_order_acquire);
  const bool metadata = frame->extension_start != nullptr && frame->extension_start->type == XLA_FFI_Extension_Metadata;
  XLA_FFI_Error* error = handler(frame);
  if (metadata && error == nullptr) {
    XLA_FFI_Metadata* out = reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start)->metadata;
    out->api_version.major_version = slots[I].reported.major;
    out->api_version.minor_version = slots[I].reported.minor;
  }
  return error;
}

template <size_t... I>
constexpr std::array<XLA_FFI_Handler*, sizeof...(I)> MakeAdapters(std::index_sequence<I...>) {
  return {&Adapter<I>...};
}

constexpr std::array<XLA_FFI_Handler*, kFfiAdapterSlots> kAdapters =
    MakeAdapters(std::make_index_sequence<kFfiAdapterSlots>{});

struct Registry {
  std::mutex mu;
  std::unordered_map<void*, size_t> slot_of;  // handler -> its slot
  size_t used = 0;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // adapters outlive every static destructor
  return *registry;
}

}  // namespace

StatusOr<void*> AdaptFfiHandler(void* handler, FfiApiVersion reported) {
  if (handler == nullptr) return InvalidArgument("the FFI handler is null");
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  auto found = registry.slot_of.find(handler);
  if (found != registry.slot_of.end()) {
    const Slot& slot = slots[found->second];
    if (!(slot.reported == reported)) {
      return FailedPrecondition("the FFI handler was already adapted to FFI API " + slot.reported.ToString() +
                                ", not " + reported.ToString());
    }
    return reinterpret_cast<void*>(kAdapters[found->second]);
  }
  if (registry.used == kFfiAdapterSlots) {
    return FailedPrecondition("more than " + std::to_string(kFfiAdapterSlots) +
                              " FFI handlers newer than the engine were registered; myplugin adapts that many");
  }
  size_t index = registry.used++;
  slots[index].reported = reported;
  slots[index].handler.store(reinterpret_cast<XLA_FFI_Handler*>(handler), std::memory_order_release);
  registry.slot_of.emplace(handler, index);
  return reinterpret_cast<void*>(kAdapters[index]);
}

size_t FfiAdaptersInUse() {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mu);
  return registry.used;
}

}  // namespace myplugin
