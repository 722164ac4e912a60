// host/cli/detach.h — the job's side of the `jobhost run -d` handshake.
//
// runDetached() (commands.h, detach.cc) starts the job as a child with
// JOBHOST_READY_FD=<fd>, the write end of a pipe, and waits for "<jobId>\n" on it. The
// supervisor (`jobhost run` in that child) owns the other side: it takes the fd at start
// — so the worker processes it forks inherit neither the variable nor the fd — and
// writes the id once the job runs and its control socket is up.
//
// Thread-safety: not thread-safe; owned and used by the supervisor's thread.
#pragma once

#include <string>

namespace jobhost::host {

class DetachHandshake {
 public:
  /// Takes the ready fd from the environment: unsets JOBHOST_READY_FD and marks the fd
  /// close-on-exec. Call once, at supervisor start, before any process is forked. Not
  /// detached (no variable, or not a valid open fd >= 3): a handshake that does nothing.
  static DetachHandshake fromEnvironment();

  DetachHandshake() = default;
  DetachHandshake(DetachHandshake&& other) noexcept;
  DetachHandshake& operator=(DetachHandshake&& other) noexcept;
  DetachHandshake(const DetachHandshake&) = delete;
  DetachHandshake& operator=(const DetachHandshake&) = delete;
  /// Closes the fd if the job never became ready: the waiting parent sees the pipe
  /// close without an id and reports the job's exit.
  ~DetachHandshake();

  /// Writes "<jobId>\n" and closes the fd, the first time; later calls do nothing.
  void signalReady(const std::string& jobId);
  /// True until signalReady() when started detached.
  bool pending() const { return fd_ >= 0; }

 private:
  explicit DetachHandshake(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace jobhost::host
