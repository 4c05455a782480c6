// Our PJRT_Api table (GetPjrtApi, api_table.cc).
#pragma once

namespace myplugin {

// Once the engine loaded: chains the extensions that only an engine with
// its own can back (layouts). jaxlib looks for them from client creation
// on, after PJRT_Plugin_Initialize; calling it again changes nothing.
void ChainEngineExtensions();

}  // namespace myplugin
