#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace myplugin {
namespace {

// x86-64's and arm64's (4 KiB base pages) transparent huge page size.
constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;

}  // namespace

size_t AdviseHugePages(const void* data, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  if (data == nullptr || bytes < kHugePageBytes || begin > UINTPTR_MAX - bytes) return 0;
  const uintptr_t lo = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t hi = (begin + bytes) & ~(kHugePageBytes - 1);
  if (hi <= lo) return 0;
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE) != 0) return 0;
  return hi - lo;
}

}  // namespace myplugin
