#include "spmd/jaxlib_partitioned_targets.h"

#include <algorithm>
#include <mutex>

namespace myplugin::spmd {
namespace {

struct BatchTargets {
  std::mutex mu;
  std::vector<std::string> names;
};

BatchTargets& Batch() {
  static BatchTargets* targets = new BatchTargets;  // used until exit
  return *targets;
}

}  // namespace

void AddBatchPartitionableTarget(const std::string& name) {
  BatchTargets& b = Batch();
  std::lock_guard<std::mutex> lock(b.mu);
  if (std::find(b.names.begin(), b.names.end(), name) == b.names.end()) b.names.push_back(name);
}

std::vector<std::string> JaxlibPartitionedTargets() {
  std::vector<std::string> out(std::begin(kJaxlibPartitionedTargets), std::end(kJaxlibPartitionedTargets));
  BatchTargets& b = Batch();
  std::lock_guard<std::mutex> lock(b.mu);
  out.insert(out.end(), b.names.begin(), b.names.end());
  return out;
}

bool CallsJaxlibPartitionedTarget(std::string_view code) {
  for (const std::string& target : JaxlibPartitionedTargets()) {
    if (code.find(target) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace myplugin::spmd
