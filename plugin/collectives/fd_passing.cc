#include "collectives/fd_passing.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

namespace myplugin::collectives {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Status Errno(const std::string& what) { return Status(Code::kUnavailable, what + ": " + std::strerror(errno)); }

namespace {

// The remaining milliseconds to `deadline`, for poll(); at least 1 so a
// late call still looks once.
int PollMillis(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 1, INT_MAX));
}

}  // namespace

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

namespace {

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

}  // namespace

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

StatusOr<std::pair<Fd, uint64_t>> ReceiveFd(int sock, std::chrono::steady_clock::time_point deadline,
                                            const std::string& what) {
  MYPLUGIN_RETURN_IF_ERROR(WaitFor(sock, POLLIN, deadline, "waiting for " + what));
  FdMessage m;
  ssize_t r = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
  if (r == 0) return Status(Code::kUnavailable, "the connection closed before " + what + " came");
  if (r != static_cast<ssize_t>(sizeof(m.bytes))) return Errno("receiving " + what);
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS) return Status(Code::kUnavailable, "no descriptor came with " + what);
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return std::make_pair(Fd(fd), m.bytes);
}


}  // namespace myplugin::collectives
