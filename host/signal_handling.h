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
/// The job a signal cancels (nullptr: none).
void setSignalTarget(JobControl* job);
/// True once SIGINT or SIGTERM arrived.
bool interruptedBySignal();
/// Sleeps for `d` in short steps; false (at once) if SIGINT or SIGTERM arrived.
bool sleepUnlessInterrupted(std::chrono::milliseconds d);

}  // namespace jobhost::host
