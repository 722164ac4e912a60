// `jobhost run`, the supervisor: checks the command line and the -s snapshot, then runs
// the job's attempts in worker processes under the restart strategy, and serves the
// control endpoint throughout (also while a worker restarts).
#include "job_runner.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/checkpoint_record_capnp.h"
#include "checkpoint/preflight.h"
#include "control/control_server.h"
#include "control/job_control.h"
#include "job_setup.h"
#include "runtime/restart_strategy.h"
#include "runtime/worker_protocol.capnp.h"

namespace jobhost::host {

namespace fs = std::filesystem;

const char* jobStateName(JobState s) {
  switch (s) {
    case JobState::kCreated: return "CREATED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kRestarting: return "RESTARTING";
    case JobState::kCancelling: return "CANCELLING";
    case JobState::kFinished: return "FINISHED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCanceled: return "CANCELED";
  }
  return "?";
}

namespace {

std::atomic<bool> gInterrupted{false};
std::atomic<JobControl*> gControl{nullptr};  // the running job, for the signal thread

std::string newJobId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen()));
  return buf;
}

/// The run options as command-line words for the worker.
std::vector<std::string> workerArguments(const RunOptions& o, const std::string& jobId, int attempt) {
  std::vector<std::string> a = {"jobhost", "__worker", "--job-id", jobId, "--attempt", std::to_string(attempt)};
  if (o.jobClass) a.insert(a.end(), {"-c", *o.jobClass});
  if (o.parallelism) a.insert(a.end(), {"-p", std::to_string(*o.parallelism)});
  for (const auto& d : o.defines) a.insert(a.end(), {"-D", d});
  if (o.configFile) a.insert(a.end(), {"--config", *o.configFile});
  if (o.fromSnapshot) a.insert(a.end(), {"-s", *o.fromSnapshot});
  if (o.allowNonRestoredState) a.push_back("-n");
  if (o.claimSnapshot) a.insert(a.end(), {"--restore-mode", "claim"});
  a.push_back(o.pluginPath);
  a.insert(a.end(), o.jobArgs.begin(), o.jobArgs.end());
  return a;
}

/// One worker process and its channel.
struct Worker {
  pid_t pid = -1;
  int channel = -1;  // our end of the socketpair
  int crash = -1;    // read end of the crash-report pipe
};

