// The scale load generator of bench/coordination_scale.py and
// tests/test_coordination_scale.py: N simulated processes, each a real TCP
// connection to a running coordination service, speaking the real protocol
// through the project's own codec (coordination/messages.h, wire.h), driven
// by one epoll loop in this one process so that thousands fit on a small
// machine. What a real client does is done here without its threads:
// Hello, Register (a topology made by EncodeProcessInfo, eight processes to
// a host, each host its own random boot id),
// heartbeats at the interval the service gives, barriers, key-value calls,
// and noticing a peer's failure.
//
// Phases, in order: registration (all connect at once), an idle window of
// heartbeats only (the service's CPU and memory read from /proc/PID), rounds
// of a barrier of all, rounds of key-value set then get, and one death
// (a closed socket, or a frozen process that stops sending and reading).
// Each phase checks that every simulated process got exactly the replies it
// should; the results are one JSON object on stdout, and the exit status
// is 0 only if every check held.
//
//   coordination_scale --port P --num-processes N [--token T] [--rounds R]
//       [--death closed|frozen|none] [--idle-seconds S] [--service-pid PID]
//       [--topology real|tiny] [--phase-timeout S]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "coordination/host_identity.h"
#include "coordination/messages.h"
#include "coordination/process_info.h"
#include "coordination/wire.h"

namespace coord = myplugin::coordination;
namespace msg = myplugin::coordination::msg;
using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "coordination_scale: %s\n", why.c_str());
  std::exit(2);
}

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  int num_processes = 0;
  int rounds = 3;
  std::string death = "closed";
  double idle_seconds = 5;
  int service_pid = 0;
  std::string topology = "real";
  double phase_timeout = 120;
};

enum class Stage { kConnecting, kHello, kRegistering, kMember, kDead };

struct Sim {
  int id = 0;
  int fd = -1;
  Stage stage = Stage::kConnecting;
  std::string in;
  size_t in_pos = 0;
  std::string out;
  bool want_out = false;
  bool frozen = false;
  // Inside the registration reply, compared as it comes (Consume).
  bool streaming = false;
  size_t cmp = 0;
  uint32_t next_request = 1;
  // The one request in flight (a real client's calls are one per thread;
  // one thread each here) and what its reply must be.
  uint32_t pending = 0;
  coord::MessageType expect = coord::MessageType::kOk;
  std::string expect_value;
  bool replied = false;
  bool failure_seen = false;
  uint32_t failure_of = 0;
  Clock::time_point failure_at;
  Clock::time_point next_beat;
};

