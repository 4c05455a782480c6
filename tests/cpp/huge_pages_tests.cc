// AdviseHugePages (common/huge_pages.h): the kernel's own account of the
// mapping (/proc/self/smaps, "hg" among a range's VmFlags) shows that
// exactly the 2 MiB-aligned interior was advised, and nothing around it.
#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "check.h"
#include "common/huge_pages.h"

namespace {

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

// Whether the mapping that holds `addr` has the huge page advice, per smaps.
bool Advised(uintptr_t addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.find(" hg") != std::string::npos;
    }
  }
  return false;
}

void TestAdvisesTheAlignedInteriorOnly() {
  // 8 huge pages of address space, of which a range that starts and ends
  // mid-page is advised: 4 KiB past the first boundary, to 4 KiB past the 5th.
  const size_t span = 8 * kHuge;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  if (p == MAP_FAILED) return;
  const uintptr_t base = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t start = base + 4096, end = base + 5 * kHuge + 4096;
  const size_t advised = myplugin::AdviseHugePages(reinterpret_cast<void*>(start), end - start);
  CHECK(advised == 4 * kHuge);  // [base + 2 MiB, base + 10 MiB)
  CHECK(!Advised(start));
  CHECK(Advised(base + kHuge));
  CHECK(Advised(base + 5 * kHuge - 1));
  CHECK(!Advised(base + 5 * kHuge));
  ::munmap(p, span);
}

void TestNothingWithoutAWholeHugePage() {
  CHECK(myplugin::AdviseHugePages(nullptr, 64 * kHuge) == 0);
  static char small[4096];
  CHECK(myplugin::AdviseHugePages(small, sizeof(small)) == 0);
  // 2 MiB that straddle a boundary hold no whole huge page.
  void* p = ::mmap(nullptr, 4 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  const uintptr_t base = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  CHECK(myplugin::AdviseHugePages(reinterpret_cast<void*>(base + kHuge / 2), kHuge) == 0);
  CHECK(!Advised(base + kHuge));
  ::munmap(p, 4 * kHuge);
}

}  // namespace

void RunHugePagesTests() {
  TestAdvisesTheAlignedInteriorOnly();
  TestNothingWithoutAWholeHugePage();
}
