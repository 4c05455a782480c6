// The one error type of the project: a code and a message. It crosses the
// PJRT C API boundary as PJRT_Error (pjrt/error.h) and the Python boundary as
// an exception, and every layer below speaks it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// What went wrong in a job, where a caller may act on the kind (Python
// raises one class per kind: jax_plugin/errors.py). Most errors have none.
enum class FailureKind : int {
  kNone = 0,
  kPeerFailure = 1,   // a process of the job failed or left (processes: which)
  kTimeout = 2,       // a collective or barrier waited past its bound (processes: those it waited for)
  kMismatch = 3,      // processes issued different collectives (processes: those that differ from this one)
  kCoordination = 4,  // the coordination service is unreachable, or stopped answering
};

// The fields of a failure, as the layer that found it knows them.
struct FailureDetail {
  FailureKind kind = FailureKind::kNone;
  std::vector<int> processes;
  std::string collective;  // the operation ("all-reduce sum f32[8]") or barrier ("barrier 'b'"); empty outside one
  int64_t call = -1;       // the call's number on its communicator; -1 where there is none
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The failure this error reports, or null.
  const FailureDetail* failure() const { return failure_.get(); }

  // This status, reporting `detail`.
  Status WithFailure(FailureDetail detail) const {
    Status s = *this;
    s.failure_ = std::make_shared<const FailureDetail>(std::move(detail));
    return s;
  }
  // This status, reporting the failure that `cause` reports (if any): for an
  // error that describes another one afresh.
  Status WithFailureOf(const Status& cause) const {
    Status s = *this;
    s.failure_ = cause.failure_;
    return s;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::shared_ptr<const FailureDetail> failure_;  // shared: statuses are copied freely
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
