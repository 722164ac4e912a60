#include "control/control_client.h"

// GCC 12 reports a false -Wmaybe-uninitialized inside kj::Maybe<std::string> (kj promises of
// std::string); the values are always initialised before use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <capnp/rpc-twoparty.h>
#include <dirent.h>
#include <kj/async-io.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "checkpoint/checkpoint_record_capnp.h"
#include "config/units.h"
#include "control/control.capnp.h"
#include "control/control_server.h"

namespace jobhost::host {

namespace {

JobState fromWire(rpc::JobState s) {
  switch (s) {
    case rpc::JobState::CREATED: return JobState::kCreated;
    case rpc::JobState::RUNNING: return JobState::kRunning;
    case rpc::JobState::RESTARTING: return JobState::kRestarting;
    case rpc::JobState::CANCELLING: return JobState::kCancelling;
    case rpc::JobState::FINISHED: return JobState::kFinished;
    case rpc::JobState::FAILED: return JobState::kFailed;
    case rpc::JobState::CANCELED: return JobState::kCanceled;
  }
  return JobState::kCreated;
}

std::string str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }

/// A blocking connect bounded by `timeout` (SO_SNDTIMEO bounds AF_UNIX connects that wait
/// for backlog room). Returns the fd, or -1 with *err set.
int connectUnix(const std::string& path, std::chrono::milliseconds timeout, int* err) {
  if (path.size() > kMaxSocketPathLength) {
    *err = ENAMETOOLONG;
    return -1;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    *err = errno;
    close(fd);
    return -1;
  }
  timeval none{};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  return fd;
}

std::string connectError(const std::string& path, int err) {
  switch (err) {
    case ENOENT: return "no job serves " + path + " (the socket is gone: the job has ended)";
    case ECONNREFUSED: return "the job behind " + path + " is gone (connection refused: a stale socket)";
    case EACCES:
    case EPERM: return "permission denied connecting to " + path + ": it belongs to another user";
    case EAGAIN:
    case ETIMEDOUT: return "the job behind " + path + " does not accept connections (timed out)";
    case ENAMETOOLONG: return "socket path " + path + " is too long";
    default: return "cannot connect to " + path + ": " + std::strerror(err);
  }
}

/// One kj event loop on this thread for a series of calls.
class ClientIo {
 public:
  ClientIo() : io_(kj::setupAsyncIo()) {}

