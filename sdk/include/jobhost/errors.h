// jobhost/errors.h — exception types that cross the plugin boundary.
//
// User code reports failures by throwing; the host catches by these types, so they are
// marked visible (see version.h). Throwing anything else also fails the job; these only
// let the host classify the failure.
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include <cxxabi.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>

namespace jobhost {

/// A job argument or configuration value the job rejects. The host prints the message
/// and exits with the usage exit code (2) instead of treating it as a job failure: from
/// build(), from an operator's open() (a sink whose output directory another job writes)
/// or while the job runs, it is never retried.
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

/// A service the job depends on (a database, a broker, a remote store) does not answer
/// right now: a refused, reset or timed-out connection, a server shutting down or starting
/// up. Not a failure of the job: the host waits with backoff (0.5 s doubling to 30 s,
/// logged) and restarts the attempt from the latest checkpoint, without counting it
/// against the restart strategy, for as long as the outage lasts. Throw it only for
/// errors that trying again later can cure; a wrong password or a missing table is a
/// std::runtime_error (the restart strategy decides).
class JOBHOST_API DependencyUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An exception from user code, annotated by the SDK with the operator it came from.
/// The host logs the operator, the subtask and the message.
class JOBHOST_API UserCodeError : public std::runtime_error {
 public:
  UserCodeError(std::string operatorName, const std::string& message, bool dependencyUnavailable = false)
      : std::runtime_error(message), operator_(std::move(operatorName)), unavailable_(dependencyUnavailable) {}
  const std::string& operatorName() const { return operator_; }
  /// It was a DependencyUnavailable: waited out, not counted.
  bool dependencyUnavailable() const { return unavailable_; }

 private:
  std::string operator_;
  bool unavailable_ = false;
};

/// A JobArgumentError from user code while the job runs, annotated by the SDK with the
/// operator it came from (as UserCodeError is for the others), so that the host names
/// that operator and not the last one of its task's chain. Still a JobArgumentError:
/// exit 2, never retried.
class JOBHOST_API OperatorArgumentError : public JobArgumentError {
 public:
  OperatorArgumentError(std::string operatorName, const std::string& message)
      : JobArgumentError(message), operator_(std::move(operatorName)) {}
  const std::string& operatorName() const { return operator_; }

 private:
  std::string operator_;
};

/// Describes the exception being handled; call it only inside a catch block. A
/// std::exception gives its what(); a thrown C string, std::string or integer its value
/// ("int 42, not a std::exception"); anything else the thrown type's name.
inline std::string describeCurrentException() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (const char* s) {
    return "a C string, not a std::exception: '" + std::string(s != nullptr ? s : "(null)") + "'";
  } catch (const std::string& s) {
    return "a std::string, not a std::exception: '" + s + "'";
  } catch (int v) {
    return "int " + std::to_string(v) + ", not a std::exception";
  } catch (long v) {
    return "long " + std::to_string(v) + ", not a std::exception";
  } catch (...) {
    // The Itanium C++ ABI (GCC, Clang) names the type of the exception being handled.
    const std::type_info* type = abi::__cxa_current_exception_type();
    if (type == nullptr) return "an unknown value, not a std::exception";
    int status = 0;
    char* name = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
    std::string shown = status == 0 && name != nullptr ? name : type->name();
    std::free(name);
    return "a value of type " + shown + ", not a std::exception";
  }
}

/// Runs user code; anything it throws (a std::exception or not) becomes a UserCodeError
/// naming `op`, so no exception of user code ends the process through std::terminate.
template <class F>
decltype(auto) callUser(const std::string& op, F&& f) {
  try {
    return f();
  } catch (const UserCodeError&) {
    throw;
  } catch (const OperatorArgumentError&) {
    throw;  // from an operator called by this one: named already
  } catch (const JobArgumentError& e) {
    // The job cannot run as configured: the host ends it with exit 2, not retried.
    throw OperatorArgumentError(op, e.what());
  } catch (const DependencyUnavailable& e) {
    throw UserCodeError(op, e.what(), true);
  } catch (...) {
    throw UserCodeError(op, describeCurrentException());
  }
}

}  // namespace jobhost