class Generator {
 public:
  explicit Generator(const Options& o) : o_(o), sims_(o.num_processes) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) Die("epoll_create1 failed");
    for (int i = 0; i < o.num_processes; ++i) sims_[i].id = i;
    // Every process's Register is its first request (id 1).
    msg::Topology t;
    t.request_id = 1;
    // Each the first process of its id: the service numbers it id + 1.
    for (int i = 0; i < o.num_processes; ++i) t.processes.push_back({static_cast<uint64_t>(i) + 1, Topology(i)});
    expected_topology_ = t.Encode();
  }

  int Run();

 private:
  // --- sockets -------------------------------------------------------------
  void Connect(Sim& s) {
    s.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s.fd < 0) Die(std::string("socket: ") + std::strerror(errno) + " (raise ulimit -n)");
    int one = 1;
    setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (o_.host.rfind("127.", 0) == 0) {
      // Thousands of connections from one address to one port make the
      // kernel search ever longer for a free source port at each connect
      // (seconds in all at 16,384): spread them over loopback addresses,
      // 256 to each, as a real job's come from many hosts.
      setsockopt(s.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | static_cast<uint32_t>(1 + s.id / 256));
      if (bind(s.fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) {
        Die(std::string("bind: ") + std::strerror(errno));
      }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(o_.port));
    inet_pton(AF_INET, o_.host.c_str(), &a.sin_addr);
    if (connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
      Die(std::string("connect: ") + std::strerror(errno));
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u32 = static_cast<uint32_t>(s.id);
    epoll_ctl(ep_, EPOLL_CTL_ADD, s.fd, &ev);
    s.want_out = true;
  }

  void Watch(Sim& s) {
    const bool want = !s.out.empty();
    if (want == s.want_out || s.fd < 0) return;
    epoll_event ev{};
    ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(s.id);
    epoll_ctl(ep_, EPOLL_CTL_MOD, s.fd, &ev);
    s.want_out = want;
  }

  void Send(Sim& s, const std::string& frame) {
    if (s.fd < 0 || s.frozen) return;
    frames_out_++;
    bytes_out_ += frame.size();
    if (s.out.empty()) {
      ssize_t n = send(s.fd, frame.data(), frame.size(), MSG_NOSIGNAL);
      if (n == static_cast<ssize_t>(frame.size())) return;
      s.out = frame.substr(n > 0 ? n : 0);
    } else {
      s.out += frame;
    }
    Watch(s);
  }

  void Flush(Sim& s) {
    while (!s.out.empty()) {
      ssize_t n = send(s.fd, s.out.data(), s.out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) break;
        Lost(s, std::string("send: ") + std::strerror(errno));
        return;
      }
      s.out.erase(0, n);
    }
    Watch(s);
  }

  void Lost(Sim& s, const std::string& why) {
    if (s.stage != Stage::kDead) Problem("process " + std::to_string(s.id) + " lost its connection: " + why);
    Close(s);
  }

  void Close(Sim& s) {
    if (s.fd >= 0) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, s.fd, nullptr);
      close(s.fd);
    }
    s.fd = -1;
    s.stage = Stage::kDead;
  }

  void Readable(Sim& s) {
    char buf[65536];
    for (;;) {
      ssize_t n = recv(s.fd, buf, sizeof(buf), 0);
      if (n > 0) {
        bytes_in_ += n;
        Consume(s, buf, static_cast<size_t>(n));
        // One read per readiness (epoll is level-triggered): a process
        // with a long reply in flight must not starve the others, as a
        // real one, on its own host, would not.
        break;
      }
      if (n < 0 && errno == EAGAIN) break;
      Lost(s, n == 0 ? "closed by the service" : std::strerror(errno));
      return;
    }
  }

  // The registration reply carries every process's topology: N of them,
  // each N entries long. Held whole by every simulated process at once it
  // would take N^2 bytes of memory here, so (but for process 0, which
  // decodes it) it is compared, as it streams in, with the reply the codec
  // makes of what the job registered, and never held.
  void Consume(Sim& s, const char* p, size_t n) {
    const std::string& want = expected_topology_;
    if (s.streaming) {
      const size_t take = std::min(n, want.size() - s.cmp);
      if (std::memcmp(p, want.data() + s.cmp, take) != 0) return Lost(s, "a topology reply unlike what the job registered");
      s.cmp += take;
      p += take;
      n -= take;
      if (s.cmp < want.size()) return;
      s.streaming = false;
      TopologyMatched(s);
    }
    s.in.append(p, n);
    while (s.in.size() - s.in_pos >= 4) {
      const size_t avail = s.in.size() - s.in_pos;
      const char* at = s.in.data() + s.in_pos;
      if (s.stage == Stage::kRegistering && s.id != 0 && avail >= 9 && std::memcmp(at, want.data(), 9) == 0) {
        const size_t take = std::min(avail, want.size());
        if (std::memcmp(at, want.data(), take) != 0) return Lost(s, "a topology reply unlike what the job registered");
        s.in_pos += take;
        if (take < want.size()) {
          s.streaming = true;
          s.cmp = take;
          break;
        }
        TopologyMatched(s);
        continue;
      }
      uint32_t len = 0;
      auto st = coord::DecodeLength(reinterpret_cast<const unsigned char*>(at), &len);
      if (!st.ok()) return Lost(s, st.message());
      if (avail - 4 < len) break;
      std::string payload = s.in.substr(s.in_pos + 4, len);
      s.in_pos += 4 + len;
      frames_in_++;
      OnFrame(s, payload);
      if (s.fd < 0) return;
    }
    if (s.in_pos == s.in.size()) {
      s.in.clear();
      s.in_pos = 0;
    } else if (s.in_pos > (1u << 20)) {
      s.in.erase(0, s.in_pos);
      s.in_pos = 0;
    }
  }

  void TopologyMatched(Sim& s) {
    frames_in_++;
    if (s.pending != 1 || s.replied) return Problem("process " + std::to_string(s.id) + " got an unasked topology");
    Registered(s);
  }

  void Registered(Sim& s) {
    s.stage = Stage::kMember;
    if (first_topology_ == Clock::time_point()) first_topology_ = Clock::now();
    s.replied = true;
    ++replies_;
    last_reply_ = Clock::now();
  }

  // --- the protocol ----------------------------------------------------------
  std::string Topology(int id) const {
    if (o_.topology == "tiny") return std::string(8, 'x');
    coord::ProcessInfo info;
    const int host = id / 8;
    info.hostname = "node-" + std::to_string(host) + ".cluster.example";
    info.num_devices = 1;
    info.device_kind = "cpu";
    info.pid = 100000 + id;
    // The host's address, as real processes publish it (network_address.h: no port).
    info.address = "10." + std::to_string(host / 65536 % 256) + "." + std::to_string(host / 256 % 256) + "." +
                   std::to_string(host % 256);
    // A boot id is random per host (/proc/sys/kernel/random/boot_id), as
    // real ones are: nothing in it repeats from one host to the next.
    const uint64_t a = Mix(2 * host), b = Mix(2 * host + 1);
    char boot_id[40];
    std::snprintf(boot_id, sizeof(boot_id), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                  static_cast<unsigned>(a >> 16 & 0xffff), static_cast<unsigned>(a & 0xffff),
                  static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xffffffffffffULL));
    info.host_id = coord::HostIdentityOf(boot_id, info.hostname, 4026531840);
    return coord::EncodeProcessInfo(info);
  }

  static uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  template <typename M>
  void Request(Sim& s, M m, coord::MessageType expect, std::string value = "") {
    m.request_id = s.next_request++;
    s.pending = m.request_id;
    s.expect = expect;
    s.expect_value = std::move(value);
    s.replied = false;
    Send(s, m.Encode());
  }

  void OnFrame(Sim& s, const std::string& payload) {
    coord::MessageType type;
    uint32_t rid = 0;
    if (!msg::PeekType(payload, &type, &rid).ok()) return Lost(s, "a malformed frame");
    if (type == coord::MessageType::kHeartbeat) return;
    if (type == coord::MessageType::kFailure) {
      auto f = msg::Failure::Decode(payload);
      if (!f.ok()) return Problem("a malformed failure notice");
      if (!s.failure_seen) {
        s.failure_seen = true;
        s.failure_of = f.value().process_id;
        s.failure_at = Clock::now();
        ++failures_seen_;
      }
      return;
    }
    if (type == coord::MessageType::kPeerShutdown) return;
    if (type == coord::MessageType::kError) {
      auto e = msg::Error::Decode(payload);
      // After a death every pending call is answered with the job's failure:
      // expected then, a problem before.
      if (!death_started_) {
        Problem("process " + std::to_string(s.id) + " got an error: " + (e.ok() ? e.value().message : "?"));
      }
      if (rid == s.pending && !s.replied) {
        s.replied = true;
        ++replies_;
      }
      return;
    }
    if (s.stage == Stage::kHello) {
      auto ok = msg::HelloOk::Decode(payload);
      if (!ok.ok()) return Lost(s, "expected HelloOk: " + ok.status().message());
      interval_s_ = ok.value().heartbeat_interval_ms / 1000.0;
      timeout_s_ = ok.value().heartbeat_timeout_ms / 1000.0;
      s.stage = Stage::kRegistering;
      last_hello_ = Clock::now();
      // Beats from now on, staggered as real processes' would be.
      s.next_beat = Clock::now() + std::chrono::microseconds(
                                       static_cast<int64_t>(interval_s_ * 1e6 * (s.id % 997) / 997.0));
      beats_.push_back(s.id);
      msg::Register r;
      r.num_processes = static_cast<uint32_t>(o_.num_processes);
      r.topology = Topology(s.id);
      Request(s, r, coord::MessageType::kTopology);
      return;
    }
    if (rid != s.pending || s.replied) {
      return Problem("process " + std::to_string(s.id) + " got an unexpected " + coord::MessageTypeName(type));
    }
    if (type != s.expect) {
      return Problem("process " + std::to_string(s.id) + " expected " + coord::MessageTypeName(s.expect) + ", got " +
                     coord::MessageTypeName(type));
    }
    if (type == coord::MessageType::kTopology) {
      auto t = msg::Topology::Decode(payload);
      if (!t.ok() || t.value().processes.size() != static_cast<size_t>(o_.num_processes)) {
        return Problem("process " + std::to_string(s.id) + " got a topology of the wrong size");
      }
      // Every entry is what its process registered, each the first
      // process of its id.
      for (int i = 0; i < o_.num_processes; ++i) {
        const auto& e = t.value().processes[i];
        if (e.topology != Topology(i) || e.incarnation != static_cast<uint64_t>(i) + 1) {
          return Problem("process " + std::to_string(s.id) + " got a wrong topology entry for process " +
                         std::to_string(i));
        }
      }
      return Registered(s);
    }
    if (type == coord::MessageType::kValue) {
      auto v = msg::Value::Decode(payload);
      if (!v.ok() || v.value().value != s.expect_value) {
        return Problem("process " + std::to_string(s.id) + " got a wrong value");
      }
    }
    s.replied = true;
    ++replies_;
    last_reply_ = Clock::now();
  }

  void Beat(Clock::time_point now) {
    // All beat at the same interval: a FIFO in due order.
    size_t n = beats_.size();
    while (n-- > 0) {
      Sim& s = sims_[beats_.front()];
      if (s.next_beat > now) break;
      beats_.pop_front();
      if (s.fd < 0 || s.frozen) continue;
      Send(s, msg::Heartbeat().Encode());
      s.next_beat += std::chrono::microseconds(static_cast<int64_t>(interval_s_ * 1e6));
      beats_.push_back(s.id);
    }
  }

  // Serves every socket until `done` or the phase's deadline.
  bool Pump(const std::function<bool()>& done, double seconds) {
    const auto deadline = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
    std::vector<epoll_event> events(4096);
    while (!done()) {
      const auto now = Clock::now();
      if (now > deadline) return false;
      Beat(now);
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 2);
      for (int i = 0; i < n; ++i) {
        Sim& s = sims_[events[i].data.u32];
        if (s.fd < 0) continue;
        if (s.stage == Stage::kConnecting) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            // Refused or reset (a full backlog): a real client retries.
            close(s.fd);
            ++connect_retries_;
            Connect(s);
            continue;
          }
          s.stage = Stage::kHello;
          msg::Hello h;
          h.token = o_.token;
          h.process_id = static_cast<uint32_t>(s.id);
          s.want_out = true;
          Send(s, h.Encode());
          Watch(s);
          continue;
        }
        if (events[i].events & EPOLLOUT) Flush(s);
        if (s.fd >= 0 && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) Readable(s);
      }
    }
    return true;
  }

  void Problem(const std::string& what) {
    if (problems_.size() < 20) problems_.push_back(what);
    ++problem_count_;
  }

  // /proc/PID: CPU seconds (user + system) and resident memory.
  double ServiceCpu() const {
    std::ifstream f("/proc/" + std::to_string(o_.service_pid) + "/stat");
    std::string line;
    std::getline(f, line);
    auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos) return 0;
    std::istringstream rest(line.substr(close_paren + 2));
    std::string field;
    double ut = 0, st = 0;
    for (int i = 3; rest >> field; ++i) {
      if (i == 14) ut = std::atof(field.c_str());
      if (i == 15) {
        st = std::atof(field.c_str());
        break;
      }
    }
    return (ut + st) / sysconf(_SC_CLK_TCK);
  }
  long ServiceStatus(const std::string& key) const {
    std::ifstream f("/proc/" + std::to_string(o_.service_pid) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind(key + ":", 0) == 0) return std::atol(line.c_str() + key.size() + 1);
    }
    return -1;
  }

  bool AllReplied(int except = -1) const {
    for (const Sim& s : sims_) {
      if (s.id != except && !s.replied) return false;
    }
    return true;
  }
  int Unanswered(int except = -1) const {
    int n = 0;
    for (const Sim& s : sims_) n += s.id != except && !s.replied;
    return n;
  }

  const Options o_;
  std::vector<Sim> sims_;
  int ep_ = -1;
  std::deque<int> beats_;
  double interval_s_ = 1, timeout_s_ = 10;
  uint64_t frames_in_ = 0, frames_out_ = 0, bytes_in_ = 0, bytes_out_ = 0;
  uint64_t replies_ = 0, failures_seen_ = 0, connect_retries_ = 0;
  std::string expected_topology_;
  Clock::time_point last_reply_, last_hello_, first_topology_;
  bool death_started_ = false;
  std::vector<std::string> problems_;
  uint64_t problem_count_ = 0;
};

