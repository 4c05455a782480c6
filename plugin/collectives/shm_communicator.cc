#include "collectives/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <random>

#include "collectives/defaults.h"
#include "collectives/streaming_copy.h"
#include "common/deadline.h"

namespace myplugin::collectives {
namespace {

constexpr uint64_t kMagic = 0x6d79706c75676e31;  // "myplugn1"
constexpr size_t kLine = 64;
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

// A file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Status Errno(const std::string& what) { return Status(Code::kUnavailable, what + ": " + std::strerror(errno)); }

// The remaining milliseconds to `deadline`, for poll(); at least 1 so a
// late call still looks once.
int PollMillis(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 1, INT_MAX));
}

Status WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline, const std::string& what) {
  while (true) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, PollMillis(deadline));
    if (r > 0) return OkStatus();
    if (r < 0 && errno != EINTR) return Errno(what);
    if (r == 0 && std::chrono::steady_clock::now() >= deadline) {
      return Status(Code::kDeadlineExceeded, what + " timed out");
    }
  }
}

// An abstract Unix socket address: no file to clean up, gone with its owner.
sockaddr_un AbstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(a.sun_path) - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

// 128 random bits in hex: names the segment and its socket.
std::string RandomToken() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int k = 0; k < 8; ++k, v >>= 4) s += hex[v & 15];
  }
  s.resize(32);
  return s;
}

// One message of `bytes` (the segment's size) with room for one descriptor.
struct FdMessage {
  uint64_t bytes = 0;
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&bytes, sizeof(bytes)};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
  }
  FdMessage(const FdMessage&) = delete;
};

Status SendFd(int sock, int fd, uint64_t bytes) {
  FdMessage m;
  m.bytes = bytes;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (::sendmsg(sock, &m.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(bytes))) {
    return Errno("sending the segment");
  }
  return OkStatus();
}

StatusOr<std::pair<Fd, uint64_t>> ReceiveFd(int sock, std::chrono::steady_clock::time_point deadline) {
  MYPLUGIN_RETURN_IF_ERROR(WaitFor(sock, POLLIN, deadline, "waiting for the segment from rank 0"));
  FdMessage m;
  ssize_t r = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  if (r == 0) return Status(Code::kUnavailable, "rank 0 closed the connection before sending the segment");
  if (r != static_cast<ssize_t>(sizeof(m.bytes))) return Errno("receiving the segment from rank 0");
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return Status(Code::kUnavailable, "rank 0 sent no segment");
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return std::make_pair(Fd(fd), m.bytes);
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

size_t HeaderBytes(int ranks) { return (kLine * (2 + ranks) + 4095) / 4096 * 4096; }

}  // namespace

// Small enough that a chunk stays in cache between its copy in, its
// reduction on another core and its copy out.
size_t ShmSlotBytes(int ranks) { return ranks <= 4 ? (512u << 10) : (256u << 10); }

// The segment: a header line, a line per rank, then two halves of one slot
// per rank. Each rank writes only its own line and slot (and, in an
// all-reduce, its own share of every slot after everyone wrote them).
struct ShmCommunicator::Segment {
  struct alignas(kLine) Header {
    uint64_t magic;
    uint64_t ranks;
    uint64_t slot_bytes;
    std::atomic<uint32_t> wake;      // bumped for sleepers; the futex word
    std::atomic<uint32_t> sleepers;  // waits that may be asleep on `wake`
  };
  struct alignas(kLine) Line {
    std::atomic<uint64_t> generation;  // the last step this rank reached
    std::atomic<uint64_t> value[2];    // what it published with its steps, by parity
  };
  Header header;
  Line line[1];  // one per rank (the segment is sized for them)
};

StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::Create(
    std::vector<int> process_group, int my_process, WaitLimits limits,
    std::shared_ptr<coordination::CoordinationClient> coordination, const std::string& key_prefix) {
  const double timeout_s = limits.arrival_s;
  const int n = static_cast<int>(process_group.size());
  int rank = -1;
  for (int r = 0; r < n; ++r) {
    if (process_group[r] == my_process) rank = r;
  }
  if (rank < 0) {
    return InvalidArgument("process " + std::to_string(my_process) + " is not in the process group " + IdList(process_group));
  }
  const std::string what = "connecting the shared-memory communicator of processes " + IdList(process_group);
  auto fail = [&](const Status& st) { return Status(st.code(), what + " failed: " + st.message()); };
  const auto deadline = After(timeout_s);
  const size_t slot = ShmSlotBytes(n);
  Fd segment_fd;
  uint64_t bytes = HeaderBytes(n) + 2 * n * slot;
  if (rank == 0) {
    const std::string token = RandomToken();
    segment_fd = Fd(::memfd_create(("myplugin-collectives-" + token).c_str(), MFD_CLOEXEC));
    if (segment_fd.get() < 0) return fail(Errno("memfd_create"));
    if (::ftruncate(segment_fd.get(), static_cast<off_t>(bytes)) != 0) return fail(Errno("sizing the segment"));
    // Reserve the memory now: a later shortage would be a SIGBUS mid-call.
    if (int e = ::posix_fallocate(segment_fd.get(), 0, static_cast<off_t>(bytes)); e != 0) {
      errno = e;
      return fail(Errno("reserving " + std::to_string(bytes >> 20) + " MiB of shared memory"));
    }
    // The header is written before any peer can see the segment.
    Segment header_only{};
    header_only.header.magic = kMagic;
    header_only.header.ranks = n;
    header_only.header.slot_bytes = slot;
    if (::pwrite(segment_fd.get(), &header_only.header, sizeof(header_only.header), 0) !=
        static_cast<ssize_t>(sizeof(header_only.header))) {
      return fail(Errno("writing the segment's header"));
    }
    if (n > 1) {
      Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (listener.get() < 0) return fail(Errno("socket"));
      const std::string name = "myplugin-shm-" + token;
      socklen_t len;
      sockaddr_un addr = AbstractAddress(name, &len);
      if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return fail(Errno("bind"));
      if (::listen(listener.get(), n) != 0) return fail(Errno("listen"));
      Status st = coordination->KeyValueSet(key_prefix + "socket", name);
      if (!st.ok()) return fail(st);
      for (int handed = 0; handed < n - 1;) {
        Status ready = WaitFor(listener.get(), POLLIN, deadline, "waiting for the other ranks to connect");
        if (!ready.ok()) return fail(ready);
        Fd peer(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (peer.get() < 0) {
          if (errno == EINTR || errno == EAGAIN) continue;
          return fail(Errno("accept"));
        }
        // The name is unguessable; the owner check keeps the segment in the
        // user's processes even if it were guessed.
        ucred cred{};
        socklen_t cl = sizeof(cred);
        if (::getsockopt(peer.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != ::getuid()) continue;
        st = SendFd(peer.get(), segment_fd.get(), bytes);
        if (!st.ok()) return fail(st);
        ++handed;
      }
    }
  } else {
    StatusOr<std::string> name = coordination->KeyValueGet(key_prefix + "socket", timeout_s);
    if (!name.ok()) return fail(name.status());
    Fd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (sock.get() < 0) return fail(Errno("socket"));
    socklen_t len;
    sockaddr_un addr = AbstractAddress(name.value(), &len);
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      return fail(Errno("connecting to rank 0 (process " + std::to_string(process_group[0]) +
                        "); are all processes in one network namespace?"));
    }
    StatusOr<std::pair<Fd, uint64_t>> got = ReceiveFd(sock.get(), deadline);
    if (!got.ok()) return fail(got.status());
    if (got.value().second != bytes) {
      return fail(Status(Code::kInternal, "rank 0 made a segment of " + std::to_string(got.value().second) +
                                              " bytes, this rank expects " + std::to_string(bytes)));
    }
    segment_fd = std::move(got.value().first);
  }
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, segment_fd.get(), 0);
  if (mapped == MAP_FAILED) return fail(Errno("mapping the segment"));
  auto* segment = static_cast<Segment*>(mapped);
  if (rank != 0 && (segment->header.magic != kMagic || segment->header.ranks != static_cast<uint64_t>(n) ||
                    segment->header.slot_bytes != slot)) {
    ::munmap(mapped, bytes);
    return fail(Status(Code::kInternal, "the segment from rank 0 is laid out for another process group"));
  }
  // The mapping keeps the memory; the descriptor closes here.
  auto comm = std::unique_ptr<ShmCommunicator>(
      new ShmCommunicator(std::move(process_group), rank, limits, std::move(coordination), segment, bytes));
  return comm;
}

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

Status ShmCommunicator::DoAllGatherBytes(const void* send, void* recv, size_t bytes, uint32_t) {
  const int n = size(), me = rank();
  char* out = static_cast<char*>(recv);
  const char* in = static_cast<const char*>(send);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, bytes - off);
    const int half = static_cast<int>(phase_++ & 1);
    std::memcpy(slot(half, me), in + off, len);
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (int r = 0; r < n; ++r) {
      char* dst = out + r * bytes + off;
      const char* src = r == me ? in + off : slot(half, r);
      if (dst != src) std::memcpy(dst, src, len);
    }
  }
  return OkStatus();
}

