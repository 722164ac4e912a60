// host/startup_wait.h — the start of a run against a checkpoint store that does not
// answer: `jobhost run`'s start-up (job_runner.cc) and the supervisor's locks
// (job_supervisor.cc) wait it out the same way.
//
// Thread-safety: not thread-safe; one owner thread.
#pragma once

#include <string>

#include "checkpoint/store_outage.h"
#include "runtime/checkpoint_failure.h"
#include "signal_handling.h"

namespace jobhost::host {

/// The start of `jobhost run` against a store that does not answer: waits with backoff
/// (a job a scheduler restarts during an outage must not crash-loop) — or, for a dry run
/// (`jobhost check`), gives up at once. retry() is true when the caller should try again
/// (after the pause); false when it should report `s` (and, if interrupted(), exit 130).
class StartupWait {
 public:
  explicit StartupWait(bool enabled) : enabled_(enabled) {}
  bool retry(const state::Status& s, const std::string& what) {
    if (!enabled_ || !isStoreUnavailability(s)) return false;
    if (!sleepUnlessInterrupted(outage_.failed(s, what))) {
      interrupted_ = true;
      return false;
    }
    return true;
  }
  void answered() { outage_.recovered(); }
  bool interrupted() const { return interrupted_; }

 private:
  const bool enabled_;
  bool interrupted_ = false;
  StoreOutage outage_;
};

}  // namespace jobhost::host
