// Making the shared-memory segment: rank 0's memfd, handed to the other ranks over an
// abstract Unix socket named in the key-value store, and mapped by each (Create).
#include "collectives/shm_communicator.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "collectives/fd_passing.h"
#include "collectives/shm_segment.h"
#include "common/deadline.h"

namespace myplugin::collectives {


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
    StatusOr<std::pair<Fd, uint64_t>> got = ReceiveFd(sock.get(), deadline, "the segment from rank 0");
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
