// The engine's extension lookup (engine/engine_library.h).
#include <cstring>

#include "check.h"
#include "engine/engine_library.h"

namespace {

// Found by UBSan in the Python tests: the engine (newer than our
// pjrt_c_api.h) lists an extension of type 24, which the lookup loaded as
// the enum. Types past ours are skipped, the one asked for is found.
void TestExtensionTypesPastOurHeader() {
  PJRT_Extension_Base ffi{}, newer{}, older{};
  ffi.type = PJRT_Extension_Type_FFI;
  const int unknown = 24;
  std::memcpy(&newer.type, &unknown, sizeof(unknown));
  newer.next = &ffi;
  older.type = PJRT_Extension_Type_Custom_Partitioner;
  older.next = &newer;
  CHECK(myplugin::FindExtensionIn(&older, PJRT_Extension_Type_FFI) == &ffi);
  CHECK(myplugin::FindExtensionIn(&older, PJRT_Extension_Type_Custom_Partitioner) == &older);
  CHECK(myplugin::FindExtensionIn(&older, PJRT_Extension_Type_Layouts) == nullptr);
  CHECK(myplugin::FindExtensionIn(nullptr, PJRT_Extension_Type_FFI) == nullptr);
}

}  // namespace

void RunEngineLibraryTests() { TestExtensionTypesPastOurHeader(); }