Worker spawnWorker(const std::vector<std::string>& args) {
  int sv[2];
  int crash[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe2(crash, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("cannot create the worker channel: ") + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("cannot start the worker process: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: keep our ends open across exec, ignore Ctrl-C (the supervisor handles it).
    int ch = dup(sv[1]);
    int cr = dup(crash[1]);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    setenv("JOBHOST_WORKER_FD", std::to_string(ch).c_str(), 1);
    setenv("JOBHOST_CRASH_FD", std::to_string(cr).c_str(), 1);
    std::vector<char*> argv;
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(sv[1]);
  close(crash[1]);
  return {pid, sv[0], crash[0]};
}

std::string describeSignal(int sig) {
  const char* n = sigabbrev_np(sig);
  std::string s = n ? std::string("SIG") + n : "signal " + std::to_string(sig);
  if (const char* d = strsignal(sig)) s += std::string(" (") + d + ")";
  if (sig == SIGKILL) s += "; the OOM killer or a kill -9";
  return s;
}

class JobRunner : public JobControl {
 public:
  explicit JobRunner(const RunOptions& o) : o_(o) {}
  int run();

  JobStatusInfo status() override {
    std::lock_guard lock(mu_);
    return info_;
  }

  std::vector<CheckpointRecord> checkpointHistory() override {
    std::lock_guard lock(mu_);
    return {history_.begin(), history_.end()};
  }

  std::map<std::string, std::string> configuration() override {
    return setup_.config.effective();  // built before the control endpoint starts; read-only since
  }

  state::Result<std::string> savepoint(const std::optional<std::string>& targetDir,
                                       state::SnapshotFormat format) override {
    std::string dir = targetDir.value_or(setup_.savepointDir);
    if (dir.empty())
      return state::Status::InvalidArgument(
          "no savepoint directory: pass one, or set state.savepoints.dir in the configuration or with -D");
    std::unique_lock lock(mu_);
    if (info_.state != JobState::kRunning || workerChannel_ < 0)
      return state::Status::InvalidArgument(std::string("the job is ") + jobStateName(info_.state) +
                                            "; savepoints need a RUNNING job");
    uint64_t id = ++nextRequest_;
    int attempt = attempt_;
    sendLocked([&](wire::ToWorker::Builder b) {
      auto sp = b.initSavepoint();
      sp.setRequestId(id);
      sp.setTargetDir(fs::absolute(dir).string());
      sp.setCanonical(format == state::SnapshotFormat::kCanonical);
    });
    bool done = changed_.wait_for(lock, std::chrono::minutes(10),
                                  [&] { return savepoints_.count(id) || attempt_ != attempt || workerChannel_ < 0; });
    auto it = savepoints_.find(id);
    if (it == savepoints_.end()) {
      // A late answer for this request is dropped when it arrives (see readWorker).
      abandoned_.insert(id);
      return state::Status::IOError(done ? "the job attempt ended before the savepoint completed" : "savepoint timed out");
    }
    auto r = std::move(it->second);
    savepoints_.erase(it);
    return r;
  }

  state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& targetDir) override {
    std::string path;
    if (withSavepoint) {
      auto sp = savepoint(targetDir, state::SnapshotFormat::kCanonical);
      if (!sp.ok()) return sp.status();
      path = *sp;
    }
    std::lock_guard lock(mu_);
    cancelRequested_ = true;
    if (info_.state == JobState::kRunning || info_.state == JobState::kRestarting) info_.state = JobState::kCancelling;
    if (workerChannel_ >= 0) sendLocked([](wire::ToWorker::Builder b) { b.setCancel(); });
    changed_.notify_all();
    return path;
  }

  state::Result<std::string> stop(const std::optional<std::string>& targetDir) override {
    auto r = cancel(true, targetDir);
    if (r.ok()) {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    return r;
  }

 private:
  template <class Fill>
  void sendLocked(Fill fill) {
    capnp::MallocMessageBuilder message;
    fill(message.initRoot<wire::ToWorker>());
    try {
      capnp::writeMessageToFd(workerChannel_, message);
    } catch (const kj::Exception& e) {
      spdlog::debug("worker channel: {}", e.getDescription().cStr());
    }
  }
  void setState(JobState s) {
    std::lock_guard lock(mu_);
    if (cancelRequested_ && (s == JobState::kRunning || s == JobState::kRestarting)) return;
    info_.state = s;
    changed_.notify_all();
  }
  void signalReady();
  /// A record from the worker: replaces the one with the same id and trigger time, or is
  /// appended (the newest kHistoryLimit are kept); counts completions and failures.
  void recordCheckpointLocked(const CheckpointRecord& r);
  /// After a worker ended: what it left in progress will never complete.
  void failInProgressLocked(const std::string& reason);
  /// Reads the worker's messages until it closes the channel; returns its end report.
  std::optional<std::tuple<wire::EndKind, std::string, std::string, std::string, bool, int>> readWorker(int fd);

  const RunOptions& o_;
  JobSetup setup_;
  std::mutex mu_;
  std::condition_variable changed_;
  JobStatusInfo info_;                 // guarded by mu_
  int workerChannel_ = -1;             // guarded by mu_
  int attempt_ = 0;                    // guarded by mu_
  uint64_t nextRequest_ = 0;           // guarded by mu_
  std::map<uint64_t, state::Result<std::string>> savepoints_;  // guarded by mu_
  std::set<uint64_t> abandoned_;       // guarded by mu_: requests whose caller gave up
  bool cancelRequested_ = false;       // guarded by mu_
  bool stopped_ = false;               // guarded by mu_
  std::deque<CheckpointRecord> history_;  // guarded by mu_
  bool readySignalled_ = false;
};

void JobRunner::recordCheckpointLocked(const CheckpointRecord& r) {
  auto it = std::find_if(history_.rbegin(), history_.rend(), [&](const CheckpointRecord& h) {
    return h.id == r.id && h.triggerTimeMs == r.triggerTimeMs;
  });
  auto before = it != history_.rend() ? std::optional(it->status) : std::nullopt;
  if (!r.savepoint && before != r.status) {
    if (r.status == CheckpointRecord::Status::kCompleted) ++info_.checkpointsCompleted;
    if (r.status == CheckpointRecord::Status::kFailed) ++info_.checkpointsFailed;
  }
  if (it != history_.rend()) {
    *it = r;
    return;
  }
  history_.push_back(r);
  while (history_.size() > CheckpointCoordinator::kHistoryLimit) history_.pop_front();
}

void JobRunner::failInProgressLocked(const std::string& reason) {
  auto now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                 .count();
  for (auto& h : history_) {
    if (h.status != CheckpointRecord::Status::kInProgress) continue;
    CheckpointRecord r = h;
    r.status = CheckpointRecord::Status::kFailed;
    r.failureReason = reason;
    r.durationMicros = static_cast<uint64_t>(std::max<int64_t>(0, now - r.triggerTimeMs)) * 1000;
    recordCheckpointLocked(r);
  }
}

void JobRunner::signalReady() {
  if (readySignalled_) return;
  readySignalled_ = true;
  const char* fdText = std::getenv("JOBHOST_READY_FD");
  if (!fdText) return;
  int fd = std::atoi(fdText);
  if (fd <= 2) return;
  std::string line = info_.jobId + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  (void)n;
  ::close(fd);
}

std::optional<std::tuple<wire::EndKind, std::string, std::string, std::string, bool, int>> JobRunner::readWorker(int fd) {
  std::optional<std::tuple<wire::EndKind, std::string, std::string, std::string, bool, int>> ended;
  for (;;) {
    try {
      capnp::StreamFdMessageReader reader(fd);
      auto m = reader.getRoot<wire::FromWorker>();
      switch (m.which()) {
        case wire::FromWorker::RUNNING:
          setState(JobState::kRunning);
          signalReady();
          break;
        case wire::FromWorker::STATS: {
          auto s = m.getStats();
          std::lock_guard lock(mu_);
          info_.recordsIn = s.getRecordsIn();
          info_.recordsOut = s.getRecordsOut();
          if (s.getLastCheckpointId()) {
            info_.lastCheckpointId = s.getLastCheckpointId();
            info_.lastCheckpointPath = s.getLastCheckpointPath();
          }
          break;
        }
        case wire::FromWorker::SAVEPOINT_DONE: {
          auto d = m.getSavepointDone();
          std::lock_guard lock(mu_);
          if (abandoned_.erase(d.getRequestId())) break;
          if (d.getError().size() > 0)
            savepoints_.emplace(d.getRequestId(), state::Status::IOError(d.getError().cStr()));
          else
            savepoints_.emplace(d.getRequestId(), std::string(d.getPath().cStr()));
          changed_.notify_all();
          break;
        }
        case wire::FromWorker::CHECKPOINT_EVENT: {
          CheckpointRecord r = readCheckpointRecord(m.getCheckpointEvent());
          std::lock_guard lock(mu_);
          recordCheckpointLocked(r);
          break;
        }
        case wire::FromWorker::ENDED: {
          auto e = m.getEnded();
          ended.emplace(e.getKind(), e.getMessage(), e.getOperatorName(), e.getSubtask(), e.getRestoreFailure(),
                        e.getExitCode());
          break;
        }
      }
    } catch (const kj::Exception&) {
      return ended;  // EOF: the worker exited (or died)
    }
  }
}

int JobRunner::run() {
  const RunOptions& o = o_;
  JobSetup& setup = setup_;
  if (int rc = setupJob(o, &setup); rc != 0) return rc;
  for (const auto& w : setup.config.suspiciousKeys()) spdlog::warn("{}", w);
  const std::string& className = setup.className;
  auto restart = createRestartStrategy(setup.config);

  // Restore preflight: only _metadata and the plan, before anything starts.
  if (o.fromSnapshot) {
    auto snapshot = resolveSnapshot(*o.fromSnapshot);
    if (!snapshot.ok()) {
      std::cerr << "error: cannot restore from " << *o.fromSnapshot << ": " << snapshot.status().message() << "\n";
      return kExitIncompatible;
    }
    if (!snapshot->note.empty()) spdlog::info("{}", snapshot->note);
    PreflightInput in;
    in.metadata = &snapshot->metadata;
    in.storage = snapshot->storage.get();
    in.snapshotPath = snapshot->directory;
    in.operators = setup.operators;
    in.selectedClass = className;
    in.pluginPath = o.pluginPath;
    in.pluginDigest = setup.plugin->contentDigest();
    for (const auto& c : setup.plugin->classes()) in.pluginClasses.push_back(c.name);
    in.backend = setup.backend;
    in.incremental = setup.incremental;
    in.maxParallelism = setup.maxParallelism;
    in.parallelism = setup.parallelism;
    in.allowNonRestoredState = o.allowNonRestoredState;
    PreflightReport report = runPreflight(in);
    if (!report.compatible()) {
      std::cerr << report.format(snapshot->directory);
      return kExitIncompatible;
    }
    if (o.dryRun) {
      std::cout << report.format(snapshot->directory);
      return kExitOk;
    }
    for (const auto& f : report.findings) spdlog::warn("restore check [{}]: {}", f.check, f.message);
  } else if (o.dryRun) {
    std::cout << "nothing to check: no snapshot given (-s)\n";
    return kExitOk;
  }

  const std::string jobId = newJobId();
  fs::path jobDir = fs::path(setup.checkpointDir) / jobId;
  bool checkpointing = setup.interval.count() > 0;
  if (checkpointing) {
    std::error_code ec;
    fs::create_directories(jobDir / "shared", ec);
    if (!ec) fs::create_directories(jobDir / "taskowned", ec);
    // Make the new directories durable: a checkpoint published inside must not vanish
    // with its parent on power loss.
    for (const fs::path& d : {jobDir, jobDir.parent_path()}) {
      int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    }
    if (ec) {
      std::cerr << "error: cannot create the checkpoint directory " << jobDir.string() << ": " << ec.message()
                << " (set state.checkpoints.dir to a writable directory)\n";
      return kExitUsage;
    }
  }
  {
    std::lock_guard lock(mu_);
    info_.jobId = jobId;
    info_.jobClass = className;
    info_.pluginPath = fs::absolute(o.pluginPath).string();
    info_.backend = std::string(state::backendTypeName(setup.backend)) + (setup.incremental ? " (incremental)" : "");
    info_.parallelism = setup.parallelism;
    info_.startedMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    info_.checkpointDir = checkpointing ? jobDir.string() : "";
    info_.pid = static_cast<int>(getpid());
  }
  spdlog::info("job {} ({}) starting: backend {}{}, parallelism {}, checkpoints {}", jobId, className,
               state::backendTypeName(setup.backend), setup.incremental ? " (incremental)" : "", setup.parallelism,
               checkpointing ? "every " + formatDuration(setup.interval) + " to " + jobDir.string() : "off");

  gControl.store(this);
  std::unique_ptr<ControlServer> control;
  {
    auto server = ControlServer::start(*this, jobId);
    if (server.ok()) control = std::move(*server);
    else spdlog::warn("control endpoint unavailable ({}); list/savepoint/cancel cannot reach this job",
                      server.status().message());
  }

  int exitCode = kExitOk;
  bool cancelled = false;
  for (int attempt = 1;; ++attempt) {
    Worker w;
    try {
      w = spawnWorker(workerArguments(o, jobId, attempt));
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exitCode = kExitJobFailed;
      break;
    }
    {
      std::lock_guard lock(mu_);
      workerChannel_ = w.channel;
      attempt_ = attempt;
      if (cancelRequested_) sendLocked([](wire::ToWorker::Builder b) { b.setCancel(); });
    }
    auto ended = readWorker(w.channel);
    int status = 0;
    waitpid(w.pid, &status, 0);
    std::string crashReport;
    {
      char buf[1024];
      ssize_t n;
      while ((n = ::read(w.crash, buf, sizeof buf)) > 0) crashReport.append(buf, static_cast<size_t>(n));
    }
    {
      std::lock_guard lock(mu_);
      workerChannel_ = -1;
      failInProgressLocked("the job attempt ended before it completed");
      changed_.notify_all();
    }
    close(w.channel);
    close(w.crash);

    bool requested;
    {
      std::lock_guard lock(mu_);
      requested = cancelRequested_;
    }
    std::string message, where;
    bool restoreFailure = false;
    if (ended) {
      auto& [kind, msg, op, subtask, restore, code] = *ended;
      if (kind == wire::EndKind::FINISHED) {
        spdlog::info("job {} ({}) finished", jobId, className);
        setState(JobState::kFinished);
        break;
      }
      if (kind == wire::EndKind::SETUP_FAILED) {  // the worker printed why
        exitCode = code;
        setState(JobState::kFailed);
        break;
      }
      if (kind == wire::EndKind::CANCELLED || requested) {
        if (gInterrupted.load()) {
          spdlog::info("job {} stopped by signal", jobId);
          exitCode = kExitInterrupted;
        } else {
          bool stopped;
        {
          std::lock_guard lock(mu_);
          stopped = stopped_;
        }
        spdlog::info("job {} {}", jobId, stopped ? "stopped with a savepoint" : "cancelled");
        }
        setState(JobState::kCanceled);
        cancelled = true;
        break;
      }
      message = msg;
      where = op.empty() ? "" : "operator '" + op + "' " + subtask + ": ";
      restoreFailure = restore;
      if (restoreFailure) {
        spdlog::error("job {} failed while restoring state, not retrying: {}", jobId, message);
        exitCode = code ? code : kExitIncompatible;
        setState(JobState::kFailed);
        break;
      }
    } else {
      // No report: the worker died.
      if (WIFSIGNALED(status)) message = "the worker process was killed by " + describeSignal(WTERMSIG(status));
      else message = "the worker process exited with code " + std::to_string(WEXITSTATUS(status)) + " without a report";
      auto tab = crashReport.find('\t');
      if (tab != std::string::npos) {
        std::string rest = crashReport.substr(tab + 1);
        auto tab2 = rest.find('\t');
        std::string op = rest.substr(0, tab2);
        std::string subtask = tab2 == std::string::npos ? "" : rest.substr(tab2 + 1);
        while (!subtask.empty() && (subtask.back() == '\n')) subtask.pop_back();
        if (!op.empty()) where = "operator '" + op + "' " + subtask + ": ";
      }
      if (requested) {
        setState(JobState::kCanceled);
        cancelled = true;
        exitCode = gInterrupted.load() ? kExitInterrupted : kExitOk;
        break;
      }
    }
    {
      std::lock_guard lock(mu_);
      info_.lastFailure = where + message;
      info_.lastFailureMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    }
    std::chrono::milliseconds delay{0};
    if (!restart->onFailure(&delay)) {
      setState(JobState::kFailed);
      spdlog::error("job {} failed: Recovery is suppressed by {}; root cause: {}{}", jobId, restart->describe(), where,
                    message);
      exitCode = kExitJobFailed;
      break;
    }
    spdlog::warn("job {} attempt {} failed: {}{}; restarting in {} ({})", jobId, attempt, where, message,
                 formatDuration(delay), restart->describe());
    {
      std::lock_guard lock(mu_);
      ++info_.restarts;
    }
    setState(JobState::kRestarting);
    {
      std::unique_lock lock(mu_);
      changed_.wait_for(lock, delay, [&] { return cancelRequested_; });
      if (cancelRequested_) {
        info_.state = JobState::kCanceled;
        cancelled = true;
        exitCode = gInterrupted.load() ? kExitInterrupted : kExitOk;
        break;
      }
    }
  }
  control.reset();  // the socket goes before the process does
  gControl.store(nullptr);
  if (checkpointing) {
    if (cancelled && setup.deleteOnCancel) {
      std::error_code rm;
      fs::remove_all(jobDir, rm);
      spdlog::info("deleted the checkpoints of cancelled job {} (DELETE_ON_CANCELLATION)", jobId);
    } else {
      std::lock_guard lock(mu_);
      if (info_.lastCheckpointId)
        spdlog::info("latest checkpoint: {} (restore with: jobhost run -s {} -c {} {})", info_.lastCheckpointPath,
                     info_.lastCheckpointPath, className, o.pluginPath);
    }
  }
  return exitCode;
}

}  // namespace

int runJob(const RunOptions& o) {
  JobRunner runner(o);
  return runner.run();
}

void installSignalHandling() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (gInterrupted.exchange(true)) {
        std::fprintf(stderr, "second interrupt: exiting now\n");
        std::_Exit(kExitInterrupted);
      }
      spdlog::info("received {}: stopping the job (press Ctrl-C again to exit at once)", sig == SIGINT ? "SIGINT" : "SIGTERM");
      if (auto* c = gControl.load()) c->cancel(false, std::nullopt).ok();
    }
  }).detach();
}

}  // namespace jobhost::host
