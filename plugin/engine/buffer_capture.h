// The engine buffers behind the Python module's DLPack exports
// (python/dlpack_export.cc).
//
// Which buffer: jaxlib hands no PJRT_Buffer to Python; what it does do is
// call PJRT_Buffer_UnsafePointer with the array's buffer, synchronously, on
// the thread that called `Array.unsafe_buffer_pointer()`. So the export
// opens a BufferCapture on its thread, calls that method, and our
// PJRT_Buffer_UnsafePointer entry point notes the buffer it was asked about
// into the open capture. With no capture open on the thread, noting is a
// no-op.
//
// How long the memory stays: engine/buffer_holds.h.
//
// Lives in libmyplugin_runtime: the PJRT library notes, the Python module
// captures, and both must see the same thread-local state.
#pragma once

struct PJRT_Buffer;

namespace myplugin {

class BufferCapture {
 public:
  BufferCapture();
  ~BufferCapture();
  BufferCapture(const BufferCapture&) = delete;
  BufferCapture& operator=(const BufferCapture&) = delete;

  // The buffer of the last PJRT_Buffer_UnsafePointer call on this thread
  // while the capture was open; nullptr if none.
  PJRT_Buffer* buffer() const { return buffer_; }

 private:
  friend void NoteBufferPointerQuery(PJRT_Buffer* buffer);
  PJRT_Buffer* buffer_ = nullptr;
  BufferCapture* outer_ = nullptr;  // captures nest (a capture inside another's call)
};

// Called by our PJRT_Buffer_UnsafePointer entry point.
void NoteBufferPointerQuery(PJRT_Buffer* buffer);

}  // namespace myplugin
