// Process 0's reporter of the straggler watch (straggler_watch.h): woken by
// the doorbell, it gathers every process's answer (the lines Answer writes in
// straggler_watch.cc) and prints one report naming who has not arrived and
// what each of those is doing.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/flight_recorder.h"
#include "collectives/process_runtime.h"
#include "collectives/straggler_state.h"
#include "common/deadline.h"
#include "common/log.h"

namespace myplugin::collectives {
namespace {

using coordination::CoordinationClient;

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

class Reporter {
 public:
  explicit Reporter(std::shared_ptr<WatchState> s) : s_(std::move(s)) {}

  void Run() {
    const double tick = std::clamp(s_->straggler_s / 4, 0.05, 1.0);
    while (true) {
      auto c = ClientOf(*s_);
      if (!c) return;
      const coordination::MembershipSnapshot now = MembershipNow();
      if (now.index != 0) {
        // Another member reports; this one takes over if an agreement
        // makes it the first member.
        if (!AwaitNextEpoch(*s_, now.epoch)) return;
        continue;
      }
      if (now.epoch != membership_.epoch || reports_ == 0) StartEpoch(now);
      const std::string prefix = EpochPrefix(now.epoch);
      const int64_t asked = MonotonicNanos();
      StatusOr<std::string> bell = c->KeyValueGet(prefix + "doorbell", kLongWaitS);
      if (!bell.ok()) {
        if (bell.status().code() == Code::kDeadlineExceeded) {
          PaceRetry(asked);
        } else if (!AwaitNextEpoch(*s_, now.epoch)) {
          return;
        }
        continue;
      }
      c->KeyValueDelete(prefix + "doorbell");
      // Armed: look once per tick while anyone waits.
      double next_report = 0;
      while (true) {
        auto entries = c->KeyValueList(prefix + "waiting/");
        if (!entries.ok() || entries.value().empty()) break;  // done, or the job failed: the loop above sees which
        const double now_s = MonotonicNanos() / 1e9;
        if (now_s >= next_report) {
          Report(*c, prefix, entries.value());
          next_report = MonotonicNanos() / 1e9 + s_->straggler_s;
        }
        std::this_thread::sleep_for(Millis(tick));
        if (!ClientOf(*s_) || MembershipNow().epoch != now.epoch) break;
      }
    }
  }

 private:
  // Reports of a new membership count from 1, and name its members.
  void StartEpoch(const coordination::MembershipSnapshot& now) {
    membership_ = now;
    reports_ = 0;
    dumped_ = false;
    previous_.clear();
  }

  // A member's name in a report: its coordination id, as membership() has it.
  int IdOf(int index) const {
    return index >= 0 && index < static_cast<int>(membership_.member_ids.size()) ? membership_.member_ids[index]
                                                                                   : index;
  }
  std::string Id(int index) const { return std::to_string(IdOf(index)); }
  std::string Ids(const std::vector<int>& indices) const {
    std::vector<int> ids;
    for (int p : indices) ids.push_back(IdOf(p));
    return IdList(ids);
  }

  void Report(CoordinationClient& c, const std::string& prefix,
              const std::vector<std::pair<std::string, std::string>>& entries) {
    const int members = static_cast<int>(membership_.member_ids.size());
    std::vector<Waiter> waiters;
    for (const auto& [key, value] : entries) {
      Waiter w;
      w.process = std::atoi(key.c_str() + prefix.size() + 8);
      if (w.process < 0 || w.process >= members) continue;
      std::istringstream in(value);
      std::string process_group;
      in >> w.hash >> w.seq >> w.start_wall >> process_group;
      std::getline(in, w.what);
      if (!w.what.empty() && w.what[0] == ' ') w.what.erase(0, 1);
      std::istringstream cl(process_group);
      std::string id;
      while (std::getline(cl, id, ',')) {
        const int p = std::atoi(id.c_str());
        if (p >= 0 && p < members) w.process_group.push_back(p);
      }
      waiters.push_back(w);
    }
    if (waiters.empty()) return;
    const int report = ++reports_;
    const bool first = report == 1 || !dumped_;
    c.KeyValueSet(prefix + "request/" + std::to_string(report), first ? "dump" : "stacks");
    dumped_ = true;
    std::vector<Reply> replies(members);
    const auto deadline = After(kAnswerWaitS);
    for (int p = 0; p < members; ++p) {
      double left = std::max(0.01, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
      const std::string key = prefix + "answer/" + std::to_string(report) + "/" + std::to_string(p);
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
    std::string text = "myplugin: straggler report #" + std::to_string(report);
    if (report > 1) text += " (" + Secs(MonotonicNanos() / 1e9 - last_report_) + " after the last)";
    text += "\n";
    if (membership_.epoch > 0) {
      // After a recovery: processes are named by their ids (membership().members),
      // the calls' own process lists by the members' places in that list.
      text += "  membership epoch " + std::to_string(membership_.epoch) + ": processes " +
              IdList(membership_.member_ids) + " (a call's process list counts their places in it)\n";
    }
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
      text += "  arrived: processes " + Ids(std::vector<int>(arrived.begin(), arrived.end())) +
              "; not arrived: processes " + Ids(late) + "\n";
      for (int p : late) {
        const Reply& r = replies[p];
        if (!r.answered) {
          text += "  process " + Id(p) + " did not answer within " + Secs(kAnswerWaitS) +
                  " (stopped, or its threads cannot run)\n";
          continue;
        }
        const std::string doing = Doing(r);
        auto prev = previous_.find(p);
        if (prev != previous_.end() && prev->second.first == r.stack && SameState(prev->second.second, r)) {
          text += "  process " + Id(p) + ": unchanged since the last report (same call, same stack)\n";
          continue;
        }
        text += "  process " + Id(p) + " (pid " + r.pid_host + ") " + doing + "\n";
        text += "    Python stack, every thread:\n" + Indent(r.stack, "      ");
        previous_[p] = {r.stack, r};
      }
    }
    if (report == 1 && !s_->trace_dir.empty()) {
      text += "  flight recorders written to " + s_->trace_dir + " (read them with: myplugin-trace " + s_->trace_dir +
              ")\n";
    }
    text += "  still waiting; the next report comes in " + Secs(s_->straggler_s) +
            " if the call has not completed (it fails after MYPLUGIN_COLLECTIVE_TIMEOUT_SECONDS=" +
            Num(ProcessRuntime::Get().settings()->collective_timeout_s) + ")";
    LogLine(text);
  }

  static bool SameState(const Reply& a, const Reply& b) {
    auto strip = [](const std::string& last) { return last.substr(last.find(' ') + 1); };  // drop the age
    return strip(a.last) == strip(b.last) && a.inflight.size() == b.inflight.size() && a.compiling == b.compiling;
  }

  std::shared_ptr<WatchState> s_;
  coordination::MembershipSnapshot membership_;  // the epoch reported on
  int reports_ = 0;
  bool dumped_ = false;
  double last_report_ = 0;
  std::map<int, std::pair<std::string, Reply>> previous_;
};

}  // namespace

void RunReporter(std::shared_ptr<WatchState> s) { Reporter(std::move(s)).Run(); }

}  // namespace myplugin::collectives
