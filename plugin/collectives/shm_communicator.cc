// The same-host backend's steps: the communicator over its mapped segment, Step (wait
// for every rank: spin, then sleep on the segment's futex), the slots, and abort.
#include "collectives/shm_communicator.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <string>

#include "collectives/shm_segment.h"

namespace myplugin::collectives {
namespace {

// How a wait spends its time: spinning answers within a microsecond when
// every rank has a core; past kSpinFor it sleeps on a futex in the segment,
// which the last rank to arrive wakes, so a rank without a core gets one at
// once (yielding instead hands the core to any other process on a busy
// host). Sleeps end every millisecond to look at the abort flag and the
// deadline.
constexpr auto kSpinFor = std::chrono::microseconds(30);
constexpr long kSleepNanos = 1000 * 1000;

// The cores this process may run on.
int UsableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

ShmCommunicator::ShmCommunicator(std::vector<int> process_group, int rank, WaitLimits limits,
                                 std::shared_ptr<coordination::CoordinationClient> coordination, Segment* segment,
                                 size_t segment_bytes)
    : Communicator(std::move(process_group), rank, limits, std::move(coordination)),
      segment_(segment),
      data_(reinterpret_cast<char*>(segment) + HeaderBytes(size())),
      segment_bytes_(segment_bytes),
      slot_bytes_(ShmSlotBytes(size())),
      spin_for_(size() > UsableCores() ? std::chrono::microseconds(0) : kSpinFor) {}

ShmCommunicator::~ShmCommunicator() { ::munmap(segment_, segment_bytes_); }

char* ShmCommunicator::slot(int half, int r) const {
  return data_ + (static_cast<size_t>(half) * size() + r) * slot_bytes_;
}

uint64_t ShmCommunicator::value_of(int r) const {
  return segment_->line[r].value[generation_ & 1].load(std::memory_order_relaxed);
}

Status ShmCommunicator::Step(uint64_t value) {
  // The cap bounds a whole call, also one whose steps never wait long.
  if (CapReached()) return Status(Code::kDeadlineExceeded, "the call reached its cap");
  const uint64_t gen = ++generation_;
  Segment::Header& h = segment_->header;
  segment_->line[rank()].value[gen & 1].store(value, std::memory_order_relaxed);
  segment_->line[rank()].generation.store(gen, std::memory_order_seq_cst);
  if (h.sleepers.load(std::memory_order_seq_cst) > 0) {
    h.wake.fetch_add(1, std::memory_order_seq_cst);
    Futex(&h.wake, FUTEX_WAKE, INT_MAX, nullptr);
  }
  const int n = size();
  int next = 0;  // ranks below it have arrived
  // A rank arriving is progress: the wait for the rest starts again.
  auto last_progress = std::chrono::steady_clock::now();
  auto arrived = [&] {
    const int before = next;
    while (next < n && segment_->line[next].generation.load(std::memory_order_acquire) >= gen) ++next;
    if (next != before) last_progress = std::chrono::steady_clock::now();
    return next == n;
  };
  const auto start = std::chrono::steady_clock::now();
  do {
    for (int i = 0; i < 64; ++i) {
      if (arrived()) return OkStatus();
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  } while (std::chrono::steady_clock::now() - start < spin_for_);
  while (true) {
    h.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = h.wake.load(std::memory_order_seq_cst);
    const bool done = arrived();
    if (!done && !aborted_.load(std::memory_order_relaxed)) {
      timespec t{0, kSleepNanos};
      Futex(&h.wake, FUTEX_WAIT, seen, &t);
    }
    h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (done || arrived()) return OkStatus();
    if (aborted_.load(std::memory_order_relaxed)) return Status(Code::kAborted, "the call was aborted");
    if (std::chrono::steady_clock::now() >= WaitDeadline(last_progress)) {
      return Status(Code::kDeadlineExceeded, std::string(Agreed() ? "no progress: " : "timed out ") +
                                                 "waiting for process " + std::to_string(process_group()[next]) +
                                                 " at shared-memory step " + std::to_string(gen));
    }
  }
}

void ShmCommunicator::DoAbort() {
  aborted_.store(true);
  segment_->header.wake.fetch_add(1);
  Futex(&segment_->header.wake, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace myplugin::collectives
