// host/control/control_client.h — the client side of the control protocol
// (control.capnp): finds the running jobs of this user and calls them. Used by
// `jobhost list / savepoint / cancel / stop`, `jobhost run -d` and `jobhost ui`.
//
// Every call opens its own connection and its own kj event loop on the calling thread,
// and returns an error Status (never throws) with a message for people: the job is gone,
// it refused us, it timed out, or the job's own reason (e.g. why a savepoint failed).
//
// Thread-safety: functions may be called from any thread that runs no kj event loop.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "control/job_control.h"
#include "jobhost/state/keyed_backend.h"
#include "jobhost/state/status.h"

namespace jobhost::host {

inline constexpr std::chrono::milliseconds kStatusTimeout = std::chrono::seconds(5);
// Longer than the supervisor's wait (11 min), which is longer than the worker's savepoint
// limit (10 min): the answer of the side that decides always arrives first.
inline constexpr std::chrono::milliseconds kSavepointTimeout = std::chrono::minutes(12);

struct JobEndpoint {
  std::string jobId;       // from the socket name <jobId>.sock
  std::string socketPath;  // absolute
  JobStatusInfo status;
};

/// Scans the runtime directory for `*.sock` and asks each job for its status. A socket
/// that refuses connections (ECONNREFUSED: its process is gone) is stale: it is removed
/// after lstat shows it is a socket owned by us, and its path appended to
/// `*staleRemoved`. Sockets that cannot be asked (timeout, another owner, a newer
/// protocol) are skipped with a line in `*problems`. Sorted by start time.
std::vector<JobEndpoint> discoverJobs(std::vector<std::string>* staleRemoved,
                                      std::vector<std::string>* problems = nullptr);

state::Result<JobStatusInfo> callStatus(const std::string& socketPath, std::chrono::milliseconds timeout = kStatusTimeout);
/// `targetDir`: absolute, or nullopt for the job's state.savepoints.dir. Returns the
/// savepoint's absolute path.
state::Result<std::string> callSavepoint(const std::string& socketPath, const std::optional<std::string>& targetDir,
                                         state::SnapshotFormat format,
                                         std::chrono::milliseconds timeout = kSavepointTimeout);
/// Returns the savepoint path ("" without a savepoint).
state::Result<std::string> callCancel(const std::string& socketPath, bool withSavepoint,
                                      const std::optional<std::string>& targetDir,
                                      std::chrono::milliseconds timeout = kSavepointTimeout);
/// The job's checkpoint history (oldest first; see JobControl::checkpointHistory).
state::Result<std::vector<CheckpointRecord>> callCheckpointHistory(const std::string& socketPath,
                                                                  std::chrono::milliseconds timeout = kStatusTimeout);
/// The job's configuration in effect.
state::Result<std::map<std::string, std::string>> callConfiguration(const std::string& socketPath,
                                                                    std::chrono::milliseconds timeout = kStatusTimeout);
state::Result<std::string> callStop(const std::string& socketPath, const std::optional<std::string>& targetDir, bool drain,
                                    std::chrono::milliseconds timeout = kSavepointTimeout);

}  // namespace jobhost::host
