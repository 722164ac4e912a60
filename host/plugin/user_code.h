// host/plugin/user_code.h — a fence around every call into plugin code that runs in the
// supervisor: whatever the plugin throws (a std::exception, an int, a string, a struct)
// becomes one error naming the class and the phase, never std::terminate.
//
// Phases fenced here: the class's constructor, configure() and build(). Static
// initialisers are fenced by PluginLibrary::open() (they run inside dlopen(), where an
// exception always ends in std::terminate: see kProbeInitialisers in plugin_loader.h);
// operators by the SDK's callUser() (jobhost/errors.h) and, behind it, the runtime's task
// loop (runtime/job_execution.cc), which catch anything and fail the task with
// jobhost::describeCurrentException().
//
// Thread-safety: free functions; no shared state.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "jobhost/errors.h"

namespace jobhost::host {

/// Plugin code failed in `phase` ("configure()", "build()", "the constructor").
class UserCodeFailure : public std::runtime_error {
 public:
  UserCodeFailure(const std::string& className, const std::string& phase, const std::string& what)
      : std::runtime_error(className + ": " + phase + " threw " + what), phase_(phase) {}
  const std::string& phase() const { return phase_; }

 private:
  std::string phase_;
};

/// Runs f(). A JobArgumentError passes unchanged (the job rejects its arguments: a usage
/// error it words itself); anything else thrown becomes a UserCodeFailure.
template <class F>
decltype(auto) fenceUserCode(const std::string& className, const std::string& phase, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const JobArgumentError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserCodeFailure(className, phase, "'" + std::string(e.what()) + "'");
  } catch (...) {
    throw UserCodeFailure(className, phase, describeCurrentException());
  }
}

}  // namespace jobhost::host
