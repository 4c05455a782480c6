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

#include "collectives/communicator_cache.h"
#include "collectives/flight_recorder.h"
#include "common/deadline.h"
#include "common/log.h"
#include "coordination/runtime.h"

namespace myplugin::collectives {
namespace {

using coordination::CoordinationClient;

// A literal, not a std::string: detached threads may still run during static
// destruction.
constexpr char kPrefix[] = "myplugin/straggler/";
// A blocking get that outlives any job; the loop around it asks again.
constexpr double kLongWaitS = 24 * 3600;
// How long process 0 waits for the processes' answers to one report.
constexpr double kAnswerWaitS = 2.0;
// The stack text a process sends at most.
constexpr size_t kMaxStackBytes = 64 << 10;

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

struct State {
  WatchOptions options;
  std::weak_ptr<CoordinationClient> client;
  int process = 0;
  int num_processes = 1;
  double straggler_s = 0;
  std::string trace_dir;
  std::mutex dump_mu;
};

std::mutex watch_mu;
std::shared_ptr<State> current;  // under watch_mu
int sigusr1_pipe[2] = {-1, -1};

void OnSigusr1(int) {
  const int saved = errno;
  char b = 1;
  if (write(sigusr1_pipe[1], &b, 1) < 0) {
  }  // a full pipe already holds a pending request
  errno = saved;
}

std::shared_ptr<State> Current() {
  std::lock_guard<std::mutex> lock(watch_mu);
  return current;
}

// Alive while the runtime still serves the job this watch was made for.
std::shared_ptr<CoordinationClient> ClientOf(const State& s) {
  auto c = s.client.lock();
  if (c && coordination::DistributedRuntime::Get().client() == c) return c;
  return nullptr;
}

std::string Dump(State& s, const std::string& reason) {
  std::lock_guard<std::mutex> lock(s.dump_mu);
  mkdir(s.trace_dir.c_str(), 0700);
  Status st = FlightRecorder::Get().WriteTo(s.trace_dir, s.process, s.num_processes, s.options.os_pid, s.options.host, reason);
  if (!st.ok()) {
    LogLine("myplugin: " + st.message());
    return "";
  }
  return s.trace_dir;
}

std::string CaptureStacks(const State& s) {
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
std::string Answer(const State& s) {
  std::vector<CallRecord> calls = FlightRecorder::Get().Snapshot();
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

struct Reply {
  bool answered = false;
  std::string pid_host, last, stack;
  int compiling = 0;
  double compiling_s = 0;  // since the oldest compile in progress began
  std::vector<std::string> inflight;  // "hash seq age describe"
  std::map<uint64_t, uint64_t> issued;
};

Reply Parse(const std::string& text) {
  Reply r;
  r.answered = true;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line == "stack") {
      r.stack.assign(std::istreambuf_iterator<char>(in), {});
      break;
    }
    const std::string key = line.substr(0, line.find(' '));
    const std::string rest = line.size() > key.size() ? line.substr(key.size() + 1) : "";
    if (key == "pid") r.pid_host = rest;
    if (key == "compiling") std::istringstream(rest) >> r.compiling >> r.compiling_s;
    if (key == "last") r.last = rest;
    if (key == "inflight") r.inflight.push_back(rest);
    if (key == "issued") {
      uint64_t hash = 0, seq = 0;
      std::istringstream(rest) >> hash >> seq;
      r.issued[hash] = seq;
    }
  }
  return r;
}

// What a late process is doing, in words.
std::string Doing(const Reply& r) {
  std::string last = "issued nothing yet";
  if (r.last != "none" && !r.last.empty()) {
    std::istringstream in(r.last);
    double age;
    std::string state;
    in >> age >> state;
    std::string what;
    std::getline(in, what);
    last = "last issued" + what + " " + Secs(age) + " ago (" + state + ")";
  }
  std::string now;
  if (!r.inflight.empty()) {
    std::istringstream in(r.inflight.front());
    uint64_t hash, seq;
    double age;
    in >> hash >> seq >> age;
    std::string what;
    std::getline(in, what);
    now = "waits in" + what + " for " + Secs(age) + " (a different call: the processes took different paths?)";
  } else if (r.compiling > 0) {
    now = "is inside a compile, for " + Secs(r.compiling_s) +
          (r.compiling > 1 ? " (" + std::to_string(r.compiling) + " compiles in progress)" : "");
  } else {
    now = "is in no collective, barrier or compile: it runs Python code (or native code called from it)";
  }
  return last + "; now it " + now;
}

std::string Indent(const std::string& text, const std::string& pad) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += (line.empty() ? "" : pad + line) + "\n";
  return out;
}

struct Waiter {
  int process;
  uint64_t hash, seq;
  double start_wall;
  std::vector<int> process_group;
  std::string what;
};

std::string ProcessesText(const std::vector<int>& ids) { return ProcessList(ids); }

class Reporter {
 public:
  explicit Reporter(std::shared_ptr<State> s) : s_(std::move(s)) {}

