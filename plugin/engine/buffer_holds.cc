#include "engine/buffer_holds.h"

#include "pjrt_c_api.h"

namespace myplugin {

void BufferHolds::EraseIfUnused(std::unordered_map<PJRT_Buffer*, Entry>::iterator it) {
  const Entry& e = it->second;
  if (e.holds > 0 || e.deleting > 0) return;
  entries_.erase(it);
  count_.store(entries_.size(), std::memory_order_release);
}

bool BufferHolds::Hold(PJRT_Buffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[buffer];
  count_.store(entries_.size(), std::memory_order_release);
  if (e.deleting > 0 || e.delete_deferred) {
    EraseIfUnused(entries_.find(buffer));
    return false;
  }
  ++e.holds;
  return true;
}

BufferHolds::Deferred BufferHolds::Release(PJRT_Buffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(buffer);
  if (it == entries_.end() || it->second.holds == 0) return {};
  Entry& e = it->second;
  if (--e.holds > 0) return {};
  Deferred d{e.delete_deferred, e.destroy_deferred};
  EraseIfUnused(it);
  return d;
}

void BufferHolds::ReleaseThrough(const PJRT_Api* api, PJRT_Buffer* buffer) {
  const Deferred deferred = Release(buffer);
  auto drop = [api](PJRT_Error* error) {
    if (error == nullptr) return;
    PJRT_Error_Destroy_Args destroy{};
    destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
    destroy.error = error;
    api->PJRT_Error_Destroy(&destroy);
  };
  if (deferred.delete_now) {
    PJRT_Buffer_Delete_Args del{};
    del.struct_size = PJRT_Buffer_Delete_Args_STRUCT_SIZE;
    del.buffer = buffer;
    drop(api->PJRT_Buffer_Delete(&del));
  }
  if (deferred.destroy_now) {
    PJRT_Buffer_Destroy_Args destroy{};
    destroy.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
    destroy.buffer = buffer;
    drop(api->PJRT_Buffer_Destroy(&destroy));
  }
}

bool BufferHolds::DeferDelete(PJRT_Buffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[buffer];
  count_.store(entries_.size(), std::memory_order_release);
  if (e.holds > 0) {
    e.delete_deferred = true;
    return true;
  }
  ++e.deleting;
  return false;
}

void BufferHolds::DeleteEnded(PJRT_Buffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(buffer);
  if (it == entries_.end() || it->second.deleting == 0) return;
  --it->second.deleting;
  EraseIfUnused(it);
}

bool BufferHolds::DeleteDeferred(PJRT_Buffer* buffer) {
  if (count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(buffer);
  return it != entries_.end() && it->second.delete_deferred;
}

bool BufferHolds::DeferDestroy(PJRT_Buffer* buffer) {
  // jax destroys a buffer only once no thread of its own can name it, so a
  // hold of it cannot begin concurrently: an empty table needs no lock.
  if (count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(buffer);
  if (it == entries_.end() || it->second.holds == 0) return false;
  it->second.destroy_deferred = true;
  return true;
}

bool BufferHolds::HeldArguments(PJRT_Buffer* const* const* arguments, size_t devices, size_t count,
                                std::vector<int64_t>* held) {
  if (count_.load(std::memory_order_acquire) == 0 || arguments == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t before = held->size();
  for (size_t i = 0; i < count; ++i) {
    for (size_t d = 0; d < devices; ++d) {
      if (arguments[d] == nullptr) continue;
      auto it = entries_.find(arguments[d][i]);
      if (it == entries_.end() || it->second.holds == 0) continue;
      held->push_back(static_cast<int64_t>(i));
      break;
    }
  }
  return held->size() > before;
}

size_t BufferHolds::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace myplugin