  /// Connects to `path`, calls `fn` on the job's service, and waits up to `timeout`.
  /// `*connectErrno` is set when the connection itself failed.
  template <typename T>
  state::Result<T> call(const std::string& path, std::chrono::milliseconds timeout, const std::string& what,
                        const std::function<kj::Promise<T>(rpc::JobControlService::Client&)>& fn,
                        int* connectErrno = nullptr) {
    int err = 0;
    int fd = connectUnix(path, std::min(timeout, std::chrono::milliseconds(kStatusTimeout)), &err);
    if (fd < 0) {
      if (connectErrno) *connectErrno = err;
      if (err == ENOENT) return state::Status::NotFound(connectError(path, err));
      return state::Status::IOError(connectError(path, err));
    }
    try {
      auto stream = io_.lowLevelProvider->wrapSocketFd(
          fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
      capnp::TwoPartyClient client(*stream);
      auto service = client.bootstrap().castAs<rpc::JobControlService>();
      bool timedOut = false;
      kj::Promise<T> deadline =
          io_.provider->getTimer()
              .afterDelay(timeout.count() * kj::MILLISECONDS)
              .then([&timedOut]() -> kj::Promise<T> {
                timedOut = true;
                return kj::Exception(kj::Exception::Type::OVERLOADED, __FILE__, __LINE__, kj::heapString("timeout"));
              });
      kj::Promise<T> p = fn(service).exclusiveJoin(kj::mv(deadline));
      try {
        return p.wait(io_.waitScope);
      } catch (const kj::Exception& e) {
        if (timedOut)
          return state::Status::IOError(what + ": no answer within " + formatDuration(timeout) + " (" + path + ")");
        return state::Status::IOError(describe(e, what));
      }
    } catch (const kj::Exception& e) {
      return state::Status::IOError(describe(e, what));
    }
  }

 private:
  static std::string describe(const kj::Exception& e, const std::string& what) {
    std::string d = e.getDescription().cStr();
    const std::string remote = "remote exception: ";
    if (d.rfind(remote, 0) == 0) d = d.substr(remote.size());
    if (e.getType() == kj::Exception::Type::DISCONNECTED)
      return what + " closed the connection before answering (it ended, or it refuses your uid): " + d;
    return what + ": " + d;
  }

  kj::AsyncIoContext io_;
};

kj::Promise<JobStatusInfo> requestStatus(rpc::JobControlService::Client& s) {
  return s.statusRequest().send().then([](capnp::Response<rpc::JobControlService::StatusResults>&& r) -> JobStatusInfo {
    auto w = r.getStatus();
    if (w.getProtocolVersion() != rpc::PROTOCOL_VERSION)
      throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                          kj::str("the job speaks control protocol v", w.getProtocolVersion(), ", this jobhost v",
                                  rpc::PROTOCOL_VERSION, ": use the jobhost binary that started it"));
    JobStatusInfo s;
    s.jobId = str(w.getJobId());
    s.jobClass = str(w.getJobClass());
    s.pluginPath = str(w.getPluginPath());
    s.backend = str(w.getBackend());
    s.parallelism = w.getParallelism();
    s.state = fromWire(w.getState());
    s.startedMs = w.getStartedMs();
    s.restarts = w.getRestarts();
    s.lastFailure = str(w.getLastFailure());
    s.lastCheckpointId = w.getLastCheckpointId();
    s.lastCheckpointPath = str(w.getLastCheckpointPath());
    s.checkpointDir = str(w.getCheckpointDir());
    s.recordsIn = w.getRecordsIn();
    s.recordsOut = w.getRecordsOut();
    s.pid = w.getPid();
    s.lastFailureMs = w.getLastFailureMs();
    s.checkpointsCompleted = w.getCheckpointsCompleted();
    s.checkpointsFailed = w.getCheckpointsFailed();
    s.pluginDigest = w.getPluginDigest();
    s.recordsInPerSecond = w.getRecordsInPerSecond();
    s.recordsOutPerSecond = w.getRecordsOutPerSecond();
    for (auto t : w.getTasks()) {
      TaskStatusInfo x;
      x.name = str(t.getName());
      x.subtask = t.getSubtask();
      x.parallelism = t.getParallelism();
      x.recordsIn = t.getRecordsIn();
      x.recordsOut = t.getRecordsOut();
      x.recordsInPerSecond = t.getRecordsInPerSecond();
      x.recordsOutPerSecond = t.getRecordsOutPerSecond();
      x.busyTimeMsPerSecond = t.getBusyTimeMsPerSecond();
      x.backPressuredTimeMsPerSecond = t.getBackPressuredTimeMsPerSecond();
      x.idleTimeMsPerSecond = t.getIdleTimeMsPerSecond();
      x.inputWatermark = t.getInputWatermark();
      for (auto b : t.getBackends()) x.backends.push_back({str(b.getOperatorUid()), str(b.getBackend()), b.getEntries()});
      s.tasks.push_back(std::move(x));
    }
    s.checkpointsInProgress = w.getCheckpointsInProgress();
    s.lastCheckpointDurationMs = w.getLastCheckpointDurationMs();
    s.lastCheckpointSizeBytes = w.getLastCheckpointSizeBytes();
    s.lastCheckpointFullSizeBytes = w.getLastCheckpointFullSizeBytes();
    s.lastCheckpointCompletedMs = w.getLastCheckpointCompletedMs();
    s.lastRestoreMs = w.getLastRestoreMs();
    s.runningSinceMs = w.getRunningSinceMs();
    s.storeUnavailableSinceMs = w.getStoreUnavailableSinceMs();
    s.checkpointStoreError = str(w.getCheckpointStoreError());
    s.checkpointStoreOutages = w.getCheckpointStoreOutages();
    s.checkpointsDeclinedUnavailable = w.getCheckpointsDeclinedUnavailable();
    s.restoreRetries = w.getRestoreRetries();
    s.leaseRenewedMs = w.getLeaseRenewedMs();
    s.publishingFencedSinceMs = w.getPublishingFencedSinceMs();
    return s;
  });
}

capnp::Text::Reader text(const std::optional<std::string>& s) {
  return s ? capnp::Text::Reader(s->data(), s->size()) : capnp::Text::Reader();
}

std::string jobOf(const std::string& socketPath) {
  std::string name = socketPath.substr(socketPath.rfind('/') + 1);
  return name.size() > 5 ? name.substr(0, name.size() - 5) : name;
}

}  // namespace

state::Result<JobStatusInfo> callStatus(const std::string& socketPath, std::chrono::milliseconds timeout) {
  ClientIo io;
  return io.call<JobStatusInfo>(socketPath, timeout, "job " + jobOf(socketPath), requestStatus);
}

state::Result<std::string> callSavepoint(const std::string& socketPath, const std::optional<std::string>& targetDir,
                                         state::SnapshotFormat format, std::chrono::milliseconds timeout) {
  ClientIo io;
  return io.call<std::string>(
      socketPath, timeout, "job " + jobOf(socketPath), [&](rpc::JobControlService::Client& s) {
        auto req = s.savepointRequest();
        req.setTargetDir(text(targetDir));
        req.setFormat(format == state::SnapshotFormat::kNative ? rpc::Format::NATIVE : rpc::Format::CANONICAL);
        return req.send().then(
            [](capnp::Response<rpc::JobControlService::SavepointResults>&& r) { return str(r.getPath()); });
      });
}

