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

/// The status to wait out for an error that reached the supervisor as text (a worker's
/// report): NoSpace if it says the disk is full (strerror(ENOSPC), as RocksDB and the
/// storages word it), Unavailable otherwise; so the log says what the job waits for.
inline state::Status waitedOutStatus(const std::string& message) {
  if (message.find("No space left on device") == std::string::npos) return state::Status::Unavailable(message);
  const std::string code = state::Status::NoSpace("").toString();  // the text's own "No space: "
  return state::Status::NoSpace(message.rfind(code, 0) == 0 ? message.substr(code.size()) : message);
}

class StoreOutage {
 public:
  /// `subject`: what does not answer, for the log ("the checkpoint store").
  StoreOutage(std::chrono::milliseconds initial = std::chrono::milliseconds(500),
              std::chrono::milliseconds max = std::chrono::seconds(30), std::string subject = "the checkpoint store");

  /// Records that `what` (e.g. "restore of chk-7") failed with `s` (isStoreUnavailability(s):
  /// Unavailable, or NoSpace: then the log says it waits for free space on the local disk
  /// instead of naming the subject); returns
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
  std::string waitingFor_;  // of the current outage: subject_, or free space on the disk
  std::chrono::milliseconds next_;
  int64_t sinceMs_ = 0;
  uint64_t failures_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace jobhost::host
