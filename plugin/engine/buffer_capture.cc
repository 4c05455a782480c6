#include "engine/buffer_capture.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace myplugin {
namespace {

thread_local BufferCapture* open_capture = nullptr;

struct Exported {
  int exports = 0;
  bool destroy_deferred = false;
};

// Allocated once and never destroyed: the PJRT library may destroy buffers
// while the process exits.
struct ExportTable {
  std::mutex mu;
  std::unordered_map<PJRT_Buffer*, Exported> buffers;
  std::atomic<int> live{0};  // lets every other destroy skip the lock
};

ExportTable& Table() {
  static auto* table = new ExportTable();
  return *table;
}

}  // namespace

BufferCapture::BufferCapture() : outer_(open_capture) { open_capture = this; }

BufferCapture::~BufferCapture() { open_capture = outer_; }

void NoteBufferPointerQuery(PJRT_Buffer* buffer) {
  if (open_capture != nullptr) open_capture->buffer_ = buffer;
}

void HoldBufferForExport(PJRT_Buffer* buffer) {
  ExportTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  ++t.buffers[buffer].exports;
  t.live.fetch_add(1, std::memory_order_relaxed);
}

bool ReleaseBufferForExport(PJRT_Buffer* buffer) {
  ExportTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.buffers.find(buffer);
  if (it == t.buffers.end()) return false;
  t.live.fetch_sub(1, std::memory_order_relaxed);
  if (--it->second.exports > 0) return false;
  bool deferred = it->second.destroy_deferred;
  t.buffers.erase(it);
  return deferred;
}

bool DeferBufferDestroy(PJRT_Buffer* buffer) {
  ExportTable& t = Table();
  if (t.live.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.buffers.find(buffer);
  if (it == t.buffers.end()) return false;
  it->second.destroy_deferred = true;
  return true;
}

}  // namespace myplugin
