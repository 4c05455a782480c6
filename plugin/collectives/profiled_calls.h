// A recorded collective or barrier as profile spans (common/profile_spans.h):
// the call, and inside it the wait for its peers (until every process's
// signature had arrived) and the moving of its data. The flight recorder
// hands each call over as it ends, while a profile is being taken; its
// times are the recorder's.
#pragma once

#include "collectives/flight_recorder.h"

namespace myplugin::collectives {

void ProfileCall(const CallRecord& call);

}  // namespace myplugin::collectives
