// host/exit_codes.h — the exit codes of every jobhost command (README "Exit codes").
//
// Thread-safety: constants and a pure function.
#pragma once

#include "jobhost/state/status.h"

namespace jobhost::host {

/// Process exit codes (README "Exit codes").
enum ExitCode : int {
  kExitOk = 0,
  kExitJobFailed = 1,
  kExitUsage = 2,          // bad arguments, configuration, plugin or job class
  kExitIncompatible = 3,   // the snapshot cannot be restored into this job
  kExitUnavailable = 4,    // a storage did not answer: nothing was decided or changed; try again
  kExitInterrupted = 130,  // stopped by Ctrl-C / SIGTERM
};

/// The exit code of a command that could not read a snapshot with error `s`:
/// kExitUnavailable when the storage did not answer (state::Status::isUnavailable: try
/// again later), else kExitIncompatible (missing, damaged, not a snapshot).
inline int exitCodeForSnapshotError(const state::Status& s) {
  return s.isUnavailable() ? kExitUnavailable : kExitIncompatible;
}

}  // namespace jobhost::host
