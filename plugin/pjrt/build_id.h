// The id of this build of the plugin (a hash of its sources and compiler,
// made at CMake time). It is part of the client's platform version, so a
// compilation-cache entry or serialized executable of another build is never
// taken for one of this build.
#pragma once

namespace myplugin {

const char* BuildId();

}  // namespace myplugin
