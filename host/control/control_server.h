// host/control/control_server.h — the control endpoint of a running job: Cap'n Proto RPC
// (host/control/control.capnp) on the Unix domain socket `<runtime dir>/<jobId>.sock`.
//
// Runtime directory (per user): `$XDG_RUNTIME_DIR/jobhost` when XDG_RUNTIME_DIR is set to
// a directory owned by us, else `/tmp/jobhost-<uid>`. It is created with mode 0700 under
// umask 077; an existing one is used only if it is a real directory (not a symlink) owned
// by us with mode 0700 — anything else is refused with the reason. The directory is the
// barrier; on top of it every accepted connection's SO_PEERCRED uid must equal our
// effective uid, others are dropped with a warning.
//
// The server runs a kj event loop on its own thread. Every JobControl call runs on a
// worker std::thread (savepoints take seconds); its result is handed back to the event
// loop through a cross-thread fulfiller, so `status` keeps answering during a savepoint.
//
// Thread-safety: start() and the destructor are called from one thread (the runner);
// JobControl methods are called from worker threads, concurrently.
#pragma once

#include <memory>
#include <string>

#include "control/job_control.h"
#include "jobhost/state/status.h"

namespace jobhost::host {

/// The longest socket path a sockaddr_un holds (sun_path is 108 bytes with the NUL).
inline constexpr size_t kMaxSocketPathLength = 107;

/// The per-user runtime directory for control sockets (and detached jobs' logs); no side
/// effects.
std::string runtimeDirPath();
/// Creates the runtime directory if needed (0700, umask 077) and checks that it is a
/// directory owned by us with mode 0700. Returns its path or why it cannot be used.
state::Result<std::string> ensureRuntimeDir();
/// `<dir>/<jobId>.sock`.
std::string controlSocketPath(const std::string& dir, const std::string& jobId);

class ControlServer {
 public:
  /// Binds `<runtime dir>/<jobId>.sock` (replacing a stale socket of ours — one that
  /// refuses connections) and starts serving `job`. `job` must outlive the server.
  static state::Result<std::unique_ptr<ControlServer>> start(JobControl& job, const std::string& jobId);
  /// Removes the socket (if it is still ours), refuses new requests, waits for requests
  /// in flight (their JobControl calls must return; their replies are sent), stops the
  /// loop. Must not be called while holding a lock that JobControl methods take.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& socketPath() const;

  struct Impl;

 private:
  explicit ControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobhost::host
