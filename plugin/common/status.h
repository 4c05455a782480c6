// The one error type of the project: a code and a message. It crosses the
// PJRT C API boundary as PJRT_Error (pjrt/error.h) and the Python boundary as
// an exception, and every layer below speaks it.
#pragma once

#include <string>
#include <utility>

namespace myplugin {

// Same numbering as PJRT_Error_Code (and absl::StatusCode), so that a code
// passes through every boundary unchanged.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
inline Status Unimplemented(std::string m) { return Status(Code::kUnimplemented, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
inline Status DataLoss(std::string m) { return Status(Code::kDataLoss, std::move(m)); }

// A value or the Status that explains its absence.
template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T&& take() { return std::move(value_); }

 private:
  Status status_;
  T value_{};
};

}  // namespace myplugin

#define MYPLUGIN_RETURN_IF_ERROR(expr)      \
  do {                                      \
    ::myplugin::Status _st = (expr);        \
    if (!_st.ok()) return _st;              \
  } while (0)
