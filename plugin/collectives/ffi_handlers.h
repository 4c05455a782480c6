// Typed XLA FFI handlers for the collectives in compiled programs, on the
// host engine: one for each target of the collective table
// (collective_table.h: names, operands, results and attributes), bound
// from it. replica_groups name global device ids; a device runs the
// collective with the group it is in. A call of several operands (the
// rewrite's bucket; combined_operands.h) moves them in one run per element
// type.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace myplugin::collectives {

// (target name, XLA_FFI_Handler*) of every handler.
std::vector<std::pair<std::string, void*>> FfiHandlers();

}  // namespace myplugin::collectives