state::Result<std::string> callCancel(const std::string& socketPath, bool withSavepoint,
                                      const std::optional<std::string>& targetDir, std::chrono::milliseconds timeout) {
  ClientIo io;
  return io.call<std::string>(
      socketPath, timeout, "job " + jobOf(socketPath), [&](rpc::JobControlService::Client& s) {
        auto req = s.cancelRequest();
        req.setWithSavepoint(withSavepoint);
        req.setTargetDir(text(targetDir));
        return req.send().then(
            [](capnp::Response<rpc::JobControlService::CancelResults>&& r) { return str(r.getSavepointPath()); });
      });
}

state::Result<std::string> callStop(const std::string& socketPath, const std::optional<std::string>& targetDir, bool drain,
                                    std::chrono::milliseconds timeout) {
  ClientIo io;
  return io.call<std::string>(
      socketPath, timeout, "job " + jobOf(socketPath), [&](rpc::JobControlService::Client& s) {
        auto req = s.stopRequest();
        req.setTargetDir(text(targetDir));
        req.setDrain(drain);
        return req.send().then(
            [](capnp::Response<rpc::JobControlService::StopResults>&& r) { return str(r.getSavepointPath()); });
      });
}

state::Result<std::vector<CheckpointRecord>> callCheckpointHistory(const std::string& socketPath,
                                                                  std::chrono::milliseconds timeout) {
  ClientIo io;
  return io.call<std::vector<CheckpointRecord>>(
      socketPath, timeout, "job " + jobOf(socketPath), [&](rpc::JobControlService::Client& s) {
        return s.checkpointHistoryRequest().send().then(
            [](capnp::Response<rpc::JobControlService::CheckpointHistoryResults>&& r) {
              std::vector<CheckpointRecord> out;
              for (auto rec : r.getRecords()) out.push_back(readCheckpointRecord(rec));
              return out;
            });
      });
}

state::Result<std::map<std::string, std::string>> callConfiguration(const std::string& socketPath,
                                                                    std::chrono::milliseconds timeout) {
  ClientIo io;
  return io.call<std::map<std::string, std::string>>(
      socketPath, timeout, "job " + jobOf(socketPath), [&](rpc::JobControlService::Client& s) {
        return s.configurationRequest().send().then(
            [](capnp::Response<rpc::JobControlService::ConfigurationResults>&& r) {
              std::map<std::string, std::string> out;
              for (auto e : r.getEntries()) out[str(e.getKey())] = str(e.getValue());
              return out;
            });
      });
}

std::vector<JobEndpoint> discoverJobs(std::vector<std::string>* staleRemoved, std::vector<std::string>* problems) {
  std::vector<JobEndpoint> out;
  auto note = [&](const std::string& s) {
    if (problems) problems->push_back(s);
  };
  const std::string dirPath = runtimeDirPath();
  struct stat dst {};
  if (lstat(dirPath.c_str(), &dst) != 0) return out;  // no job ever ran here
  auto dir = ensureRuntimeDir();  // the same checks the jobs make: never talk to sockets in a foreign directory
  if (!dir.ok()) {
    note(dir.status().message());
    return out;
  }
  std::vector<std::string> sockets;
  if (DIR* d = opendir(dir->c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0) sockets.push_back(*dir + "/" + name);
    }
    closedir(d);
  } else {
    note("cannot read " + *dir + ": " + std::strerror(errno));
    return out;
  }
  std::sort(sockets.begin(), sockets.end());
  ClientIo io;
  for (const auto& path : sockets) {
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) continue;  // gone meanwhile
    if (!S_ISSOCK(st.st_mode)) {
      note(path + ": not a socket; ignored");
      continue;
    }
    if (st.st_uid != geteuid()) {
      note(path + ": owned by uid " + std::to_string(st.st_uid) + ", not by you; ignored");
      continue;
    }
    int connectErr = 0;
    auto s = io.call<JobStatusInfo>(path, kStatusTimeout, "job " + jobOf(path), requestStatus, &connectErr);
    if (s.ok()) {
      out.push_back(JobEndpoint{jobOf(path), path, std::move(*s)});
      continue;
    }
    if (connectErr == ENOENT) continue;  // the job ended meanwhile
    if (connectErr == ECONNREFUSED) {
      // Nobody listens: the job was killed. Remove the socket only if it is still the very
      // socket we looked at, and ours.
      struct stat again {};
      if (lstat(path.c_str(), &again) == 0 && S_ISSOCK(again.st_mode) && again.st_uid == geteuid() &&
          again.st_ino == st.st_ino && again.st_dev == st.st_dev && unlink(path.c_str()) == 0) {
        if (staleRemoved) staleRemoved->push_back(path);
      }
      continue;
    }
    note(s.status().message());
  }
  std::sort(out.begin(), out.end(), [](const JobEndpoint& a, const JobEndpoint& b) {
    return a.status.startedMs != b.status.startedMs ? a.status.startedMs < b.status.startedMs : a.jobId < b.jobId;
  });
  return out;
}

}  // namespace jobhost::host
