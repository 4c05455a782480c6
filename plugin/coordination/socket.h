// TCP sockets, owned (RAII), blocking, with deadlines. The client and the
// service's members each have threads of their own, so plain blocking calls
// with poll() for deadlines are all they need (the service's connections
// are on its event loop until they prove the token).
#pragma once

#include <string>

#include "common/status.h"
#include "coordination/wire.h"

namespace myplugin::coordination {

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port", "[v6]:port". The error names the text.
StatusOr<HostPort> ParseHostPort(const std::string& address);

inline constexpr double kSendTimeoutS = 5;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept : fd_(other.fd_), send_timeout_ms_(other.send_timeout_ms_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Gives the descriptor up (to the service's event loop); -1 after.
  int Release();
  bool IsIPv6() const;

  // What Accept sets on its connections (close-on-exec, no Nagle), for
  // one the service's event loop accepted.
  static void MarkAccepted(int fd);
  // "host:port" of the peer of a connected descriptor, "?" if unknown.
  static std::string PeerNameOf(int fd);

  // Binds and listens; port 0 picks a free port. A port in use is an
  // ALREADY_EXISTS error that names the address.
  static StatusOr<Socket> Listen(const std::string& bind_host, int port);
  int LocalPort() const;
  // Waits up to timeout_ms for a connection; an invalid Socket on timeout.
  StatusOr<Socket> Accept(int timeout_ms);

  // Connects, retrying refused connections until `timeout_s` has passed: the
  // peer may not be listening yet.
  static StatusOr<Socket> Connect(const std::string& host, int port, double timeout_s);

  // Sends a whole buffer. DEADLINE_EXCEEDED when the peer took no bytes for
  // the send timeout (a peer that stopped reading).
  Status SendAll(const std::string& data);
  // Sends what the kernel takes now, never waiting (a last word to a peer
  // that is being refused).
  void TrySend(const std::string& data);
  // Reads one frame's payload. timeout_ms < 0 waits forever. UNAVAILABLE on
  // a closed connection, INVALID_ARGUMENT on a malformed length prefix or
  // one above `max_bytes` (refused before any allocation).
  Status RecvFrame(std::string* payload, int timeout_ms, uint32_t max_bytes = kMaxFrameBytes);

  // Wakes any thread blocked in RecvFrame on this socket.
  void ShutdownBoth();
  // Half-close: the peer reads everything sent so far, then end of stream.
  void ShutdownWrite();
  std::string PeerName() const;
  // This end's numeric address ("10.0.0.2", "fd00::2"), empty if unknown.
  std::string LocalAddress() const;

 private:
  Status RecvAll(char* out, size_t n, int timeout_ms);
  int fd_ = -1;
  int send_timeout_ms_ = static_cast<int>(kSendTimeoutS * 1000);
};

}  // namespace myplugin::coordination
