// What the service's files share: a member's connection (its socket, send
// queue and the event loop's reading and writing state) and the event
// loop's parts (Asio's context, the acceptor, timers).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

// Standalone Asio (Debian's libasio-dev), header-only: the event loop that
// serves every connection.
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "coordination/limits.h"
#include "coordination/send_queue.h"
#include "coordination/service.h"

namespace myplugin::coordination {

using tcp = asio::ip::tcp;

// Everything but `queue`, `flushing` and `stop_reported` (which Deliver
// touches under the state lock, from any thread) belongs to the event loop.
struct CoordinationService::Connection {
  explicit Connection(asio::io_context& io) : socket(io), stall(io) {}
  ConnectionId id = 0;
  tcp::socket socket;
  std::string peer;
  SendQueue queue{kMaxSendQueueBytes};
  // Bytes read that are not a whole frame yet.
  std::string in;
  // The frame on its way out, and how much of it the socket has taken.
  std::shared_ptr<const std::string> sending;
  size_t sent = 0;
  // A flush is posted or under way: Deliver posts one only when not.
  std::atomic<bool> flushing{false};
  std::atomic<bool> stop_reported{false};
  // Waiting for the socket to take more, since `progress`; `stall` checks
  // that it does within SendProgressTimeoutSeconds.
  bool blocked = false;
  bool stall_armed = false;
  std::chrono::steady_clock::time_point progress;
  asio::steady_timer stall;
  // The peer's side ended (or the service ended it); set on the loop, read by Stop.
  std::atomic<bool> finished{false};
};

struct CoordinationService::Loop {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer backoff{io};  // after an accept error
  int backoff_ms = 0;
  // What one readiness of one connection reads into, at most, before the
  // next connection's turn.
  std::vector<char> buffer = std::vector<char>(64u << 10);
};

}  // namespace myplugin::coordination
