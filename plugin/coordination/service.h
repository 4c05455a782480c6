// The coordination service: one per job, hosted by process 0, by the
// myplugin-run launcher, or by the myplugin-coordinator CLI.
//
// It registers processes, agrees the global topology, keeps the key-value
// store, runs barriers, and watches every process through its connection and
// its heartbeats. The first failure (a connection lost without an orderly
// shutdown, or heartbeats that stop) is final for the job: every other
// process is told who failed and why, and every pending call fails with
// that reason instead of waiting.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/rate_limited_log.h"
#include "common/status.h"
#include "coordination/socket.h"

namespace myplugin::coordination {

struct ServiceOptions {
  int num_processes = 1;
  // Every connection must present it. Empty means "no token", which the
  // callers only allow on a loopback address.
  std::string token;
  double heartbeat_timeout_s = 100;
  double initialization_timeout_s = 300;
};

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

  // For tests and the launcher: the job's first failure, if any.
  std::optional<Status> failure();
  // The process whose failure was the job's first (-1 while there is none):
  // the culprit, never a process that fate-sharing ended afterwards.
  int failed_process();
  // True once every process has completed the shutdown barrier.
  bool all_departed();

  static double HeartbeatIntervalSeconds(double heartbeat_timeout_s);

 private:
  struct Connection;
  struct Waiter {
    std::shared_ptr<Connection> conn;
    uint32_t request_id;
  };
  struct Barrier {
    std::set<int> arrived;
    std::vector<Waiter> waiters;
    std::chrono::steady_clock::time_point deadline;
    double timeout_s = 0;
  };
  struct KeyWaiter {
    Waiter waiter;
    std::chrono::steady_clock::time_point deadline;
    double timeout_s = 0;
  };
  enum class ProcessState { kAbsent, kConnected, kRegistered, kShuttingDown, kDeparted, kFailed };
  struct Process {
    ProcessState state = ProcessState::kAbsent;
    std::shared_ptr<Connection> conn;
    uint64_t incarnation = 0;
    std::string topology;
    std::chrono::steady_clock::time_point last_heartbeat;
  };

  CoordinationService(Socket listener, int port, const ServiceOptions& options);
  void AcceptLoop();
  void MonitorLoop();
  void ServeConnection(std::shared_ptr<Connection> conn);
  Status Handshake(const std::shared_ptr<Connection>& conn);
  Status Handle(const std::shared_ptr<Connection>& conn, const std::string& frame);
  void OnDisconnect(const std::shared_ptr<Connection>& conn, const Status& why);

  // All below: mu_ held.
  void Send(const std::shared_ptr<Connection>& conn, const std::string& frame);
  void ReplyError(const Waiter& w, const Status& status);
  void DeclareFailure(int process_id, const std::string& reason);
  void FailAllWaiters(const Status& status);
  void ArriveAtBarrier(const std::string& name, int process_id, const Waiter& w, double timeout_s);
  void CheckBarrier(const std::string& name);
  void FailBarriersWaitingFor(int process_id, const std::string& why);
  std::string ProcessList(const std::set<int>& ids) const;
  std::set<int> Missing(const std::set<int>& present) const;

  const ServiceOptions options_;
  const int port_;
  Socket listener_;
  // Lines that peers can provoke at will: bounded.
  RateLimitedLog rejections_{"myplugin coordinator: "};
  RateLimitedLog accept_errors_{"myplugin coordinator: "};
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::thread monitor_thread_;

  std::mutex mu_;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::vector<Process> processes_;
  std::chrono::steady_clock::time_point init_deadline_;
  bool registration_complete_ = false;
  std::vector<Waiter> registration_waiters_;
  std::map<std::string, std::string> kv_;
  std::multimap<std::string, KeyWaiter> key_waiters_;
  std::map<std::string, Barrier> barriers_;
  std::optional<Status> failure_;
  int failed_process_ = -1;
};

}  // namespace myplugin::coordination
