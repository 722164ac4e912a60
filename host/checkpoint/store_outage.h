// host/checkpoint/store_outage.h — waiting out a checkpoint store that does not answer.
//
// An outage of the store (status.h: Unavailable) or a full local disk (NoSpace) is not a
// failure of the job: whoever meets one keeps trying with backoff, says since when, and
// counts. StoreOutage is that bookkeeping for one client (the run's start-up, the
// supervisor's restores): the first failure starts an outage and logs a warning that
// names the store's error and says the job waits; every later failure returns a longer
// pause (doubling from `initial` to `max`, each drawn from [pause/2, pause]: jitter, so
// that many jobs do not hammer a store that comes back all at once); the first success
// after it logs how long it lasted.
//
// Thread-safety: not thread-safe; one owner thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "jobhost/state/status.h"
#include "runtime/checkpoint_failure.h"

namespace jobhost::host {

/// Whether an error of the checkpoint store (or of the local disk under it) is waited
/// out instead of failing: Unavailable (no complete answer) and NoSpace (a full disk).
/// Everything else is for the restart strategy or final. (runtime/checkpoint_failure.h
/// decides it: isStoreUnavailability.)
inline bool isWaitedOut(const state::Status& s) { return isStoreUnavailability(s); }

class StoreOutage {
 public:
  /// `subject`: what does not answer, for the log ("the checkpoint store").
  StoreOutage(std::chrono::milliseconds initial = std::chrono::milliseconds(500),
              std::chrono::milliseconds max = std::chrono::seconds(30), std::string subject = "the checkpoint store");

  /// Records that `what` (e.g. "restore of chk-7") failed with `s` (isWaitedOut(s)); returns
  /// the pause before the next try. Logs a warning when an outage starts, then one line
  /// per try at debug level.
  std::chrono::milliseconds failed(const state::Status& s, const std::string& what);
  /// The store answered: ends an outage (logs its length). No-op without one.
  void recovered();

  bool active() const { return sinceMs_ != 0; }
  /// Epoch ms of the first failure of the current outage; 0 if none.
  int64_t sinceMs() const { return sinceMs_; }
  /// Failures in the current outage.
  uint64_t failures() const { return failures_; }

 private:
  const std::chrono::milliseconds initial_, max_;
  const std::string subject_;
  std::chrono::milliseconds next_;
  int64_t sinceMs_ = 0;
  uint64_t failures_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace jobhost::host
