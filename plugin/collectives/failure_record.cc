#include "collectives/failure_record.h"

#include <mutex>

namespace myplugin::collectives {
namespace {

std::mutex& Mutex() {
  static std::mutex mu;
  return mu;
}

std::optional<Status>& Last() {
  static std::optional<Status> last;
  return last;
}

}  // namespace

void RecordFailure(const Status& st) {
  if (st.failure() == nullptr || st.failure()->kind == FailureKind::kNone) return;
  std::lock_guard<std::mutex> lock(Mutex());
  Last() = st;
}

std::optional<Status> TakeFailure() {
  std::lock_guard<std::mutex> lock(Mutex());
  std::optional<Status> taken;
  taken.swap(Last());
  return taken;
}

void ForgetFailure() {
  std::lock_guard<std::mutex> lock(Mutex());
  Last().reset();
}

}  // namespace myplugin::collectives
