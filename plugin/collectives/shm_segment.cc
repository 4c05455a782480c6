// Making the shared-memory segment: rank 0's memfd, handed to the other ranks over an
// abstract Unix socket named in the key-value store, and mapped by each (Create).
#include "collectives/shm_communicator.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <random>

#include "collectives/shm_segment.h"
#include "common/deadline.h"

namespace myplugin::collectives {
namespace {

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

}  // namespace

// Small enough that a chunk stays in cache between its copy in, its
// reduction on another core and its copy out.
size_t ShmSlotBytes(int ranks) { return ranks <= 4 ? (512u << 10) : (256u << 10); }

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

}  // namespace myplugin::collectives
