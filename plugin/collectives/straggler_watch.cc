#include "collectives/straggler_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"
#include "collectives/straggler_state.h"
#include "common/deadline.h"
#include "common/log.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {
namespace {

using coordination::CoordinationClient;

// Plain ints: all that the SIGUSR1 handler may touch.
int sigusr1_pipe[2] = {-1, -1};

void OnSigusr1(int) {
  const int saved = errno;
  char b = 1;
  if (write(sigusr1_pipe[1], &b, 1) < 0) {
  }  // a full pipe already holds a pending request
  errno = saved;
}

std::shared_ptr<WatchState> Current() { return ProcessRuntime::Get().watch(); }

std::string CaptureStacks(const WatchState& s) {
  if (s.options.stack_signal <= 0 || s.options.stack_fd < 0) return "(no Python stacks: faulthandler is not set up)\n";
  // faulthandler's handler reads every thread's frames without the GIL, so it
  // works while Python is stuck; sent to this thread alone, it interrupts no
  // sleep or system call of the program's own threads.
  if (ftruncate(s.options.stack_fd, 0) != 0 || lseek(s.options.stack_fd, 0, SEEK_SET) != 0) {
    return "(no Python stacks: cannot reset the stack file)\n";
  }
  pthread_kill(pthread_self(), s.options.stack_signal);
  std::string text(kMaxStackBytes, '\0');
  ssize_t n = pread(s.options.stack_fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  if (text.empty()) return "(no Python stacks: faulthandler wrote nothing)\n";
  return text;
}

// A process's answer to a report request: machine-readable lines, then its
// stacks after a "stack" line.
std::string Answer(const WatchState& s) {
  std::vector<CallRecord> calls = ProcessRuntime::Get().flight_recorder().Snapshot();
  std::ostringstream out;
  out << "pid " << s.options.os_pid << " on " << s.options.host << "\n";
  out << "compiling " << CompileScope::InProgress() << " " << CompileScope::OldestSeconds() << "\n";
  if (calls.empty()) {
    out << "last none\n";
  } else {
    const CallRecord& r = calls.back();
    out << "last " << AgeSeconds(r.start_ns) << " " << Name(r.state) << " " << r.Describe() << "\n";
  }
  std::map<uint64_t, uint64_t> issued;
  for (const CallRecord& r : calls) {
    issued[r.signature.group_hash] = std::max(issued[r.signature.group_hash], r.signature.sequence);
    if (r.state == CallState::kIssued || r.state == CallState::kMatched) {
      out << "inflight " << r.signature.group_hash << " " << r.signature.sequence << " " << AgeSeconds(r.start_ns)
          << " " << r.Describe() << "\n";
    }
  }
  for (const auto& [hash, seq] : issued) out << "issued " << hash << " " << seq << "\n";
  out << "stack\n" << CaptureStacks(s);
  return out.str();
}

void Responder(std::shared_ptr<WatchState> s) {
  if (s->options.stack_signal > 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, s->options.stack_signal);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  uint64_t epoch = MembershipNow().epoch;
  for (int report = 1;;) {
    auto c = ClientOf(*s);
    if (!c) return;
    const coordination::MembershipSnapshot now = MembershipNow();
    if (now.epoch != epoch) {
      epoch = now.epoch;
      report = 1;  // each epoch's reporter counts from 1
    }
    const std::string prefix = EpochPrefix(epoch);
    const int64_t asked = MonotonicNanos();
    StatusOr<std::string> req = c->KeyValueGet(prefix + "request/" + std::to_string(report), kLongWaitS);
    if (!req.ok()) {
      if (req.status().code() == Code::kDeadlineExceeded) {
        PaceRetry(asked);
      } else if (!AwaitNextEpoch(*s, epoch)) {
        return;
      }
      continue;
    }
    if (req.value() == "dump") Dump(*s, "a straggler report");
    c->KeyValueSet(prefix + "answer/" + std::to_string(report) + "/" + std::to_string(now.index), Answer(*s));
    ++report;
  }
}

void Watchdog(std::shared_ptr<WatchState> s) {
  const double tick = s->straggler_s > 0 ? std::clamp(s->straggler_s / 4, 0.05, 1.0) : 1.0;
  uint64_t published = 0;  // the record id announced as waiting
  std::string waiting_key;  // where it was announced
  while (true) {
    pollfd pfd{sigusr1_pipe[0], POLLIN, 0};
    int ready = sigusr1_pipe[0] >= 0 ? poll(&pfd, 1, static_cast<int>(tick * 1000))
                                     : (std::this_thread::sleep_for(Millis(tick)), 0);
    auto c = ClientOf(*s);
    if (!c) return;
    if (ready > 0) {
      char buf[64];
      while (read(sigusr1_pipe[0], buf, sizeof(buf)) > 0) {
      }
      std::string dir = Dump(*s, "SIGUSR1");
      if (!dir.empty()) LogLine("myplugin: flight recorder written to " + dir + " (SIGUSR1)");
    }
    if (s->straggler_s <= 0) continue;
    const int64_t limit = MonotonicNanos() - static_cast<int64_t>(s->straggler_s * 1e9);
    std::optional<CallRecord> late = ProcessRuntime::Get().flight_recorder().OldestInFlight(limit);
    const coordination::MembershipSnapshot now = MembershipNow();
    const std::string key = EpochPrefix(now.epoch) + "waiting/" + std::to_string(now.index);
    if (late && (late->id != published || key != waiting_key)) {
      if (published != 0 && key != waiting_key) c->KeyValueDelete(waiting_key);  // an epoch before
      std::string process_group;
      for (int p : late->Processes()) process_group += (process_group.empty() ? "" : ",") + std::to_string(p);
      if (process_group.empty()) {  // a barrier of every member
        for (size_t p = 0; p < now.member_ids.size(); ++p) {
          process_group += (process_group.empty() ? "" : ",") + std::to_string(p);
        }
      }
      char start[40];
      std::snprintf(start, sizeof(start), "%.6f", (late->start_ns + WallMinusMonotonicNanos()) / 1e9);
      c->KeyValueSet(key, std::to_string(late->signature.group_hash) + " " + std::to_string(late->signature.sequence) +
                              " " + start + " " + process_group + " " + late->Describe());
      c->KeyValueSet(EpochPrefix(now.epoch) + "doorbell", std::to_string(now.index));
      published = late->id;
      waiting_key = key;
    } else if (!late && published != 0) {
      c->KeyValueDelete(waiting_key);
      published = 0;
    }
  }
}

std::string DefaultTraceDir(CoordinationClient& c, int process, int os_pid, const std::string& base) {
  const std::string key = "myplugin/trace/dir";
  std::string name;
  if (process == 0) {
    char stamp[32];
    std::time_t t = std::time(nullptr);
    std::tm tm;
    gmtime_r(&t, &tm);
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
    name = "myplugin-trace-" + std::string(stamp) + "-" + std::to_string(os_pid);
    c.KeyValueSet(key, name);
  } else {
    StatusOr<std::string> v = c.KeyValueGet(key, 30);
    name = v.ok() ? v.value() : "myplugin-trace-process-" + std::to_string(process) + "-" + std::to_string(os_pid);
  }
  return base + "/" + name;
}

}  // namespace

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string Num(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

double AgeSeconds(int64_t monotonic_ns) { return (MonotonicNanos() - monotonic_ns) / 1e9; }

// A service that cuts long waits short must not turn a blocking get into a
// busy loop.
void PaceRetry(int64_t asked_ns) {
  if (AgeSeconds(asked_ns) < 1.0) std::this_thread::sleep_for(std::chrono::seconds(1));
}

coordination::MembershipSnapshot MembershipNow() { return ProcessRuntime::Get().distributed().membership(); }

std::string EpochPrefix(uint64_t epoch) { return std::string(kPrefix) + std::to_string(epoch) + "/"; }

bool AwaitNextEpoch(const WatchState& s, uint64_t epoch) {
  while (ClientOf(s)) {
    if (MembershipNow().epoch != epoch) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

// Alive while the runtime still serves the job this watch was made for.
std::shared_ptr<CoordinationClient> ClientOf(const WatchState& s) {
  auto c = s.client.lock();
  if (c && ProcessRuntime::Get().distributed().client() == c) return c;
  return nullptr;
}

std::string Dump(WatchState& s, const std::string& reason) {
  std::lock_guard<std::mutex> lock(s.dump_mu);
  mkdir(s.trace_dir.c_str(), 0700);
  Status st = ProcessRuntime::Get().flight_recorder().WriteTo(s.trace_dir, s.process, s.num_processes, s.options.os_pid, s.options.host, reason);
  if (!st.ok()) {
    LogLine("myplugin: " + st.message());
    return "";
  }
  return s.trace_dir;
}

Status StartWatch(const WatchOptions& options) {
  auto client = ProcessRuntime::Get().distributed().client();
  if (!client) return FailedPrecondition("the straggler watch needs the distributed runtime");
  if (auto running = Current(); running && running->client.lock() == client) return OkStatus();
  std::shared_ptr<const Settings> settings = ProcessRuntime::Get().settings();
  auto s = std::make_shared<WatchState>();
  s->options = options;
  s->client = client;
  s->process = client->process_id();
  s->num_processes = client->num_processes();
  s->straggler_s = settings->straggler_s;
  s->trace_dir = settings->trace_dir;
  if (s->trace_dir.empty()) s->trace_dir = DefaultTraceDir(*client, s->process, options.os_pid, settings->temp_dir);
  ProcessRuntime::Get().flight_recorder();  // sized now, not on the first collective
  if (options.dump_on_sigusr1 && sigusr1_pipe[0] < 0) {
    struct sigaction old {};
    if (sigaction(SIGUSR1, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && pipe(sigusr1_pipe) == 0) {
      for (int fd : sigusr1_pipe) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      for (int fd : sigusr1_pipe) fcntl(fd, F_SETFD, FD_CLOEXEC);
      struct sigaction sa {};
      sa.sa_handler = OnSigusr1;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(SIGUSR1, &sa, nullptr);
    }
  }
  ProcessRuntime::Get().set_watch(s);
  // The job failing is one of the moments a flight recorder is for.
  std::weak_ptr<WatchState> weak = s;
  client->AddFailureCallback([weak](const Status& why) {
    if (auto st = weak.lock()) {
      std::string dir = Dump(*st, why.message());
      if (!dir.empty()) LogLine("myplugin: flight recorder written to " + dir + " (myplugin-trace " + dir + ")");
    }
  });
  std::thread(Watchdog, s).detach();
  if (s->straggler_s > 0) {
    std::thread(Responder, s).detach();
    // On every process: the reporter is whichever is the first member of
    // the current epoch (process 0 until a recovery leaves it out).
    std::thread([s] { RunReporter(s); }).detach();
  }
  return OkStatus();
}

std::string DumpFlightRecorder(const std::string& reason) {
  auto s = Current();
  if (!s) return "";
  return Dump(*s, reason);
}

std::string TraceFolder() {
  auto s = Current();
  return s ? s->trace_dir : "";
}

}  // namespace myplugin::collectives
