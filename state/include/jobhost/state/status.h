// jobhost/state/status.h — error values for the state module (leveldb-style Status).
//
// A Status is either OK or carries a code and a human-readable message. OK is one null
// pointer, so returning OK costs nothing; errors allocate. Result<T> holds either a T
// or a non-OK Status.
//
// Unavailable and corrupt are different answers (gRPC's UNAVAILABLE vs DATA_LOSS). The
// storage boundary (CheckpointStorage implementations, fromErrno) decides once:
//   - Unavailable: the operation did not get a complete answer and may succeed if tried
//     again later — an HTTP 5xx or 429 (SlowDown), a connection refused, reset or timed
//     out, a HEAD 200 without Content-Length, a body shorter than announced or than the
//     range asked for, EIO and the network errnos. It says nothing about the stored bytes:
//     a size or content seen on such an answer is never compared with anything.
//   - Corruption: bytes that were completely read (or a size the storage reported from a
//     complete answer) disagree with what they must be (`_metadata`, a format). Final:
//     retrying reads the same bytes.
//   - IOError: any other I/O failure not known to be transient (a malformed answer, an
//     unexpected errno). The restart strategy treats it as a task failure.
// Everything above the storage only asks the code; nothing compares sizes or parses
// messages to decide (jobhost/state/snapshot_file.h owns the "does this file match its
// `_metadata`" decision).
//
// Thread-safety: Status and Result are plain values. Distinct objects may be used from
// different threads freely; const methods on one object may be called concurrently;
// mutating one object concurrently with any other access needs external sync.
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace jobhost::state {

class [[nodiscard]] Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kNotFound,
    kCorruption,
    kInvalidArgument,
    kIOError,
    kNoSpace,
    kPermissionDenied,
    kIncompatible,  // e.g. a snapshot written by an incompatible serializer or format
    kUnavailable,   // try again later: no complete answer (see below); says nothing of the data
  };

  /// Creates an OK status.
  Status() noexcept = default;
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&& other) noexcept = default;
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, msg); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(Code::kInvalidArgument, msg);
  }
  static Status IOError(std::string_view msg) { return Status(Code::kIOError, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, msg); }
  static Status PermissionDenied(std::string_view msg) {
    return Status(Code::kPermissionDenied, msg);
  }
  static Status Incompatible(std::string_view msg) {
    return Status(Code::kIncompatible, msg);
  }
  static Status Unavailable(std::string_view msg) { return Status(Code::kUnavailable, msg); }

  bool ok() const { return rep_ == nullptr; }
  bool isNotFound() const { return code() == Code::kNotFound; }
  bool isCorruption() const { return code() == Code::kCorruption; }
  bool isInvalidArgument() const { return code() == Code::kInvalidArgument; }
  bool isIOError() const { return code() == Code::kIOError; }
  bool isNoSpace() const { return code() == Code::kNoSpace; }
  bool isPermissionDenied() const { return code() == Code::kPermissionDenied; }
  bool isIncompatible() const { return code() == Code::kIncompatible; }
  bool isUnavailable() const { return code() == Code::kUnavailable; }

  Code code() const { return rep_ == nullptr ? Code::kOk : rep_->code; }

  /// The message without the code prefix; empty for OK.
  const std::string& message() const;

  /// "OK", or a code prefix plus the message, e.g. "IO error: cannot write /x: ...".
  std::string toString() const;

  /// The same code, with "<context>: " before the message (OK stays OK).
  Status withContext(std::string_view context) const;

  /// Explicitly ignores this status (for best-effort cleanup paths).
  void ignoreError() const {}

 private:
  struct Rep {
    Code code;
    std::string message;
  };

  Status(Code code, std::string_view msg);

  std::unique_ptr<Rep> rep_;  // null means OK
};

/// Prints status.toString() (lets GoogleTest and logging print a Status).
std::ostream& operator<<(std::ostream& os, const Status& status);

/// Name of a code without the message, e.g. "IO error", "Not found", "OK".
std::string_view codeName(Status::Code code);

/// Builds a Status from an errno value: ENOENT -> NotFound, ENOSPC/EDQUOT -> NoSpace,
/// EACCES/EPERM/EROFS -> PermissionDenied, EIO, ETIMEDOUT, EAGAIN, ESTALE and the
/// network errors (ECONNRESET, ECONNREFUSED, ENETUNREACH, ...) -> Unavailable, anything
/// else -> IOError. The message is
/// "<context>: <strerror(err)>", e.g. "cannot write /x/_metadata: No space left on device".
Status fromErrno(const std::string& context, int err);

namespace internal {
/// Aborts the process: value() was called on a Result that holds an error.
[[noreturn]] void badResultAccess(const Status& status);
}  // namespace internal

/// Either a T or a non-OK Status. Constructing a Result from an OK Status is a
/// programming error; it is turned into an InvalidArgument error so it cannot pass as
/// a value. Accessing value() of an error Result aborts with the status message.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) {
      status_ = Status::InvalidArgument("internal error: Result constructed from OK status");
    }
  }

  bool ok() const { return value_.has_value(); }

  /// OK when a value is held, otherwise the error.
  const Status& status() const { return status_; }

  T& value() & {
    check();
    return *value_;
  }
  const T& value() const& {
    check();
    return *value_;
  }
  T&& value() && {
    check();
    return std::move(*value_);
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check() const {
    if (!value_.has_value()) internal::badResultAccess(status_);
  }

  Status status_;  // OK iff value_ holds a value
  std::optional<T> value_;
};

}  // namespace jobhost::state
