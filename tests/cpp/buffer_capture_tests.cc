// The engine buffers behind DLPack exports (engine/buffer_capture.h): a
// capture sees only its own thread's query, nests, and closes.
#include <cstdint>
#include <thread>

#include "check.h"
#include "engine/buffer_capture.h"

namespace {

using namespace myplugin;

PJRT_Buffer* Fake(int i) { return reinterpret_cast<PJRT_Buffer*>(static_cast<intptr_t>(0x1000 + i)); }

void TestCapture() {
  NoteBufferPointerQuery(Fake(0));  // no capture open: nothing to note into
  {
    BufferCapture capture;
    CHECK(capture.buffer() == nullptr);
    // Another thread's query is not this capture's.
    std::thread other([] { NoteBufferPointerQuery(Fake(1)); });
    other.join();
    CHECK(capture.buffer() == nullptr);
    NoteBufferPointerQuery(Fake(2));
    CHECK(capture.buffer() == Fake(2));
    {
      BufferCapture inner;
      NoteBufferPointerQuery(Fake(3));
      CHECK(inner.buffer() == Fake(3));
    }
    CHECK(capture.buffer() == Fake(2));  // the inner capture took it
    NoteBufferPointerQuery(Fake(4));
    CHECK(capture.buffer() == Fake(4));
  }
}

}  // namespace

void RunBufferCaptureTests() {
  TestCapture();
}
