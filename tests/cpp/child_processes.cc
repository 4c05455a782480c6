#include "child_processes.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

extern char** environ;

namespace unit {

std::vector<ChildResult> RunChildren(const std::vector<std::vector<std::string>>& args, double deadline_s,
                                     bool with_stderr) {
  const size_t n = args.size();
  std::vector<ChildResult> results(n);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> out(n, -1);
  for (size_t p = 0; p < n; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) continue;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    if (with_stderr) posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> argv = {const_cast<char*>("myplugin_unit_tests")};
    for (const std::string& a : args[p]) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // Each child leads a process group of its own: what is left at the
    // deadline is killed whole.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    if (posix_spawn(&pids[p], "/proc/self/exe", &actions, &attr, argv.data(), environ) != 0) pids[p] = -1;
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (pids[p] < 0) {
      ::close(fds[0]);
      continue;
    }
    out[p] = fds[0];
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> who;
    for (size_t p = 0; p < n; ++p) {
      if (out[p] >= 0) {
        fds.push_back({out[p], POLLIN, 0});
        who.push_back(p);
      }
    }
    if (fds.empty() || std::chrono::steady_clock::now() >= deadline) break;
    if (::poll(fds.data(), fds.size(), 200) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const size_t p = who[i];
      char buf[4096];
      const ssize_t got = ::read(out[p], buf, sizeof(buf));
      if (got > 0) {
        results[p].output.append(buf, static_cast<size_t>(got));
      } else {
        ::close(out[p]);
        out[p] = -1;
      }
    }
  }
  // The exits, within the same deadline: a child that closed its output but
  // goes on, or one still writing, is killed with its group.
  for (size_t p = 0; p < n; ++p) {
    if (pids[p] < 0) continue;
    if (out[p] >= 0) ::close(out[p]);
    for (;;) {
      if (::waitpid(pids[p], &results[p].status, WNOHANG) == pids[p]) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(-pids[p], SIGKILL);
        results[p].killed = true;
        ::waitpid(pids[p], &results[p].status, 0);  // SIGKILL: it ends now
        break;
      }
      ::poll(nullptr, 0, 20);
    }
    ::kill(-pids[p], SIGKILL);  // anything its group left behind
  }
  return results;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

}  // namespace unit
