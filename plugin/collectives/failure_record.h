// The last failure this process's collectives reported to a running program.
// jaxlib builds its exception from an FFI error's code and text alone, so the
// failure's fields (kind, processes, call) wait here for jax_plugin.errors.
#pragma once

#include <optional>

#include "common/status.h"

namespace myplugin::collectives {

// Keeps `st` if it reports a failure (common/status.h); others are not kept.
void RecordFailure(const Status& st);
// The last failure kept, which is then forgotten: each error that a program
// raised is typed once, and an unrelated error later is not taken for it.
std::optional<Status> TakeFailure();
// A rebuilt job starts with none.
void ForgetFailure();

}  // namespace myplugin::collectives
