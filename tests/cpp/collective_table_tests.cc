// The collective table (collectives/collective_table.h) against the handlers
// registered from it: each engine registers exactly the targets the table
// marks for it, under the table's names, and the table names each target,
// id and attribute key once.
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "collectives/collective_table.h"
#include "collectives/ffi_handlers.h"
#ifdef MYPLUGIN_HAVE_NCCL
#include "collectives/nccl_ffi_handlers.h"
#endif

namespace {

using namespace myplugin::collectives;

std::vector<std::string> TableNames(Engine engine) {
  std::vector<std::string> names;
  for (const CollectiveTarget* t : kCollectiveTargets) {
    if (t->engines & engine) names.push_back(t->name);
  }
  return names;
}

std::vector<std::string> Registered(const std::vector<std::pair<std::string, void*>>& handlers) {
  std::vector<std::string> names;
  for (const auto& [name, handler] : handlers) {
    CHECK(handler != nullptr);
    names.push_back(name);
  }
  return names;
}

void TestNamesAreUnique() {
  std::set<std::string> names, ids;
  for (const CollectiveTarget* t : kCollectiveTargets) {
    CHECK(names.insert(t->name).second);
    CHECK(ids.insert(t->id).second);
    CHECK(t->engines != 0);
    std::set<std::string> keys;
    for (size_t i = 0; i < t->attribute_count(); ++i) CHECK(keys.insert(t->attributes[i]->key).second);
    for (size_t i = t->attribute_count(); i < kMaxAttributes; ++i) CHECK(t->attributes[i] == nullptr);
  }
}

void TestEachEngineRegistersItsTargets() {
  CHECK(Registered(FfiHandlers()) == TableNames(kHostEngine));
  // The host engine runs every target but the ragged all-to-all (XLA's CPU
  // engine has none to run in one process either).
  CHECK(TableNames(kHostEngine).size() + 1 == kCollectiveTargets.size());
  CHECK(!(kRaggedAllToAll.engines & kHostEngine));
#ifdef MYPLUGIN_HAVE_NCCL
  CHECK(Registered(NcclFfiHandlers()) == TableNames(kCudaEngine));
#endif
}

void TestNames() {
  CHECK(std::string(Name(AttrType::kI64Array)) == "i64[]" && std::string(Name(AttrType::kString)) == "str");
  CHECK(std::string(Name(Operands::kAnyNumber)) == "any_number" && std::string(Name(Results::kAliased)) == "aliased");
  CHECK(std::string(Name(kHostEngine)) == "cpu" && std::string(Name(kCudaEngine)) == "cuda");
}

}  // namespace

void RunCollectiveTableTests() {
  TestNamesAreUnique();
  TestEachEngineRegistersItsTargets();
  TestNames();
}