  void Run() {
    const double tick = std::clamp(s_->straggler_s / 4, 0.05, 1.0);
    while (true) {
      auto c = ClientOf(*s_);
      if (!c) return;
      const int64_t asked = MonotonicNanos();
      StatusOr<std::string> bell = c->KeyValueGet(std::string(kPrefix) + "doorbell", kLongWaitS);
      if (!bell.ok()) {
        if (bell.status().code() != Code::kDeadlineExceeded) return;
        PaceRetry(asked);
        continue;
      }
      c->KeyValueDelete(std::string(kPrefix) + "doorbell");
      // Armed: look once per tick while anyone waits.
      double next_report = 0;
      while (true) {
        auto entries = c->KeyValueList(std::string(kPrefix) + "waiting/");
        if (!entries.ok()) return;
        if (entries.value().empty()) break;
        const double now = MonotonicNanos() / 1e9;
        if (now >= next_report) {
          Report(*c, entries.value());
          next_report = MonotonicNanos() / 1e9 + s_->straggler_s;
        }
        std::this_thread::sleep_for(Millis(tick));
        if (!ClientOf(*s_)) return;
      }
    }
  }

 private:
  void Report(CoordinationClient& c, const std::vector<std::pair<std::string, std::string>>& entries) {
    std::vector<Waiter> waiters;
    for (const auto& [key, value] : entries) {
      Waiter w;
      w.process = std::atoi(key.c_str() + (sizeof(kPrefix) - 1) + 8);
      std::istringstream in(value);
      std::string process_group;
      in >> w.hash >> w.seq >> w.start_wall >> process_group;
      std::getline(in, w.what);
      if (!w.what.empty() && w.what[0] == ' ') w.what.erase(0, 1);
      std::istringstream cl(process_group);
      std::string id;
      while (std::getline(cl, id, ',')) w.process_group.push_back(std::atoi(id.c_str()));
      waiters.push_back(w);
    }
    const int epoch = ++epoch_;
    const bool first = epoch == 1 || !dumped_;
    c.KeyValueSet(std::string(kPrefix) + "request/" + std::to_string(epoch), first ? "dump" : "stacks");
    dumped_ = true;
    std::vector<Reply> replies(s_->num_processes);
    const auto deadline = After(kAnswerWaitS);
    for (int p = 0; p < s_->num_processes; ++p) {
      double left = std::max(0.01, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
      const std::string key = std::string(kPrefix) + "answer/" + std::to_string(epoch) + "/" + std::to_string(p);
      StatusOr<std::string> a = c.KeyValueGet(key, left);
      if (a.ok()) {
        replies[p] = Parse(a.value());
        c.KeyValueDelete(key);
      }
    }
    // One paragraph per distinct call that someone waits in.
    std::map<std::pair<uint64_t, uint64_t>, std::vector<Waiter>> calls;
    for (const Waiter& w : waiters) calls[{w.hash, w.seq}].push_back(w);
    timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    const double now_wall = wall.tv_sec + wall.tv_nsec / 1e9;
    std::string text = "myplugin: straggler report #" + std::to_string(epoch);
    if (epoch > 1) text += " (" + Secs(MonotonicNanos() / 1e9 - last_report_) + " after the last)";
    text += "\n";
    last_report_ = MonotonicNanos() / 1e9;
    for (const auto& [id, ws] : calls) {
      const Waiter& w0 = ws.front();
      double longest = 0;
      for (const Waiter& w : ws) longest = std::max(longest, now_wall - w.start_wall);
      std::set<int> arrived;
      for (int p : w0.process_group) {
        const Reply& r = replies[p];
        auto it = r.issued.find(w0.hash);
        if (it != r.issued.end() && it->second >= w0.seq) arrived.insert(p);
      }
      for (const Waiter& w : ws) arrived.insert(w.process);
      std::vector<int> late;
      for (int p : w0.process_group) {
        if (!arrived.count(p)) late.push_back(p);
      }
      text += "  " + w0.what + " has waited " + Secs(longest) + " (MYPLUGIN_STRAGGLER_SECONDS=" +
              Num(s_->straggler_s) + ")\n";
      text += "  arrived: processes " + ProcessesText(std::vector<int>(arrived.begin(), arrived.end())) +
              "; not arrived: processes " + ProcessesText(late) + "\n";
      for (int p : late) {
        const Reply& r = replies[p];
        if (!r.answered) {
          text += "  process " + std::to_string(p) + " did not answer within " + Secs(kAnswerWaitS) +
                  " (stopped, or its threads cannot run)\n";
          continue;
        }
        const std::string doing = Doing(r);
        auto prev = previous_.find(p);
        if (prev != previous_.end() && prev->second.first == r.stack && SameState(prev->second.second, r)) {
          text += "  process " + std::to_string(p) + ": unchanged since the last report (same call, same stack)\n";
          continue;
        }
        text += "  process " + std::to_string(p) + " (pid " + r.pid_host + ") " + doing + "\n";
        text += "    Python stack, every thread:\n" + Indent(r.stack, "      ");
        previous_[p] = {r.stack, r};
      }
    }
    if (epoch == 1 && !s_->trace_dir.empty()) {
      text += "  flight recorders written to " + s_->trace_dir + " (read them with: myplugin-trace " + s_->trace_dir +
              ")\n";
    }
    text += "  still waiting; the next report comes in " + Secs(s_->straggler_s) +
            " if the call has not completed (it fails after MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS=" +
            Num(CommunicatorCache::TimeoutSeconds()) + ")";
    LogLine(text);
  }

  static bool SameState(const Reply& a, const Reply& b) {
    auto strip = [](const std::string& last) { return last.substr(last.find(' ') + 1); };  // drop the age
    return strip(a.last) == strip(b.last) && a.inflight.size() == b.inflight.size() && a.compiling == b.compiling;
  }

  std::shared_ptr<State> s_;
  int epoch_ = 0;
  bool dumped_ = false;
  double last_report_ = 0;
  std::map<int, std::pair<std::string, Reply>> previous_;
};

void Responder(std::shared_ptr<State> s) {
  if (s->options.stack_signal > 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, s->options.stack_signal);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  for (int epoch = 1;;) {
    auto c = ClientOf(*s);
    if (!c) return;
    const int64_t asked = MonotonicNanos();
    StatusOr<std::string> req = c->KeyValueGet(std::string(kPrefix) + "request/" + std::to_string(epoch), kLongWaitS);
    if (!req.ok()) {
      if (req.status().code() != Code::kDeadlineExceeded) return;
      PaceRetry(asked);
      continue;
    }
    if (req.value() == "dump") Dump(*s, "a straggler report");
    c->KeyValueSet(std::string(kPrefix) + "answer/" + std::to_string(epoch) + "/" + std::to_string(s->process), Answer(*s));
    ++epoch;
  }
}

void Watchdog(std::shared_ptr<State> s) {
  const double tick = s->straggler_s > 0 ? std::clamp(s->straggler_s / 4, 0.05, 1.0) : 1.0;
  uint64_t published = 0;  // the record id announced as waiting
  const std::string waiting_key = std::string(kPrefix) + "waiting/" + std::to_string(s->process);
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
    std::optional<CallRecord> late = FlightRecorder::Get().OldestInFlight(limit);
    if (late && late->id != published) {
      std::string process_group;
      for (int p : late->Processes()) process_group += (process_group.empty() ? "" : ",") + std::to_string(p);
      if (process_group.empty()) {  // a barrier of every process
        for (int p = 0; p < s->num_processes; ++p) process_group += (process_group.empty() ? "" : ",") + std::to_string(p);
      }
      char start[40];
      std::snprintf(start, sizeof(start), "%.6f", (late->start_ns + WallMinusMonotonicNanos()) / 1e9);
      c->KeyValueSet(waiting_key, std::to_string(late->signature.group_hash) + " " +
                                      std::to_string(late->signature.sequence) + " " + start + " " + process_group + " " +
                                      late->Describe());
      c->KeyValueSet(std::string(kPrefix) + "doorbell", std::to_string(s->process));
      published = late->id;
    } else if (!late && published != 0) {
      c->KeyValueDelete(waiting_key);
      published = 0;
    }
  }
}

std::string DefaultTraceDir(CoordinationClient& c, int process, int os_pid) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp != nullptr && *tmp ? tmp : "/tmp";
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

Status CheckWatchSettings() {
  MYPLUGIN_RETURN_IF_ERROR(CommunicatorCache::StragglerSeconds().status());
  return CommunicatorCache::TraceBufferSize().status();
}

Status StartWatch(const WatchOptions& options) {
  auto client = coordination::DistributedRuntime::Get().client();
  if (!client) return FailedPrecondition("the straggler watch needs the distributed runtime");
  {
    std::lock_guard<std::mutex> lock(watch_mu);
    if (current && current->client.lock() == client) return OkStatus();
  }
  StatusOr<double> straggler_s = CommunicatorCache::StragglerSeconds();
  if (!straggler_s.ok()) return straggler_s.status();
  StatusOr<size_t> buffer = CommunicatorCache::TraceBufferSize();
  if (!buffer.ok()) return buffer.status();
  auto s = std::make_shared<State>();
  s->options = options;
  s->client = client;
  s->process = client->process_id();
  s->num_processes = client->num_processes();
  s->straggler_s = straggler_s.value();
  s->trace_dir = CommunicatorCache::TraceDir();
  if (s->trace_dir.empty()) s->trace_dir = DefaultTraceDir(*client, s->process, options.os_pid);
  FlightRecorder::Get();  // sized now, not on the first collective
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
  {
    std::lock_guard<std::mutex> lock(watch_mu);
    current = s;
  }
  // The job failing is one of the moments a flight recorder is for.
  std::weak_ptr<State> weak = s;
  client->AddFailureCallback([weak](const Status& why) {
    if (auto st = weak.lock()) {
      std::string dir = Dump(*st, why.message());
      if (!dir.empty()) LogLine("myplugin: flight recorder written to " + dir + " (myplugin-trace " + dir + ")");
    }
  });
  std::thread(Watchdog, s).detach();
  if (s->straggler_s > 0) {
    std::thread(Responder, s).detach();
    if (s->process == 0) {
      std::thread([s] { Reporter(s).Run(); }).detach();
    }
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
