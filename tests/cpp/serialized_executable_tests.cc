// Unit tests of our serialized-executable envelope (pjrt/serialized_executable.h):
// what round-trips, and what is refused instead of misread.
#include <string>

#include "check.h"
#include "pjrt/serialized_executable.h"

using myplugin::DecodeSerializedExecutable;
using myplugin::EncodeSerializedExecutable;
using myplugin::SerializedExecutable;

namespace {

bool Mentions(const myplugin::Status& st, const char* text) { return st.message().find(text) != std::string::npos; }

SerializedExecutable MultiProcess() {
  SerializedExecutable e;
  e.platform_version = "myplugin 0.1.0 (build 0123456789abcdef) over XLA engine 'cpu'";
  e.engine_executable = std::string("local\0bytes", 11);
  e.multiprocess = true;
  e.process_independent = true;
  e.assignment = {{0, 2, 1, 3}};
  e.device_order = {2, 3};
  e.engine_ids = {0, 1};
  e.local_compile_options = "options";
  e.shadow_executable = "shadow";
  return e;
}

}  // namespace

void RunSerializedExecutableTests() {
  {  // a multi-process program round-trips field by field
    SerializedExecutable in = MultiProcess();
    auto out = DecodeSerializedExecutable(EncodeSerializedExecutable(in));
    CHECK(out.ok());
    const SerializedExecutable& e = out.value();
    CHECK(e.platform_version == in.platform_version);
    CHECK(e.engine_executable == in.engine_executable);
    CHECK(e.multiprocess && e.process_independent);
    CHECK(e.assignment == in.assignment);
    CHECK(e.device_order == in.device_order && e.engine_ids == in.engine_ids);
    CHECK(e.local_compile_options == "options" && e.shadow_executable == "shadow");
  }
  {  // a single-process program carries only the engine's bytes
    SerializedExecutable in;
    in.platform_version = "v";
    in.engine_executable = "engine";
    std::string bytes = EncodeSerializedExecutable(in);
    auto out = DecodeSerializedExecutable(bytes);
    CHECK(out.ok() && !out.value().multiprocess && out.value().engine_executable == "engine");
    CHECK(bytes.find("shadow") == std::string::npos);
  }
  {  // bytes of another backend, and empty bytes
    auto foreign = DecodeSerializedExecutable("\x08\x01 an executable of another backend");
    CHECK(!foreign.ok() && Mentions(foreign.status(), "not a serialized myplugin executable"));
    CHECK(!DecodeSerializedExecutable("").ok());
  }
  {  // every truncation is refused, never read past the end
    std::string bytes = EncodeSerializedExecutable(MultiProcess());
    bool all_refused = true;
    for (size_t n = 0; n < bytes.size(); ++n) all_refused &= !DecodeSerializedExecutable(bytes.substr(0, n)).ok();
    CHECK(all_refused);
    auto trailing = DecodeSerializedExecutable(bytes + "x");
    CHECK(!trailing.ok() && Mentions(trailing.status(), "trailing bytes"));
  }
  {  // another format version
    std::string bytes = EncodeSerializedExecutable(MultiProcess());
    bytes[16] = 3;  // the version follows the 16-byte magic
    auto other = DecodeSerializedExecutable(bytes);
    CHECK(!other.ok() && Mentions(other.status(), "format version 3"));
  }
  {  // a length that claims more than there is
    std::string bytes = EncodeSerializedExecutable(MultiProcess());
    bytes[24 + 7] = 0x7f;  // the top byte of the platform version's length
    CHECK(!DecodeSerializedExecutable(bytes).ok());
  }
}
