// Asking the kernel for transparent huge pages over memory about to be
// written for the first time. Where huge pages are `madvise`-only (a common
// setting), new memory faults in 4 KiB pages, each cleared and mapped on its
// own: filling a new 1 GiB buffer then costs several times a copy into
// memory written before (docs/performance.md, "Cross-host transfers").
#pragma once

#include <cstddef>

namespace myplugin {

// Advises huge pages over the 2 MiB-aligned part of [data, data + bytes):
// only advice, nothing is read or written, and no page outside the range is
// affected (a huge page lies wholly inside it). Returns the bytes advised
// (0 when the range holds no whole huge page or the kernel refused).
size_t AdviseHugePages(const void* data, size_t bytes);

}  // namespace myplugin
