// host/worker_spawn.h — starts a job attempt's worker process (`jobhost __worker ...`) from
// the supervisor of `jobhost run`.
//
// The supervisor has threads when it starts a worker (the control socket, an object store
// lease's renewal, the dashboard's metrics), so its child may call only async-signal-safe
// functions between fork and exec: everything the worker needs (its argument vector, its
// environment, the descriptor numbers) is built before the fork, and the child only marks
// descriptors inheritable, resets its signal handling and execs. The environment is read
// from `environ` then: jobhost changes its environment only while it has one thread (at
// start-up); code that adds or removes variables later, while a worker may be started,
// would race with that read (replacing an existing variable's value does not).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jobhost::host {

/// What a worker is started with.
struct WorkerSpawn {
  std::string executable = "/proc/self/exe";  // the running jobhost binary
  std::vector<std::string> args;              // argv, argv[0] included
  /// Descriptors (< 0: none) the worker keeps open across exec: the locks of the job's
  /// checkpoint and working directories, so that a lock lives while any process of the
  /// job does.
  std::vector<int> inheritFds;
  int pluginFd = -1;         // the pinned plugin copy (>= 0): JOBHOST_PLUGIN_FD
  std::string pluginDigest;  // its digest: JOBHOST_PLUGIN_DIGEST (with pluginFd only)
};

/// A started worker: its pid, the supervisor's end of the channel (a socketpair; the
/// worker's end is JOBHOST_WORKER_FD) and the read end of the crash-report pipe (the
/// write end is JOBHOST_CRASH_FD). The worker also gets JOBHOST_SUPERVISOR_PID and ignores
/// SIGINT and SIGTERM (the supervisor handles them), with no signal blocked.
struct WorkerProcess {
  pid_t pid = -1;
  int channel = -1;
  int crash = -1;
};

/// The environment of a process this one is about to exec (a worker, `run -d`'s
/// background job): this process's, with `set`'s variables set to their values and those
/// named in `drop` removed. Built before the fork (see above).
std::vector<std::string> environmentFor(const std::vector<std::pair<std::string, std::string>>& set,
                                        const std::vector<std::string_view>& drop = {});

/// execve()'s form of `strings` (arguments or an environment): pointers into them, then
/// a null pointer. `strings` must outlive the result.
std::vector<char*> execPointers(std::vector<std::string>& strings);

/// Starts the worker. Throws std::runtime_error (with the errno's text) when the channel,
/// the pipe or the process cannot be created; nothing is left open then.
WorkerProcess spawnWorkerProcess(const WorkerSpawn& spawn);

}  // namespace jobhost::host
