#include "coordination/limits.h"

#include <cstdio>


namespace myplugin::coordination {

std::string ByteCount(size_t n) {
  char buf[48];
  if (n >= (1u << 20)) {
    std::snprintf(buf, sizeof(buf), "%.4g MiB", n / double(1u << 20));
  } else if (n >= (1u << 10)) {
    std::snprintf(buf, sizeof(buf), "%.4g KiB", n / double(1u << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%zu bytes", n);
  }
  return buf;
}

std::string QuotedKey(const std::string& key) {
  constexpr size_t kShown = 200;
  return "\"" + (key.size() > kShown ? key.substr(0, kShown) + "..." : key) + "\"";
}

Status CheckKey(const std::string& what, const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    return Status(Code::kResourceExhausted, what + ": key of " + ByteCount(key.size()) + " exceeds the " +
                                                ByteCount(kMaxKeyBytes) + " limit");
  }
  return OkStatus();
}

Status CheckKeyValue(const std::string& what, const std::string& key, const std::string& value) {
  MYPLUGIN_RETURN_IF_ERROR(CheckKey(what, key));
  if (value.size() > kMaxValueBytes) {
    return Status(Code::kResourceExhausted, what + ": value of " + ByteCount(value.size()) + " exceeds the " +
                                                ByteCount(kMaxValueBytes) + " limit");
  }
  return OkStatus();
}

}  // namespace myplugin::coordination
