// What the service's files share: a member's connection (its socket, send
// queue and its event loop's reading and writing state), an event loop
// (Asio's context and its thread) and the listener (the acceptor, on the
// first loop).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// Standalone Asio (Debian's libasio-dev), header-only: the event loops that
// serve every connection.
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include "coordination/limits.h"
#include "coordination/send_queue.h"
#include "coordination/service.h"

namespace myplugin::coordination {

using tcp = asio::ip::tcp;

// Everything but `queue`, `flushing` and `stop_reported` (which Deliver
// touches under the state lock, from any thread) belongs to its event loop,
// `loop`: one thread reads and writes a connection, so its frames go out in
// the order the state queued them.
struct CoordinationService::Connection {
  explicit Connection(Loop& l);
  Loop* const loop;
  ConnectionId id = 0;
  tcp::socket socket;
  std::string peer;
  SendQueue queue{kMaxSendQueueBytes};
  // What each receive reads first: a barrier's arrival, a heartbeat or a
  // get whole (more is read into the loop's buffer).
  std::array<char, 256> first;
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

// One event loop: the connections it serves (and their timers), on a
// thread of its own.
struct CoordinationService::Loop {
  explicit Loop(size_t i) : index(i) {}
  const size_t index;  // in loops_
  asio::io_context io;
  // Keeps run() going while the loop has no connection yet (Stop ends it).
  asio::executor_work_guard<asio::io_context::executor_type> busy = asio::make_work_guard(io);
  // What one readiness of one connection reads into, at most, before the
  // next connection's turn.
  std::vector<char> buffer = std::vector<char>(64u << 10);
  std::thread thread;
};

inline CoordinationService::Connection::Connection(Loop& l) : loop(&l), socket(l.io), stall(l.io) {}

// The listening socket, served by the first loop, which hands each
// connection it accepts to a loop in turn.
struct CoordinationService::Listener {
  explicit Listener(asio::io_context& io) : acceptor(io), backoff(io) {}
  tcp::acceptor acceptor;
  asio::steady_timer backoff;  // after an accept error
  int backoff_ms = 0;
};

}  // namespace myplugin::coordination
