#include "coordination/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/deadline.h"
#include "coordination/wire.h"

namespace myplugin::coordination {
namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

StatusOr<HostPort> ParseHostPort(const std::string& address) {
  HostPort hp;
  std::string port_text;
  if (!address.empty() && address[0] == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return InvalidArgument("bad coordinator address '" + address + "': expected [ipv6]:port");
    }
    hp.host = address.substr(1, close - 1);
    port_text = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument("bad coordinator address '" + address + "': expected host:port");
    }
    hp.host = address.substr(0, colon);
    port_text = address.substr(colon + 1);
  }
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    return InvalidArgument("bad coordinator address '" + address + "': port must be 0..65535");
  }
  hp.port = static_cast<int>(port);
  return hp;
}

Socket::~Socket() {
  if (fd_ >= 0) close(fd_);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    send_timeout_ms_ = other.send_timeout_ms_;
    other.fd_ = -1;
  }
  return *this;
}

StatusOr<Socket> Socket::Listen(const std::string& bind_host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int rc = getaddrinfo(bind_host.empty() ? nullptr : bind_host.c_str(), port_text.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("cannot resolve bind address '" + bind_host + "': " + gai_strerror(rc));
  std::string where = (bind_host.empty() ? "*" : bind_host) + ":" + port_text;
  Status last = Internal("no address to bind for " + where);
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Socket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last = Internal(Errno("socket"));
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      // "::" serves IPv4 clients too (dual stack), whatever net.ipv6.bindv6only says.
      int zero = 0;
      setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = errno == EADDRINUSE
                 ? Status(Code::kAlreadyExists, "cannot start the myplugin coordinator: address " + where +
                                                    " is already in use (another job, or a leftover process?)")
                 : Internal(Errno(("bind " + where).c_str()));
      continue;
    }
    // All of a big job's processes connect at once: a short backlog drops
    // their SYNs, and each dropped one costs its process a second or more.
    if (listen(s.fd(), SOMAXCONN) != 0) {
      last = Internal(Errno("listen"));
      continue;
    }
    freeaddrinfo(res);
    return s;
  }
  freeaddrinfo(res);
  return last;
}

int Socket::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

bool Socket::IsIPv6() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  return getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && addr.ss_family == AF_INET6;
}

void Socket::MarkAccepted(int fd) {
  // Asio accepts without SOCK_CLOEXEC: set at once, so that a child the
  // host forks does not hold a member's connection open.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  SetNoDelay(fd);
}


int Socket::LocalPort() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

StatusOr<Socket> Socket::Accept(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  int rc = poll(&p, 1, timeout_ms);
  if (rc == 0 || (rc < 0 && errno == EINTR)) return Socket();
  if (rc < 0) return Internal(Errno("poll"));
  int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return Socket();
    return Internal(Errno("accept"));
  }
  SetNoDelay(fd);
  return Socket(fd);
}

StatusOr<Socket> Socket::Connect(const std::string& host, int port, double timeout_s) {
  const std::string where = host + ":" + std::to_string(port);
  auto deadline = After(timeout_s);
  std::string last_error = "timed out";
  int backoff_ms = 5;  // a refused connection is cheap to retry on loopback; back off for remote peers
  do {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port_text = std::to_string(port);
    int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res);
    if (rc != 0) {
      last_error = std::string("cannot resolve host: ") + gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        Socket s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
        if (!s.valid()) continue;
        int r = connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
          pollfd p{s.fd(), POLLOUT, 0};
          int wait_ms = std::min(RemainingMs(deadline), 1000);
          if (poll(&p, 1, wait_ms) == 1) {
            int err = 0;
            socklen_t len = sizeof(err);
            getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
            r = err == 0 ? 0 : -1;
            errno = err;
          } else {
            errno = ETIMEDOUT;
          }
        }
        if (r == 0) {
          int flags = fcntl(s.fd(), F_GETFL);
          fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK);
          SetNoDelay(s.fd());
          freeaddrinfo(res);
          return s;
        }
        last_error = std::strerror(errno);
      }
      freeaddrinfo(res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoff_ms, RemainingMs(deadline))));
    backoff_ms = std::min(backoff_ms * 2, 200);
  } while (Clock::now() < deadline);
  return Status(Code::kDeadlineExceeded, "cannot reach the myplugin coordinator at " + where + " within " +
                                             std::to_string(static_cast<int>(timeout_s)) + " s: " + last_error);
}

Status Socket::SendAll(const std::string& data) {
  // Non-blocking sends, with poll() between them: the timeout is exactly
  // "no byte taken for send_timeout_ms_", however long the whole send is.
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Status(Code::kUnavailable, Errno("send"));
    pollfd p{fd_, POLLOUT, 0};
    int rc = poll(&p, 1, send_timeout_ms_);
    if (rc == 0) return Status(Code::kDeadlineExceeded, "peer stopped reading (send timed out)");
    if (rc < 0 && errno != EINTR) return Status(Code::kUnavailable, Errno("poll"));
  }
  return OkStatus();
}

void Socket::TrySend(const std::string& data) {
  if (fd_ >= 0) (void)!send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

Status Socket::RecvAll(char* out, size_t n, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  size_t got = 0;
  while (got < n) {
    if (timeout_ms >= 0) {
      pollfd p{fd_, POLLIN, 0};
      int rc = poll(&p, 1, RemainingMs(deadline));
      if (rc == 0) return Status(Code::kDeadlineExceeded, "timed out waiting for the peer");
      if (rc < 0 && errno != EINTR) return Status(Code::kUnavailable, Errno("poll"));
      if (rc < 0) continue;
    }
    ssize_t r = recv(fd_, out + got, n - got, 0);
    if (r == 0) return Status(Code::kUnavailable, "connection closed by peer");
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status(Code::kUnavailable, Errno("recv"));
    }
    got += static_cast<size_t>(r);
  }
  return OkStatus();
}

Status Socket::RecvFrame(std::string* payload, int timeout_ms, uint32_t max_bytes) {
  unsigned char prefix[4];
  MYPLUGIN_RETURN_IF_ERROR(RecvAll(reinterpret_cast<char*>(prefix), 4, timeout_ms));
  uint32_t length;
  MYPLUGIN_RETURN_IF_ERROR(DecodeLength(prefix, &length, max_bytes));
  payload->resize(length);
  return RecvAll(payload->data(), length, timeout_ms);
}

void Socket::ShutdownBoth() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

void Socket::ShutdownWrite() {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

std::string Socket::PeerName() const { return PeerNameOf(fd_); }

std::string Socket::PeerNameOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return std::string(host) + ":" + serv;
}

std::string Socket::LocalAddress() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  return host;
}

}  // namespace myplugin::coordination
