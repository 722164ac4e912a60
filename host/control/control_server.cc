#include "jobhost/state/s3_storage.h"
#include "control/control_server.h"
#include "private_directory.h"

// GCC 12 reports a false -Wmaybe-uninitialized inside kj::Maybe<std::string> (kj promises of
// std::string); the values are always initialised before use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.h>
#include <fcntl.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <thread>

#include "checkpoint/checkpoint_record_capnp.h"
#include "control/control.capnp.h"

namespace jobhost::host {

namespace {

constexpr size_t kMaxControlConnections = 64;
constexpr size_t kMaxCallsInFlight = 32;
constexpr size_t kMaxTextBytes = 4096;

bool validJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

/// True if `path` is a socket that refuses connections (nobody listens) and owned by us.
bool isStaleSocketOfOurs(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) return false;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  close(fd);
  return rc != 0 && err == ECONNREFUSED;
}

/// An error a JobControl call reports: travels to the client as the exception's reason.
struct CallFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

kj::Exception failed(const std::string& message) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(message.data(), message.size()));
}

capnp::ReaderOptions receiveOptions() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = 64 * 1024;  // requests are a few paths: 512 KiB is plenty
  o.nestingLimit = 16;
  return o;
}

rpc::JobState toWire(JobState s) {
  switch (s) {
    case JobState::kCreated: return rpc::JobState::CREATED;
    case JobState::kRunning: return rpc::JobState::RUNNING;
    case JobState::kRestarting: return rpc::JobState::RESTARTING;
    case JobState::kCancelling: return rpc::JobState::CANCELLING;
    case JobState::kFinished: return rpc::JobState::FINISHED;
    case JobState::kFailed: return rpc::JobState::FAILED;
    case JobState::kCanceled: return rpc::JobState::CANCELED;
  }
  return rpc::JobState::CREATED;
}

capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

