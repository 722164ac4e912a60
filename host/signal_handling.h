// host/signal_handling.h — Ctrl-C and SIGTERM for `jobhost run`: the first one cancels the
// running job cleanly (checkpoints kept per the retention setting, exit 130), the second
// exits at once.
//
// Thread-safety: installSignalHandling() is called once, before any other thread starts;
// the rest is thread-safe.
#pragma once

#include <chrono>

namespace jobhost::host {

class JobControl;

/// Blocks SIGINT/SIGTERM in the calling thread (call before starting threads) and starts
/// a thread that turns the first signal into a cancel of the signal target, the second
/// into an exit.
void installSignalHandling();
/// The job a signal stops (nullptr: none): cancelled, or with `stopWithSavepoint`
/// (execution.stop-with-savepoint-on-sigterm) stopped after a savepoint into its
/// state.savepoints.dir — and cancelled if that savepoint fails.
void setSignalTarget(JobControl* job, bool stopWithSavepoint = false);
/// True once SIGINT or SIGTERM arrived.
bool interruptedBySignal();
/// Sleeps for `d` in short steps; false (at once) if SIGINT or SIGTERM arrived.
bool sleepUnlessInterrupted(std::chrono::milliseconds d);

}  // namespace jobhost::host
