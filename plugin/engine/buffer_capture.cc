#include "engine/buffer_capture.h"

namespace myplugin {
namespace {

thread_local BufferCapture* open_capture = nullptr;

}  // namespace

BufferCapture::BufferCapture() : outer_(open_capture) { open_capture = this; }

BufferCapture::~BufferCapture() { open_capture = outer_; }

void NoteBufferPointerQuery(PJRT_Buffer* buffer) {
  if (open_capture != nullptr) open_capture->buffer_ = buffer;
}

}  // namespace myplugin
