// Handing a file descriptor (a memfd segment) to another process on this
// host: over an abstract Unix socket (no file to clean up, gone with its
// owner), with SCM_RIGHTS. Shared by the shared-memory communicator
// (shm_segment.cc) and the transfer endpoint's ring (transfer_endpoint.cc).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "common/status.h"

namespace myplugin::collectives {

// A file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// UNAVAILABLE: `what` and errno's text.
Status Errno(const std::string& what);

// Waits until `fd` has `events`; DEADLINE_EXCEEDED ("`what` timed out") after `deadline`.
Status WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline, const std::string& what);

// An abstract Unix socket address for `name`.
sockaddr_un AbstractAddress(const std::string& name, socklen_t* len);

// 128 random bits in hex: names a segment and its socket.
std::string RandomToken();

// Sends `fd` with one number (`bytes`: the segment's size) over `sock`.
Status SendFd(int sock, int fd, uint64_t bytes);
// Receives what SendFd sent, waiting up to `deadline`; `what` names it in errors.
StatusOr<std::pair<Fd, uint64_t>> ReceiveFd(int sock, std::chrono::steady_clock::time_point deadline,
                                            const std::string& what);

}  // namespace myplugin::collectives
