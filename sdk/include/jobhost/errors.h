// jobhost/errors.h — exception types that cross the plugin boundary.
//
// User code reports failures by throwing; the host catches by these types, so they are
// marked visible (see version.h). Throwing anything else also fails the job; these only
// let the host classify the failure.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "jobhost/version.h"

namespace jobhost {

/// A job argument or configuration value the job rejects. The host prints the message
/// and exits with the usage exit code (2) instead of treating it as a job failure.
class JOBHOST_API JobArgumentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bytes that do not decode with the expected serializer (truncated or foreign data).
class JOBHOST_API SerializationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Misuse of keyed state: state touched outside a keyed context, or one name declared
/// twice with different kinds or serializers.
class JOBHOST_API StateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An exception from user code, annotated by the SDK with the operator it came from.
/// The host logs the operator, the subtask and the message.
class JOBHOST_API UserCodeError : public std::runtime_error {
 public:
  UserCodeError(std::string operatorName, const std::string& message)
      : std::runtime_error(message), operator_(std::move(operatorName)) {}
  const std::string& operatorName() const { return operator_; }

 private:
  std::string operator_;
};

/// Runs user code; any std::exception becomes a UserCodeError naming `op`.
template <class F>
decltype(auto) callUser(const std::string& op, F&& f) {
  try {
    return f();
  } catch (const UserCodeError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserCodeError(op, e.what());
  }
}

}  // namespace jobhost
