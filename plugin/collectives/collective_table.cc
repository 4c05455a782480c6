#include "collectives/collective_table.h"

namespace myplugin::collectives {

const char* Name(AttrType type) {
  switch (type) {
    case AttrType::kString: return "str";
    case AttrType::kI64: return "i64";
    case AttrType::kI64Array: return "i64[]";
  }
  return "?";
}

const char* Name(Operands operands) {
  switch (operands) {
    case Operands::kAnyNumber: return "any_number";
    case Operands::kOne: return "one";
    case Operands::kNone: return "none";
    case Operands::kRagged: return "ragged";
  }
  return "?";
}

const char* Name(Results results) {
  switch (results) {
    case Results::kOnePerOperand: return "one_per_operand";
    case Results::kOne: return "one";
    case Results::kAliased: return "aliased";
  }
  return "?";
}

const char* Name(Engine engine) {
  switch (engine) {
    case kHostEngine: return "cpu";
    case kCudaEngine: return "cuda";
  }
  return "?";
}

}  // namespace myplugin::collectives
