// The copy that bypasses the cache (collectives/streaming_copy.h): every
// length around its 64-byte blocks, at every alignment of both ends,
// against the bytes memcpy gives, and not a byte written outside.
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"
#include "collectives/streaming_copy.h"

namespace {

void TestEveryAlignmentAndLength() {
  std::vector<uint8_t> src(4096 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  const size_t lengths[] = {0, 1, 15, 16, 63, 64, 65, 79, 80, 127, 128, 129, 1000, 4096};
  bool all_equal = true;
  for (size_t n : lengths) {
    for (size_t d_off = 0; d_off < 16; ++d_off) {
      for (size_t s_off = 0; s_off < 16; s_off += 5) {
        std::vector<uint8_t> dst(n + 64, 0xAB), want(n + 64, 0xAB);
        myplugin::collectives::StreamingCopy(dst.data() + d_off, src.data() + s_off, n);
        std::memcpy(want.data() + d_off, src.data() + s_off, n);
        all_equal &= dst == want;
      }
    }
  }
  CHECK(all_equal);
}

}  // namespace

void RunStreamingCopyTests() { TestEveryAlignmentAndLength(); }
