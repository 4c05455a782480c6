#include "coordination/sigterm_notice.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>
#include <utility>

namespace myplugin::coordination {

namespace {

// All the handler touches: two ints and the handler it chains to, set
// before it is installed and never changed after.
int notice_pipe[2] = {-1, -1};
struct sigaction chained {};

void OnSigterm(int signum, siginfo_t* info, void* context) {
  const int saved = errno;
  const char b = 1;
  if (write(notice_pipe[1], &b, 1) < 0) {
  }  // a full pipe already holds a notice
  errno = saved;
  if (chained.sa_flags & SA_SIGINFO) {
    if (chained.sa_sigaction != nullptr) chained.sa_sigaction(signum, info, context);
  } else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN && chained.sa_handler != nullptr) {
    chained.sa_handler(signum);
  }
}

std::mutex notice_mu;
std::function<void()> pending;  // under notice_mu: what the next signal runs (once)

void Watch() {
  for (;;) {
    pollfd pfd{notice_pipe[0], POLLIN, 0};
    if (poll(&pfd, 1, -1) <= 0) continue;
    char buf[64];
    while (read(notice_pipe[0], buf, sizeof(buf)) > 0) {
    }
    std::function<void()> notice;
    {
      std::lock_guard<std::mutex> lock(notice_mu);
      notice = std::move(pending);
      pending = nullptr;
    }
    if (notice) notice();  // the first SIGTERM since Install; the Python handler deals with later ones
  }
}

}  // namespace

Status InstallSigtermNotice(std::function<void()> notice) {
  std::lock_guard<std::mutex> lock(notice_mu);
  struct sigaction current {};
  if (sigaction(SIGTERM, nullptr, &current) != 0) return Internal("sigaction(SIGTERM) could not be read");
  const bool ours = (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == OnSigterm;
  if (!ours && !(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)) {
    return FailedPrecondition("SIGTERM has no handler to go in front of");
  }
  if (notice_pipe[0] < 0) {
    if (pipe(notice_pipe) != 0) return Internal("no pipe for the SIGTERM notice");
    for (int fd : notice_pipe) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    std::thread(Watch).detach();
  }
  pending = std::move(notice);
  if (ours) return OkStatus();  // still in front: the same handler behind it
  // Set before ours is installed; a handler of ours replaced since chains
  // to what replaced it.
  chained = current;
  struct sigaction sa {};
  sa.sa_sigaction = OnSigterm;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | (current.sa_flags & SA_ONSTACK);
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGTERM, &sa, nullptr) != 0) return Internal("sigaction(SIGTERM) could not be set");
  return OkStatus();
}

}  // namespace myplugin::coordination
