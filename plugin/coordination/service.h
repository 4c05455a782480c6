// The coordination service: one per job, hosted by process 0, by the
// myplugin-run launcher, or by the myplugin-coordinator CLI.
//
// The network shell around ServiceState (service_state.h), which holds the
// job's state and answers every message. Here: accepting connections (at
// most ServiceOptions::max_connections at once; the excess is refused with
// a clear error), and reading their Hellos and serving every member on a
// few event-loop threads (standalone Asio; ServiceOptions::io_threads, by
// default IoThreadsFor in limits.h), each connection on one of them, with
// a bounded send queue each (so a job of thousands of processes costs
// descriptors and memory, never a thread per process); and a monitor
// thread for heartbeats and deadlines. The state lock is never held during
// I/O: a member that stops reading is dropped and declared failed once its
// queue overflows or it takes no bytes for SendProgressTimeoutSeconds, and
// nobody else waits.
#pragma once

#include <atomic>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/rate_limited_log.h"
#include "common/status.h"
#include "coordination/service_state.h"
#include "coordination/socket.h"

namespace myplugin::coordination {

class CoordinationService {
 public:
  static StatusOr<std::unique_ptr<CoordinationService>> Start(const std::string& bind_host, int port,
                                                              const ServiceOptions& options);
  ~CoordinationService();
  CoordinationService(const CoordinationService&) = delete;
  CoordinationService& operator=(const CoordinationService&) = delete;

  int port() const { return port_; }
  // Closes every connection and joins every thread. Idempotent.
  void Stop();
  // Begins the job's next attempt (the launcher's --max-restarts): a fresh
  // state (no members, no keys, no failure) for `num_processes` processes
  // that present `token`. Every connection of the attempt before is closed,
  // and a process of an earlier attempt is refused with an error saying so.
  Status Restart(const std::string& token, int num_processes);
  // 0 for the first attempt, then one more per Restart.
  int attempt();

  // For tests and the launcher: the job's first failure, if any.
  std::optional<Status> failure();
  // The process whose failure was the job's first (-1 while there is none):
  // the culprit, never a process that fate-sharing ended afterwards.
  int failed_process();
  // ServiceState::failure_self_reported.
  bool failure_self_reported();
  // True once every process has completed the shutdown barrier.
  bool all_departed();
  // The current failure (if any) can still end in a membership agreement,
  // and the epoch the last agreement reached (ServiceState says more).
  bool recoverable();
  uint64_t epoch();
  // The launcher saw process `pid`'s process end (`how`: its exit status):
  // see ServiceState::OnProcessEnded; its connection is closed here.
  void ProcessEnded(int pid, const std::string& how);
  // The launcher started process `pid` again (or gave up on it): see
  // ServiceState::ExpectRejoin.
  void ExpectRejoin(int pid, bool expected);
  // See ServiceState::failures_per_process.
  std::vector<uint64_t> failures_per_process();
  // Open connections (members and peers still saying Hello), and
  // connections refused for the limit so far.
  int connections() const { return open_.load(); }
  uint64_t refused_connections() const { return refused_; }

 private:
  struct Connection;
  struct Handshake;
  struct Loop;
  struct Listener;

  CoordinationService(int port, const ServiceOptions& options);
  // On the first loop: accept, and hand the connection to its loop; on
  // that loop, its Hello.
  void AcceptNext();
  void StartHandshake(const std::shared_ptr<Handshake>& h);
  void OnHelloFrame(const std::shared_ptr<Handshake>& h);
  void Reject(const std::shared_ptr<Handshake>& h, const Status& why,
              std::vector<std::shared_ptr<const std::string>> frames);
  // On the member's loop: its frames in, its queue out, and its end.
  void ServeMember(const std::shared_ptr<Connection>& conn);
  void ReadMore(const std::shared_ptr<Connection>& conn);
  // `received` bytes are in conn->first.
  void OnReadable(const std::shared_ptr<Connection>& conn, size_t received);
  void Flush(const std::shared_ptr<Connection>& conn);
  void WatchStall(const std::shared_ptr<Connection>& conn);
  // The member on `conn` is gone (`why`): the state hears of it, and the
  // connection is closed.
  void EndMember(const std::shared_ptr<Connection>& conn, const Status& why);
  // The member on `conn` takes no more bytes (`detail`): the state hears of
  // it, and the connection is ended.
  void StoppedReading(const std::shared_ptr<Connection>& conn, const std::string& detail);
  // mu_ held, from any thread: ends `conn` on the loop (which then reports
  // its end as usual).
  void CloseOnLoop(const std::shared_ptr<Connection>& conn);
  void MonitorLoop();
  // mu_ held: hands the state's frames to the connections' queues, and
  // has their loops flush them (one task per loop for all its connections:
  // a barrier's release is thousands).
  void Deliver(Outbox& out);

  const ServiceOptions options_;
  const int port_;
  // Lines that peers can provoke at will: bounded.
  RateLimitedLog rejections_{"myplugin coordinator: "};
  RateLimitedLog accept_errors_{"myplugin coordinator: "};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
  // Members and peers still saying Hello, against max_connections.
  std::atomic<int> open_{0};
  // The event loops and the listener (on the first); emptied, under mu_,
  // only when Stop is done with them.
  std::vector<std::unique_ptr<Loop>> loops_;
  std::unique_ptr<Listener> listener_;
  std::thread monitor_thread_;
  ConnectionId next_id_ = 1;  // the first loop's

  std::mutex mu_;  // the state lock: never held during I/O
  ServiceState state_;
  // Members only: a connection is one from its accepted Hello on.
  std::unordered_map<ConnectionId, std::shared_ptr<Connection>> connections_;
};

}  // namespace myplugin::coordination