/// A target directory from the wire: empty (the job's default), an absolute path or an
/// s3:// URI, without `..` components, NUL bytes or absurd lengths.
std::optional<std::string> targetDirFromWire(capnp::Text::Reader t) {
  std::string s(t.cStr(), t.size());
  if (s.empty()) return std::nullopt;
  if (s.size() > kMaxTextBytes) throw CallFailure("target directory is longer than 4096 bytes");
  if (s.find('\0') != std::string::npos) throw CallFailure("target directory contains a NUL byte");
  if (s[0] != '/' && !state::isObjectStoreUri(s))
    throw CallFailure("target directory '" + s + "' is not absolute (nor s3://bucket/prefix)");
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t next = s.find('/', pos);
    if (next == std::string::npos) next = s.size();
    std::string comp = s.substr(pos, next - pos);
    if (comp == "..") throw CallFailure("target directory '" + s + "' contains '..'");
    if (comp.size() > 255) throw CallFailure("target directory '" + s + "' has a component longer than 255 bytes");
    pos = next + 1;
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Runtime directory

std::string runtimeDirPath() {
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && x[0] == '/') {
    struct stat st {};
    if (stat(x, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid()) return std::string(x) + "/jobhost";
  }
  return "/tmp/jobhost-" + std::to_string(geteuid());
}

state::Result<std::string> ensureRuntimeDir() {
  return ensurePrivateDirectory(runtimeDirPath(), "the control directory",
                                " — remove it, or set XDG_RUNTIME_DIR to a directory of yours");
}

std::string controlSocketPath(const std::string& dir, const std::string& jobId) { return dir + "/" + jobId + ".sock"; }

// ---------------------------------------------------------------------------------------
// Server

struct ControlServer::Impl : private kj::TaskSet::ErrorHandler {
  JobControl& job;
  std::string jobId;
  std::string socketPath;
  int listenFd = -1;
  dev_t sockDev = 0;
  ino_t sockIno = 0;

  std::thread loopThread;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stopFulfiller;  // set by the loop thread before it reports ready

  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu;
  std::list<Worker> workers;  // guarded by mu
  bool stopping = false;      // guarded by mu
  size_t connections = 0;     // loop thread only

  Impl(JobControl& j, std::string id) : job(j), jobId(std::move(id)) {}

  ~Impl() {
    if (listenFd >= 0) close(listenFd);
  }

  void taskFailed(kj::Exception&& e) override {
    spdlog::debug("control connection ended: {}", e.getDescription().cStr());
  }

  void reapLocked() {
    for (auto it = workers.begin(); it != workers.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  }

  /// Runs `fn` on a worker thread; the promise (of the loop thread) resolves with its
  /// value, or rejects with its CallFailure message.
  template <typename T>
  kj::Promise<T> offload(std::function<T()> fn) {
    std::lock_guard lock(mu);
    if (stopping) return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                       kj::str("job ", jobId.c_str(), " is shutting down"));
    reapLocked();
    if (workers.size() >= kMaxCallsInFlight)
      return failed("too many control requests in flight (" + std::to_string(workers.size()) + "); try again");
    auto paf = kj::newPromiseAndCrossThreadFulfiller<T>();
    auto done = std::make_shared<std::atomic<bool>>(false);
    // kj::Own's destructor may throw, which std::thread's state cannot hold: share it.
    auto fulfiller = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<T>>>(kj::mv(paf.fulfiller));
    std::thread t([fn = std::move(fn), fulfiller, done]() mutable {
      auto& f = *fulfiller;
      try {
        f->fulfill(fn());
      } catch (const CallFailure& e) {
        f->reject(failed(e.what()));
      } catch (const std::exception& e) {
        f->reject(failed(std::string("internal error: ") + e.what()));
      } catch (...) {
        f->reject(failed("internal error: unknown exception"));
      }
      fulfiller.reset();
      done->store(true);
    });
    workers.push_back(Worker{std::move(t), std::move(done)});
    return kj::mv(paf.promise);
  }

  struct Connection {
    kj::Own<kj::AsyncIoStream> stream;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpcSystem;
    size_t& counter;
    Connection(kj::Own<kj::AsyncIoStream>&& s, capnp::Capability::Client bootstrap, size_t& c)
        : stream(kj::mv(s)),
          network(*stream, capnp::rpc::twoparty::Side::SERVER, receiveOptions()),
          rpcSystem(capnp::makeRpcServer(network, kj::mv(bootstrap))),
          counter(c) {
      ++counter;
    }
    ~Connection() { --counter; }
  };

  kj::Promise<void> acceptLoop(kj::ConnectionReceiver& listener, capnp::Capability::Client& bootstrap,
                               kj::TaskSet& tasks, kj::Timer& timer) {
    return listener.accept()
        .then([this, &bootstrap, &tasks](kj::Own<kj::AsyncIoStream>&& s) {
          struct ucred cred {};
          uint len = sizeof cred;
          bool known = true;
          try {
            s->getsockopt(SOL_SOCKET, SO_PEERCRED, &cred, &len);
          } catch (const kj::Exception&) {
            known = false;
          }
          if (!known || cred.uid != geteuid()) {
            spdlog::warn("control socket {}: refused a connection from {} (pid {}): only uid {} may control this job",
                         socketPath, known ? "uid " + std::to_string(cred.uid) : std::string("an unknown peer"),
                         known ? cred.pid : 0, geteuid());
            return;  // dropping the stream closes it
          }
          if (connections >= kMaxControlConnections) {
            spdlog::warn("control socket {}: refused a connection from pid {}: {} connections already open", socketPath,
                         cred.pid, connections);
            return;
          }
          auto conn = kj::heap<Connection>(kj::mv(s), bootstrap, connections);
          auto disconnected = conn->network.onDisconnect();
          tasks.add(disconnected.attach(kj::mv(conn)));
        })
        .catch_([this, &timer](kj::Exception&& e) {
          spdlog::warn("control socket {}: accept failed: {}", socketPath, e.getDescription().cStr());
          return timer.afterDelay(100 * kj::MILLISECONDS);
        })
        .then([this, &listener, &bootstrap, &tasks, &timer]() { return acceptLoop(listener, bootstrap, tasks, timer); });
  }

  void loopMain(std::promise<state::Status>* ready);
};

namespace {

class ServiceImpl final : public rpc::JobControlService::Server {
 public:
  explicit ServiceImpl(ControlServer::Impl& impl) : impl_(impl) {}

  kj::Promise<void> status(StatusContext context) override {
    JobControl& job = impl_.job;
    return impl_.offload<JobStatusInfo>([&job] { return job.status(); }).then([context](JobStatusInfo s) mutable {
      auto b = context.getResults().initStatus();
      b.setProtocolVersion(rpc::PROTOCOL_VERSION);
      b.setJobId(text(s.jobId));
      b.setJobClass(text(s.jobClass));
      b.setPluginPath(text(s.pluginPath));
      b.setBackend(text(s.backend));
      b.setParallelism(s.parallelism);
      b.setState(toWire(s.state));
      b.setStartedMs(s.startedMs);
      b.setRestarts(s.restarts);
      b.setLastFailure(text(s.lastFailure));
      b.setLastCheckpointId(s.lastCheckpointId);
      b.setLastCheckpointPath(text(s.lastCheckpointPath));
      b.setCheckpointDir(text(s.checkpointDir));
      b.setRecordsIn(s.recordsIn);
      b.setRecordsOut(s.recordsOut);
      b.setPid(s.pid);
      b.setLastFailureMs(s.lastFailureMs);
      b.setCheckpointsCompleted(s.checkpointsCompleted);
      b.setCheckpointsFailed(s.checkpointsFailed);
      b.setPluginDigest(s.pluginDigest);
      b.setRecordsInPerSecond(s.recordsInPerSecond);
      b.setRecordsOutPerSecond(s.recordsOutPerSecond);
      auto tasks = b.initTasks(static_cast<unsigned>(s.tasks.size()));
      for (unsigned i = 0; i < s.tasks.size(); ++i) {
        const TaskStatusInfo& t = s.tasks[i];
        auto tb = tasks[i];
        tb.setName(text(t.name));
        tb.setSubtask(t.subtask);
        tb.setParallelism(t.parallelism);
        tb.setRecordsIn(t.recordsIn);
        tb.setRecordsOut(t.recordsOut);
        tb.setRecordsInPerSecond(t.recordsInPerSecond);
        tb.setRecordsOutPerSecond(t.recordsOutPerSecond);
        tb.setBusyTimeMsPerSecond(t.busyTimeMsPerSecond);
        tb.setBackPressuredTimeMsPerSecond(t.backPressuredTimeMsPerSecond);
        tb.setIdleTimeMsPerSecond(t.idleTimeMsPerSecond);
        tb.setInputWatermark(t.inputWatermark);
        auto backends = tb.initBackends(static_cast<unsigned>(t.backends.size()));
        for (unsigned j = 0; j < t.backends.size(); ++j) {
          backends[j].setOperatorUid(text(t.backends[j].operatorUid));
          backends[j].setBackend(text(t.backends[j].backend));
          backends[j].setEntries(t.backends[j].entries);
        }
      }
      b.setCheckpointsInProgress(s.checkpointsInProgress);
      b.setLastCheckpointDurationMs(s.lastCheckpointDurationMs);
      b.setLastCheckpointSizeBytes(s.lastCheckpointSizeBytes);
      b.setLastCheckpointFullSizeBytes(s.lastCheckpointFullSizeBytes);
      b.setLastCheckpointCompletedMs(s.lastCheckpointCompletedMs);
      b.setLastRestoreMs(s.lastRestoreMs);
      b.setRunningSinceMs(s.runningSinceMs);
      b.setStoreUnavailableSinceMs(s.storeUnavailableSinceMs);
      b.setCheckpointStoreError(text(s.checkpointStoreError));
      b.setCheckpointStoreOutages(s.checkpointStoreOutages);
      b.setCheckpointsDeclinedUnavailable(s.checkpointsDeclinedUnavailable);
      b.setRestoreRetries(s.restoreRetries);
      b.setLeaseRenewedMs(s.leaseRenewedMs);
      b.setPublishingFencedSinceMs(s.publishingFencedSinceMs);
    });
  }

  kj::Promise<void> checkpointHistory(CheckpointHistoryContext context) override {
    JobControl& job = impl_.job;
    return impl_.offload<std::vector<CheckpointRecord>>([&job] { return job.checkpointHistory(); })
        .then([context](std::vector<CheckpointRecord> records) mutable {
          auto list = context.getResults().initRecords(static_cast<unsigned>(records.size()));
          for (unsigned i = 0; i < records.size(); ++i) writeCheckpointRecord(list[i], records[i]);
        });
  }

  kj::Promise<void> configuration(ConfigurationContext context) override {
    JobControl& job = impl_.job;
    return impl_.offload<std::map<std::string, std::string>>([&job] { return job.configuration(); })
        .then([context](std::map<std::string, std::string> entries) mutable {
          auto list = context.getResults().initEntries(static_cast<unsigned>(entries.size()));
          unsigned i = 0;
          for (const auto& [k, v] : entries) {
            list[i].setKey(text(k));
            list[i].setValue(text(v));
            ++i;
          }
        });
  }

  kj::Promise<void> savepoint(SavepointContext context) override {
    auto p = context.getParams();
    std::optional<std::string> dir;
    state::SnapshotFormat format =
        p.getFormat() == rpc::Format::NATIVE ? state::SnapshotFormat::kNative : state::SnapshotFormat::kCanonical;
    try {
      dir = targetDirFromWire(p.getTargetDir());
    } catch (const CallFailure& e) {
      return failed(e.what());
    }
    JobControl& job = impl_.job;
    context.releaseParams();
    return impl_.offload<std::string>([&job, dir, format] {
                 auto r = job.savepoint(dir, format);
                 if (!r.ok()) throw CallFailure(r.status().message());
                 return *r;
               })
        .then([context](std::string path) mutable { context.getResults().setPath(text(path)); });
  }

  kj::Promise<void> cancel(CancelContext context) override {
    auto p = context.getParams();
    bool withSavepoint = p.getWithSavepoint();
    std::optional<std::string> dir;
    try {
      dir = targetDirFromWire(p.getTargetDir());
    } catch (const CallFailure& e) {
      return failed(e.what());
    }
    JobControl& job = impl_.job;
    context.releaseParams();
    return impl_.offload<std::string>([&job, withSavepoint, dir] {
                 auto r = job.cancel(withSavepoint, dir);
                 if (!r.ok()) throw CallFailure(r.status().message());
                 return *r;
               })
        .then([context](std::string path) mutable { context.getResults().setSavepointPath(text(path)); });
  }

  kj::Promise<void> stop(StopContext context) override {
    std::optional<std::string> dir;
    try {
      dir = targetDirFromWire(context.getParams().getTargetDir());
    } catch (const CallFailure& e) {
      return failed(e.what());
    }
    const bool drain = context.getParams().getDrain();
    JobControl& job = impl_.job;
    context.releaseParams();
    return impl_.offload<std::string>([&job, dir, drain] {
                 auto r = job.stop(dir, drain);
                 if (!r.ok()) throw CallFailure(r.status().message());
                 return *r;
               })
        .then([context](std::string path) mutable { context.getResults().setSavepointPath(text(path)); });
  }

 private:
  ControlServer::Impl& impl_;
};

}  // namespace

void ControlServer::Impl::loopMain(std::promise<state::Status>* ready) {
  bool reported = false;
  try {
    auto io = kj::setupAsyncIo();
    auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
    stopFulfiller = kj::mv(stop.fulfiller);
    auto listener = io.lowLevelProvider->wrapListenSocketFd(
        listenFd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
                      kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK);
    listenFd = -1;  // owned by `listener` now
    kj::Timer& timer = io.provider->getTimer();
    {
      capnp::Capability::Client bootstrap = kj::heap<ServiceImpl>(*this);
      kj::TaskSet tasks(*this);
      kj::Promise<void> accepting = acceptLoop(*listener, bootstrap, tasks, timer).eagerlyEvaluate([this](kj::Exception&& e) {
        spdlog::error("control socket {}: stopped accepting: {}", socketPath, e.getDescription().cStr());
      });
      ready->set_value(state::Status::OK());
      reported = true;

      stop.promise.wait(io.waitScope);

      // Stop accepting; every worker has finished (the destructor joined them), so every
      // reply is resolved: let the loop run until it would block, so that each reply
      // reaches the kernel (a written reply survives the close that follows). Without an
      // open connection there is nothing to deliver: no 30 ms linger at the end of every
      // run (a third of `jobhost run`'s time after its worker exits).
      accepting = kj::READY_NOW;
      listener = nullptr;
      for (int i = 0; i < 3 && connections > 0; ++i) {
        kj::evalLast([] {}).wait(io.waitScope);
        timer.afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
      }
    }  // connections are closed here
  } catch (const kj::Exception& e) {
    std::string msg = std::string("control server: ") + e.getDescription().cStr();
    if (!reported) ready->set_value(state::Status::IOError(msg));
    else spdlog::error("{}", msg);
  }
}

state::Result<std::unique_ptr<ControlServer>> ControlServer::start(JobControl& job, const std::string& jobId) {
  if (!validJobId(jobId)) return state::Status::InvalidArgument("invalid job id '" + jobId + "' for a control socket");
  auto dir = ensureRuntimeDir();
  if (!dir.ok()) return dir.status();
  auto impl = std::make_unique<Impl>(job, jobId);
  impl->socketPath = controlSocketPath(*dir, jobId);
  const std::string& path = impl->socketPath;
  if (path.size() > kMaxSocketPathLength)
    return state::Status::InvalidArgument("the control socket path " + path + " is " + std::to_string(path.size()) +
                                          " bytes long; Unix sockets allow at most " +
                                          std::to_string(kMaxSocketPathLength) +
                                          ": set XDG_RUNTIME_DIR to a shorter directory of yours");

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return state::fromErrno("cannot create the control socket", errno);
  impl->listenFd = fd;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (int attempt = 0;; ++attempt) {
    mode_t old = umask(077);
    int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int err = errno;
    umask(old);
    if (rc == 0) break;
    if (err == EADDRINUSE && attempt == 0 && isStaleSocketOfOurs(path)) {
      spdlog::info("removing stale control socket {}", path);
      unlink(path.c_str());
      continue;
    }
    if (err == EADDRINUSE)
      return state::Status::IOError("cannot bind the control socket " + path +
                                    ": the path exists and is not a stale socket of yours (another job with this id?)");
    return state::fromErrno("cannot bind the control socket " + path, err);
  }
  chmod(path.c_str(), 0600);
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    impl->sockDev = st.st_dev;
    impl->sockIno = st.st_ino;
  }
  if (listen(fd, 16) != 0) {
    int err = errno;
    unlink(path.c_str());
    return state::fromErrno("cannot listen on the control socket " + path, err);
  }

  std::promise<state::Status> ready;
  auto readyFuture = ready.get_future();
  Impl* raw = impl.get();
  impl->loopThread = std::thread([raw, &ready] { raw->loopMain(&ready); });
  state::Status s = readyFuture.get();
  if (!s.ok()) {
    impl->loopThread.join();
    unlink(path.c_str());
    return s;
  }
  spdlog::info("control socket {} (jobhost list / savepoint / cancel / stop)", path);
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() {
  Impl& i = *impl_;
  // New clients must not find an ending job; remove the socket only if it is still ours.
  struct stat st {};
  if (lstat(i.socketPath.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == i.sockDev && st.st_ino == i.sockIno)
    unlink(i.socketPath.c_str());
  std::list<Impl::Worker> workers;
  {
    std::lock_guard lock(i.mu);
    i.stopping = true;
    workers.swap(i.workers);
  }
  auto started = std::chrono::steady_clock::now();
  bool logged = false;
  for (auto& w : workers) {
    while (!w.done->load()) {
      if (!logged && std::chrono::steady_clock::now() - started > std::chrono::seconds(2)) {
        spdlog::info("waiting for control requests in flight to finish");
        logged = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    w.thread.join();
  }
  if (i.stopFulfiller) i.stopFulfiller->fulfill();
  if (i.loopThread.joinable()) i.loopThread.join();
}

const std::string& ControlServer::socketPath() const { return impl_->socketPath; }

}  // namespace jobhost::host