Status ShmCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceFunction fn,
                                    uint32_t) {
  const int n = size(), me = rank();
  const size_t esize = ByteSize(type);
  const size_t per_chunk = slot_bytes_ / esize;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (n == 1) {
    if (out != in) std::memcpy(out, in, count * esize);
    return OkStatus();
  }
  // A result larger than the caches is written around them; the share this
  // rank reduces is then summed in its slot (in cache) and streamed out.
  const bool streaming = count * esize >= kStreamingCopyBytes;
  void (*copy_out)(void*, const void*, size_t) = [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
  if (streaming) copy_out = StreamingCopy;
  for (size_t first = 0; first < count; first += per_chunk) {
    const size_t elems = std::min(per_chunk, count - first);
    const size_t base = first * esize;
    const int half = static_cast<int>(phase_++ & 1);
    // Rank r reduces share r of the chunk, in rank order: each element is
    // reduced once, so every rank gets identical bits. Only the shares the
    // others reduce go into this rank's slot; its own share is read where it
    // is, unless the result overwrites it before the sum reads it (in
    // place, from the third rank on).
    auto share = [&](int r) { return std::make_pair(elems * r / n * esize, elems * (r + 1) / n * esize); };
    auto [lo, hi] = share(me);
    const bool own_in_slot = !streaming && in == out && me >= 2;
    const char* chunk = in + base;
    std::memcpy(slot(half, me), chunk, own_in_slot ? hi : lo);
    std::memcpy(slot(half, me) + hi, chunk + hi, elems * esize - hi);
    MYPLUGIN_RETURN_IF_ERROR(Step());
    if (hi > lo) {
      auto input = [&](int r) -> const char* { return r == me && !own_in_slot ? chunk + lo : slot(half, r) + lo; };
      char* result = streaming ? slot(half, me) + lo : out + base + lo;
      const size_t k = (hi - lo) / esize;
      fn(result, input(0), input(1), k);
      for (int r = 2; r < n; ++r) fn(result, result, input(r), k);
      if (streaming) {
        StreamingCopy(out + base + lo, result, hi - lo);
      } else {
        std::memcpy(slot(half, me) + lo, result, hi - lo);  // where the others read it
      }
    }
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (int r = 0; r < n; ++r) {
      auto [a, b] = share(r);
      if (r != me && b > a) copy_out(out + base + a, slot(half, r) + a, b - a);
    }
  }
  return OkStatus();
}

Status ShmCommunicator::DoBroadcast(void* data, size_t bytes, int root) {
  char* buf = static_cast<char*>(data);
  // The whole segment carries the root's data: every slot of a half is its.
  const size_t chunk = slot_bytes_ * size();
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t len = std::min(chunk, bytes - off);
    const int half = static_cast<int>(phase_++ & 1);
    if (rank() == root) std::memcpy(slot(half, 0), buf + off, len);
    MYPLUGIN_RETURN_IF_ERROR(Step());
    if (rank() != root) std::memcpy(buf + off, slot(half, 0), len);
  }
  return OkStatus();
}

Status ShmCommunicator::DoAllToAllBytes(const void* send, void* recv, size_t bytes_per_rank, uint32_t) {
  const int n = size(), me = rank();
  const size_t sub = slot_bytes_ / n;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  for (size_t off = 0; off < bytes_per_rank; off += sub) {
    const size_t len = std::min(sub, bytes_per_rank - off);
    const int half = static_cast<int>(phase_++ & 1);
    for (int d = 0; d < n; ++d) {
      if (d != me) std::memcpy(slot(half, me) + d * sub, in + d * bytes_per_rank + off, len);
    }
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (int s = 0; s < n; ++s) {
      char* dst = out + s * bytes_per_rank + off;
      const char* src = s == me ? in + me * bytes_per_rank + off : slot(half, s) + me * sub;
      if (dst != src) std::memcpy(dst, src, len);
    }
  }
  return OkStatus();
}

Status ShmCommunicator::DoExchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                                   uint32_t) {
  const int n = size(), me = rank();
  const size_t sub = slot_bytes_ / n;
  // Every rank takes every step: first agree on the longest transfer.
  uint64_t longest = 0;
  for (const auto& b : sends) longest = std::max<uint64_t>(longest, b.bytes);
  for (const auto& b : recvs) longest = std::max<uint64_t>(longest, b.bytes);
  MYPLUGIN_RETURN_IF_ERROR(Step(longest));
  for (int r = 0; r < n; ++r) longest = std::max(longest, value_of(r));
  for (size_t off = 0; off < longest; off += sub) {
    const int half = static_cast<int>(phase_++ & 1);
    for (const auto& b : sends) {
      if (off < b.bytes) std::memcpy(slot(half, me) + b.peer * sub, static_cast<char*>(b.data) + off,
                                     std::min(sub, b.bytes - off));
    }
    MYPLUGIN_RETURN_IF_ERROR(Step());
    for (const auto& b : recvs) {
      if (off < b.bytes) std::memcpy(static_cast<char*>(b.data) + off, slot(half, b.peer) + me * sub,
                                     std::min(sub, b.bytes - off));
    }
  }
  return OkStatus();
}

void ShmCommunicator::DoAbort() {
  aborted_.store(true);
  segment_->header.wake.fetch_add(1);
  Futex(&segment_->header.wake, FUTEX_WAKE, INT_MAX, nullptr);
}

}  // namespace myplugin::collectives