std::string Json(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.6f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

std::string Quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return q + "\"";
}

int Generator::Run() {
  const int n = o_.num_processes;
  std::ostringstream j;
  j << "{\"num_processes\": " << n;
  auto fail = [&](const std::string& phase) {
    Problem(phase + " did not finish within " + std::to_string(o_.phase_timeout) + " s (" +
            std::to_string(Unanswered()) + " processes unanswered)");
  };

  // Registration: every process connects at once, says Hello, registers.
  auto t0 = Clock::now();
  for (Sim& s : sims_) Connect(s);
  const double connect_s = Since(t0);
  bool ok = Pump([&] { return AllReplied(); }, o_.phase_timeout);
  const double registered_s = Since(t0);
  if (!ok) fail("registration");
  int registered = 0;
  for (const Sim& s : sims_) registered += s.stage == Stage::kMember;
  j << ", \"hello_s\": " << std::chrono::duration<double>(last_hello_ - t0).count()
    << ", \"first_topology_s\": " << std::chrono::duration<double>(first_topology_ - t0).count();
  j << ", \"topology_reply_bytes\": " << expected_topology_.size();
  j << ", \"connect_s\": " << connect_s << ", \"registration_s\": " << registered_s << ", \"registered\": " << registered
    << ", \"connect_retries\": " << connect_retries_ << ", \"heartbeat_interval_s\": " << interval_s_
    << ", \"heartbeat_timeout_s\": " << timeout_s_;

  // Idle: only heartbeats. The service's CPU over the window, its memory at the end.
  if (o_.idle_seconds > 0) {
    const uint64_t f_in = frames_in_, f_out = frames_out_, b_in = bytes_in_, b_out = bytes_out_;
    const double cpu0 = o_.service_pid ? ServiceCpu() : 0;
    auto i0 = Clock::now();
    Pump([] { return false; }, o_.idle_seconds);
    const double wall = Since(i0);
    j << ", \"idle_s\": " << wall;
    if (o_.service_pid) {
      j << ", \"idle_cpu_cores\": " << (ServiceCpu() - cpu0) / wall << ", \"rss_kib\": " << ServiceStatus("VmRSS")
        << ", \"threads\": " << ServiceStatus("Threads");
    }
    j << ", \"heartbeat_frames_per_s\": " << (frames_in_ - f_in + frames_out_ - f_out) / wall
      << ", \"heartbeat_bytes_per_s\": " << (bytes_in_ - b_in + bytes_out_ - b_out) / wall;
  }

  // Barriers of all: the time from the first arrival sent to the last
  // release read, and from the last arrival sent (the barrier's own cost).
  // The service's CPU per barrier too: what one core of its own must do
  // for a release, loopback's receiving half included (an upper bound).
  std::vector<double> barrier_total, barrier_release;
  const double barrier_cpu0 = o_.service_pid ? ServiceCpu() : 0;
  int barriers = 0;
  for (int r = 0; r < o_.rounds && problem_count_ == 0; ++r, ++barriers) {
    msg::Barrier b;
    b.name = "scale/barrier/" + std::to_string(r);
    b.timeout_ms = static_cast<uint64_t>(o_.phase_timeout * 1000);
    auto b0 = Clock::now();
    for (Sim& s : sims_) Request(s, b, coord::MessageType::kOk);
    auto b1 = Clock::now();
    if (!Pump([&] { return AllReplied(); }, o_.phase_timeout)) fail("barrier " + std::to_string(r));
    barrier_total.push_back(std::chrono::duration<double>(last_reply_ - b0).count());
    barrier_release.push_back(std::chrono::duration<double>(last_reply_ - b1).count());
  }
  j << ", \"barrier_total_s\": " << Json(barrier_total) << ", \"barrier_release_s\": " << Json(barrier_release);
  if (o_.service_pid && barriers > 0) j << ", \"barrier_service_cpu_s\": " << (ServiceCpu() - barrier_cpu0) / barriers;

  // Key-value: every process sets its key, then gets its neighbour's
  // (a blocking get: the neighbour may not have set it yet).
  std::vector<double> kv_s;
  for (int r = 0; r < o_.rounds && problem_count_ == 0; ++r) {
    auto key = [&](int id) { return "scale/kv/" + std::to_string(r) + "/" + std::to_string(id); };
    auto value = [&](int id) { return "value of " + std::to_string(id) + " in round " + std::to_string(r); };
    auto k0 = Clock::now();
    for (Sim& s : sims_) {
      msg::KeyValueSet m;
      m.key = key(s.id);
      m.value = value(s.id);
      Request(s, m, coord::MessageType::kOk);
    }
    if (!Pump([&] { return AllReplied(); }, o_.phase_timeout)) fail("key-value set " + std::to_string(r));
    for (Sim& s : sims_) {
      msg::KeyValueGet m;
      const int peer = (s.id + 1) % n;
      m.key = key(peer);
      m.timeout_ms = static_cast<uint64_t>(o_.phase_timeout * 1000);
      Request(s, m, coord::MessageType::kValue, value(peer));
    }
    if (!Pump([&] { return AllReplied(); }, o_.phase_timeout)) fail("key-value get " + std::to_string(r));
    kv_s.push_back(std::chrono::duration<double>(last_reply_ - k0).count());
  }
  j << ", \"kv_set_get_s\": " << Json(kv_s) << ", \"kv_calls\": " << 2 * n;

  // A death: the last process closes its socket, or freezes (sends and
  // reads nothing more); every other one must hear of it.
  if (o_.death != "none" && problem_count_ == 0) {
    Sim& victim = sims_[n - 1];
    death_started_ = true;
    auto d0 = Clock::now();
    if (o_.death == "closed") {
      Close(victim);
    } else {
      victim.frozen = true;
      epoll_ctl(ep_, EPOLL_CTL_DEL, victim.fd, nullptr);
    }
    const int others = n - 1;
    const double limit = o_.phase_timeout + (o_.death == "frozen" ? 2 * timeout_s_ : 0);
    if (!Pump([&] { return failures_seen_ >= static_cast<uint64_t>(others); }, limit)) {
      Problem("only " + std::to_string(failures_seen_) + " of " + std::to_string(others) + " processes heard of the " +
              o_.death + " death within " + std::to_string(limit) + " s");
    }
    double first = 1e9, last = 0;
    int told = 0;
    for (const Sim& s : sims_) {
      if (s.id == victim.id || !s.failure_seen) continue;
      if (s.failure_of != static_cast<uint32_t>(victim.id)) Problem("a failure notice named the wrong process");
      ++told;
      const double t = std::chrono::duration<double>(s.failure_at - d0).count();
      first = std::min(first, t);
      last = std::max(last, t);
    }
    j << ", \"death\": " << Quote(o_.death) << ", \"death_told\": " << told << ", \"death_first_s\": " << first
      << ", \"death_all_s\": " << last;
  }

  j << ", \"frames_in\": " << frames_in_ << ", \"frames_out\": " << frames_out_ << ", \"problems\": " << problem_count_
    << ", \"problem_list\": [";
  for (size_t i = 0; i < problems_.size(); ++i) j << (i ? ", " : "") << Quote(problems_[i]);
  j << "]}";
  std::printf("%s\n", j.str().c_str());
  std::fflush(stdout);
  return problem_count_ == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--host") o.host = next();
    else if (a == "--port") o.port = std::atoi(next().c_str());
    else if (a == "--token") o.token = next();
    else if (a == "--num-processes") o.num_processes = std::atoi(next().c_str());
    else if (a == "--rounds") o.rounds = std::atoi(next().c_str());
    else if (a == "--death") o.death = next();
    else if (a == "--idle-seconds") o.idle_seconds = std::atof(next().c_str());
    else if (a == "--service-pid") o.service_pid = std::atoi(next().c_str());
    else if (a == "--topology") o.topology = next();
    else if (a == "--phase-timeout") o.phase_timeout = std::atof(next().c_str());
    else Die("unknown argument " + a);
  }
  if (o.port <= 0 || o.num_processes < 2) Die("needs --port and --num-processes (at least 2)");
  if (o.death != "closed" && o.death != "frozen" && o.death != "none") Die("--death is closed, frozen or none");
  // One descriptor per simulated process: as many as the hard limit allows.
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < static_cast<rlim_t>(o.num_processes) + 32) {
    Die("needs " + std::to_string(o.num_processes + 32) + " descriptors; the hard limit (ulimit -Hn) is " +
        std::to_string(rl.rlim_cur));
  }
  Generator g(o);
  return g.Run();
}
