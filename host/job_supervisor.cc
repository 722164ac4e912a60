// The supervisor of `jobhost run`: see job_supervisor.h.
#include "job_supervisor.h"

#include "config/units.h"
#include "jobhost/state/s3_storage.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "checkpoint/checkpoint_record_capnp.h"
#include "exit_codes.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/snapshot_registry.h"
#include "runtime/checkpoint_failure.h"
#include "runtime/worker_protocol.capnp.h"
#include "log_format.h"
#include "signal_handling.h"
#include "startup_wait.h"
#include "wall_clock.h"
#include "worker_spawn.h"

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

std::string newJobId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen()));
  return buf;
}

/// The directory whose lock guards a snapshot: a job directory for its chk-<n>, else (a
/// savepoint) the snapshot's own directory.
std::string owningDirectory(const ResolvedSnapshot& s) {
  fs::path dir(s.directory);
  return state::parseCheckpointDirName(dir.filename().string()) ? dir.parent_path().string() : dir.string();
}

/// Makes `dir` and its parent durable (a checkpoint published inside must not vanish with
/// its directory entry on power loss).
void syncDirectories(const fs::path& dir) {
  for (const fs::path& d : {dir, dir.parent_path()}) {
    int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
}

/// The errno of creating a file in `dir`, 0 if that works. An unnamed file (O_TMPFILE)
/// where the file system has them, so that nothing is left behind whatever happens; a
/// named one, removed at once, where it has not.
int writeAccessErrno(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return 0;
  }
  // Any error (no O_TMPFILE on this file system, a security policy that treats it apart)
  // is confirmed with the file a checkpoint would write: a named one.
  const fs::path probe = dir / (".jobhost-write-probe-" + std::to_string(::getpid()));
  fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

std::string describeSignal(int sig) {
  const char* n = sigabbrev_np(sig);
  std::string s = n ? std::string("SIG") + n : "signal " + std::to_string(sig);
  if (const char* d = strsignal(sig)) s += std::string(" (") + d + ")";
  if (sig == SIGKILL) s += "; the OOM killer or a kill -9";
  return s;
}

}  // namespace

JobSupervisor::JobSupervisor(const RunOptions& options, JobSetup& setup, std::unique_ptr<RestartStrategy> restart,
                             std::optional<ResolvedSnapshot> initial)
    : o_(options),
      setup_(setup),
      restart_(std::move(restart)),
      initial_(std::move(initial)),
      jobId_(options.jobId.value_or(newJobId())),
      ready_(DetachHandshake::fromEnvironment()) {}

JobSupervisor::~JobSupervisor() {
  // Prepared but never run (prepare() failed after making the job directory, or the
  // health port was taken): the directory it made goes as after a failed run.
  if (!ran_) removeUnusedJobDirectory();
  // The lease's renewing thread calls onLease() (mu_, info_, the worker channel): stop it
  // before the members it touches are destroyed (mu_ is declared after jobLock_).
  jobLock_.reset();
}

namespace {

/// JobDirectoryLock::acquire, waiting out an outage of the directory's store (an object
/// store's lease) as the run's start-up does: it probed the lock a moment ago, and a store
/// that stops answering now is no reason to end the run. `wait` says whether a signal
/// ended the wait (interrupted()).
state::Result<JobDirectoryLock> acquireWaitingOutOutages(const std::string& dir, const LockHolder& me,
                                                         StartupWait& wait) {
  auto lock = JobDirectoryLock::acquire(dir, me);
  while (!lock.ok() && wait.retry(lock.status(), "locking " + dir)) lock = JobDirectoryLock::acquire(dir, me);
  if (lock.ok()) wait.answered();
  return lock;
}

}  // namespace

int JobSupervisor::prepare() {
  bool checkpointing = setup_.interval.count() > 0;
  LockHolder me{static_cast<int>(::getpid()), jobId_, setup_.className, "running job"};
  if (o_.claimSnapshot && initial_) {
    if (!checkpointing)
      spdlog::warn("--restore-mode claim has no effect: checkpointing is off, so the job never has a checkpoint of its "
                   "own and {} is kept", initial_->directory);
    // Nobody else may write, clean, claim or dispose of it while we own it.
    LockHolder claimer = me;
    claimer.purpose = "claim of " + initial_->directory;
    StartupWait wait(true);
    auto lock = acquireWaitingOutOutages(owningDirectory(*initial_), claimer, wait);
    if (!lock.ok()) {
      std::cerr << "error: cannot claim " << initial_->directory << ": " << lock.status().message()
                << " (or restore without --restore-mode claim)\n";
      return wait.interrupted() ? kExitInterrupted : kExitUsage;
    }
    claimLock_ = std::move(*lock);
  }
  if (checkpointing) {
    fs::path jobDir = fs::path(setup_.checkpointDir) / jobId_;
    if (!state::isObjectStoreUri(setup_.checkpointDir)) {  // an object store has no directories to make
      std::error_code ec;
      createdJobDir_ = !fs::exists(jobDir, ec);
      fs::create_directories(jobDir / state::kSharedDirName, ec);
      if (!ec) fs::create_directories(jobDir / state::kTaskOwnedDirName, ec);
      if (ec) {
        std::cerr << "error: cannot create the checkpoint directory " << jobDir.string() << ": " << ec.message()
                  << " (set state.checkpoints.dir to a writable directory)\n";
        return kExitUsage;
      }
      syncDirectories(jobDir);
    }
    StartupWait wait(true);
    auto lock = acquireWaitingOutOutages(jobDir.string(), me, wait);
    if (!lock.ok()) {
      std::cerr << "error: " << lock.status().message() << "\n";
      return wait.interrupted() ? kExitInterrupted : kExitUsage;
    }
    jobLock_ = std::move(*lock);
    // Write access lost while the job runs is an outage, waited out (checkpoint_failure.h);
    // a directory the job cannot write to when it starts is a mistake to say at once. A
    // job directory that exists already (--job-id, a restart of a container) is where
    // creating the directories and the lock file above wrote nothing.
    if (!state::isObjectStoreUri(setup_.checkpointDir)) {
      for (const fs::path& d : {jobDir, jobDir / state::kSharedDirName}) {  // taskowned/ is reserved: unwritten
        const int e = writeAccessErrno(d);
        if (e == EACCES || e == EPERM || e == EROFS) {
          std::cerr << "error: cannot write to the checkpoint directory " << d.string() << ": " << std::strerror(e)
                    << " (give the user running jobhost write access to it, or set state.checkpoints.dir to a "
                       "writable directory)\n";
          return kExitUsage;
        }
        if (e != 0)  // a full disk, an I/O error: waited out at the first checkpoint that meets it
          spdlog::warn("cannot write to the checkpoint directory {} now: {}", d.string(), std::strerror(e));
      }
    }
    jobDir_ = jobDir.string();
    jobLock_->onLeaseChange([this](const JobDirectoryLock::LeaseState& l) { onLease(l); });
  }
  if (setup_.backend == state::BackendType::kRocksDb) {
    auto workDir = JobWorkDirectory::create(setup_.localDirRoot, setup_.localDirIsDefault, jobId_, me);
    if (!workDir.ok()) {
      std::cerr << "error: " << workDir.status().message() << " (state.local.dir)\n";
      return kExitUsage;
    }
    workDir_ = std::move(*workDir);
  }
  std::lock_guard lock(mu_);
  info_.jobId = jobId_;
  setLogJob(jobId_, 0);
  info_.pluginDigest = setup_.plugin->contentDigest();
  info_.jobClass = setup_.className;
  info_.pluginPath = fs::absolute(o_.pluginPath).string();
  info_.backend = std::string(state::backendTypeName(setup_.backend)) + (setup_.incremental ? " (incremental)" : "");
  info_.parallelism = setup_.parallelism;
  info_.startedMs = wallClockMs();
  info_.checkpointDir = jobDir_;
  info_.pid = static_cast<int>(getpid());
  return 0;
}

JobStatusInfo JobSupervisor::status() {
  std::lock_guard lock(mu_);
  return info_;
}

std::vector<CheckpointRecord> JobSupervisor::checkpointHistory() {
  std::lock_guard lock(mu_);
  return {history_.records().begin(), history_.records().end()};
}

std::map<std::string, std::string> JobSupervisor::configuration() { return setup_.config.effective(); }

state::Result<std::string> JobSupervisor::savepoint(const std::optional<std::string>& targetDir,
                                                    state::SnapshotFormat format) {
  return takeSavepoint(targetDir, format, /*stop=*/false);
}

state::Result<std::string> JobSupervisor::cancel(bool withSavepoint, const std::optional<std::string>& targetDir) {
  std::string path;
  if (withSavepoint) {
    auto sp = takeSavepoint(targetDir, state::SnapshotFormat::kCanonical, /*stop=*/false);
    if (!sp.ok()) return sp.status();
    path = *sp;
    std::lock_guard lock(mu_);
    endSavepoint_ = path;
  }
  requestCancel();
  return path;
}

state::Result<std::string> JobSupervisor::stop(const std::optional<std::string>& targetDir, bool drain) {
  return takeSavepoint(targetDir, state::SnapshotFormat::kCanonical, /*stop=*/true, drain);
}

state::Result<std::string> JobSupervisor::takeSavepoint(const std::optional<std::string>& targetDir,
                                                        state::SnapshotFormat format, bool stop, bool drain) {
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
  if (stop) stopRequests_.insert(id);
  sendLocked([&](wire::ToWorker::Builder b) {
    auto sp = b.initSavepoint();
    sp.setRequestId(id);
    sp.setTargetDir(state::isObjectStoreUri(dir) ? dir : fs::absolute(dir).string());
    sp.setCanonical(format == state::SnapshotFormat::kCanonical);
    sp.setStop(stop);
    sp.setDrain(stop && drain);
  });
  // Longer than the worker's own 10-minute limit, so its answer (success or time-out)
  // always arrives before this gives up.
  bool done = changed_.wait_for(lock, std::chrono::minutes(11),
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

void JobSupervisor::requestCancel() {
  std::lock_guard lock(mu_);
  cancelRequested_ = true;
  if (info_.state == JobState::kRunning || info_.state == JobState::kRestarting) info_.state = JobState::kCancelling;
  if (workerChannel_ >= 0) sendLocked([](wire::ToWorker::Builder b) { b.setCancel(); });
  changed_.notify_all();
}

template <class Fill>
void JobSupervisor::sendLocked(Fill fill) {
  capnp::MallocMessageBuilder message;
  fill(message.initRoot<wire::ToWorker>());
  try {
    capnp::writeMessageToFd(workerChannel_, message);
  } catch (const kj::Exception& e) {
    spdlog::debug("worker channel: {}", e.getDescription().cStr());
  }
}

void JobSupervisor::onLease(const JobDirectoryLock::LeaseState& l) {
  std::lock_guard lock(mu_);
  const bool wasFenced = lease_.publishUntilNanos != INT64_MAX && !lease_.why.empty();
  lease_ = l;
  info_.leaseRenewedMs = l.renewedMs;
  if (l.lost || !l.why.empty()) {
    // Renewals fail (or the lease is someone else's): the worker stops publishing at the
    // deadline; the status says since when once it has passed.
    if (info_.publishingFencedSinceMs == 0 && (l.lost || monotonicNanos() >= l.publishUntilNanos))
      info_.publishingFencedSinceMs = wallClockMs();
  } else {
    if (wasFenced && info_.publishingFencedSinceMs != 0)
      spdlog::info("publishing checkpoints to {} again: the lease is renewed", jobDir_);
    info_.publishingFencedSinceMs = 0;
  }
  if (workerChannel_ >= 0) sendLeaseLocked();
  if (l.reacquired && workerChannel_ >= 0) {
    // Another instance may have run the job while the lease was gone: this attempt's
    // state is stale. End it and restore the newest checkpoint (not counted as a failure).
    restartFromNewest_ = true;
    sendLocked([](wire::ToWorker::Builder b) { b.setCancel(); });
  }
  if (l.lost && !leaseLost_) {
    // Another instance runs this job now (it took the expired lease over): this one must
    // not write its job directory again, nor its sinks; it ends with an error.
    leaseLost_ = true;
    info_.lastFailure = l.why;
    info_.lastFailureMs = wallClockMs();
    cancelRequested_ = true;
    if (workerChannel_ >= 0) sendLocked([](wire::ToWorker::Builder b) { b.setCancel(); });
  }
  changed_.notify_all();
}

void JobSupervisor::sendLeaseLocked() {
  if (lease_.publishUntilNanos == INT64_MAX && lease_.why.empty()) return;  // a flock: nothing to fence
  sendLocked([&](wire::ToWorker::Builder b) {
    auto lb = b.initLease();
    lb.setPublishUntilNanos(lease_.lost ? 0 : lease_.publishUntilNanos);
    lb.setWhy(lease_.why);
  });
}

namespace {
/// Whether the filesystem of `dir` is full: less than 16 MiB free for us (what RocksDB's
/// failed write left behind is still there when this is asked).
bool localDiskFull(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return false;
  const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return free < (16u << 20);
}
}  // namespace

bool JobSupervisor::waitOut(Outage outage, const state::Status& s, const std::string& what) {
  StoreOutage& backoff = outage == Outage::kCheckpointStore ? restoreOutage_ : dependencyOutage_;
  const bool starts = !backoff.active();
  const auto pause = backoff.failed(s, what);
  std::unique_lock lock(mu_);
  if (outage == Outage::kCheckpointStore) {
    if (starts) ++restoreOutagesSeen_;
    ++info_.restoreRetries;
    info_.storeUnavailableSinceMs = backoff.sinceMs();
    info_.checkpointStoreError = s.toString();
    info_.checkpointStoreOutages = endedOutages_ + restoreOutagesSeen_;
  } else {
    info_.lastFailure = s.message();
    info_.lastFailureMs = wallClockMs();
  }
  if (!cancelRequested_) info_.state = JobState::kRestarting;
  changed_.notify_all();
  changed_.wait_for(lock, pause, [&] { return cancelRequested_; });
  return !cancelRequested_;
}

void JobSupervisor::setState(JobState s) {
  std::lock_guard lock(mu_);
  if (cancelRequested_ && (s == JobState::kRunning || s == JobState::kRestarting)) return;
  info_.state = s;
  changed_.notify_all();
}

void JobSupervisor::recordCheckpointLocked(const CheckpointRecord& r) {
  history_.record(r);
  updateCheckpointStatsLocked();
}

void JobSupervisor::updateCheckpointStatsLocked() {
  info_.checkpointsCompleted = history_.completed();
  info_.checkpointsFailed = history_.failed();
  info_.checkpointsInProgress = 0;
  bool lastFound = false;
  const auto& records = history_.records();
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->status == CheckpointRecord::Status::kInProgress) ++info_.checkpointsInProgress;
    if (lastFound || it->savepoint || it->status != CheckpointRecord::Status::kCompleted) continue;
    lastFound = true;
    info_.lastCheckpointDurationMs = it->durationMicros / 1000;
    info_.lastCheckpointSizeBytes = it->newBytes;
    info_.lastCheckpointFullSizeBytes = it->totalBytes;
    info_.lastCheckpointCompletedMs = it->triggerTimeMs + static_cast<int64_t>(it->durationMicros / 1000);
  }
}

void JobSupervisor::failInProgressLocked(const std::string& reason) {
  history_.failAllInProgress(reason, wallClockMs());
  updateCheckpointStatsLocked();
}

void JobSupervisor::onCheckpointRecord(const CheckpointRecord& r) {
  {
    std::lock_guard lock(mu_);
    recordCheckpointLocked(r);
  }
  highestTriggeredId_ = std::max(highestTriggeredId_, r.id);
  if (r.status == CheckpointRecord::Status::kCompleted && !r.savepoint) dependencyOutage_.recovered();
  if (r.status == CheckpointRecord::Status::kCompleted && !r.savepoint && claimLock_ && !claimDisposed_)
    disposeClaimedSnapshot();
}

void JobSupervisor::disposeClaimedSnapshot() {
  claimDisposed_ = true;
  fs::path dir(initial_->directory);
  // Through the registry of the directory holding it: `_metadata` first, and a file
  // another snapshot there still references stays.
  bool checkpoint = state::parseCheckpointDirName(dir.filename().string()).has_value();
  auto registry = checkpoint ? state::SnapshotRegistry::load(initial_->storage)
                             : state::SnapshotRegistry::loadOne(initial_->storage, dir.filename().string());
  std::vector<state::RemovedFile> removed;
  state::Status s = registry.ok() ? registry->discard(dir.filename().string(), &removed) : registry.status();
  if (!s.ok()) {
    spdlog::warn("could not delete the claimed snapshot {}: {}", dir.string(), s.toString());
  } else {
    uint64_t bytes = 0;
    for (const auto& f : removed) bytes += f.size;
    spdlog::info("deleted the claimed snapshot {} ({} files, {} bytes; restore mode claim): the job's own checkpoints "
                 "replace it",
                 dir.string(), removed.size(), bytes);
  }
  claimLock_.reset();
}

state::Result<JobSupervisor::RestoreDecision> JobSupervisor::decideRestore(int attempt) {
  RestoreDecision d;
  uint64_t initialId = initial_ ? initial_->metadata.checkpointId : 0;
  d.firstCheckpointId = initialId + 1;
  if (!jobDir_.empty()) {
    // No worker runs: collect what the previous attempt left, then look at what is there.
    auto storage = state::openStorage(jobDir_);
    auto registry = storage.ok() ? state::SnapshotRegistry::load(std::move(*storage))
                                 : state::Result<state::SnapshotRegistry>(storage.status());
    if (!registry.ok()) return registry.status().withContext("cannot read the job's checkpoints in " + jobDir_);
    {
      std::vector<std::string> kept;
      auto garbage = registry->findGarbage(&kept);
      std::vector<state::RemovedFile> removed;
      if (garbage.ok() && !garbage->empty()) {
        state::Status s = registry->collect(*garbage, &removed);
        if (!s.ok()) spdlog::warn("could not clean up all of {}: {}", jobDir_, s.message());
      }
      for (const auto& r : removed) spdlog::info("cleaned up {} ({})", registry->storage().describe(r.path), r.reason);
      for (const auto& k : kept) spdlog::warn("kept {}", k);
      for (const auto& [dir, reason] : registry->unreadable())
        spdlog::warn("checkpoint {} cannot be read and is not restored: {}", registry->storage().describe(dir), reason);
      d.firstCheckpointId = std::max(d.firstCheckpointId, registry->highestCheckpointIdSeen() + 1);
      // Also above every id an earlier attempt triggered, even one that never wrote a
      // file: a checkpoint id names one checkpoint for the whole life of the job.
      d.firstCheckpointId = std::max(d.firstCheckpointId, highestTriggeredId_ + 1);
      auto ids = registry->checkpointIds();
      if (!ids.empty()) {
        d.directory = (fs::path(jobDir_) / state::checkpointDirName(ids.back())).string();
        return d;
      }
      // Its own checkpoints exist but none can be read: restoring anything older would
      // silently lose their progress.
      if (!registry->unreadable().empty())
        return state::Status::Corruption("none of the job's checkpoints in " + jobDir_ +
                                         " can be read (see the warnings above); restore one by hand with -s, or "
                                         "start without state");
    }
  }
  if (initial_) {
    d.directory = initial_->directory;
    d.initial = true;
    if (attempt > 1) spdlog::info("the job has no complete checkpoint of its own yet: restoring {} again", initial_->directory);
  }
  return d;
}

std::vector<std::string> JobSupervisor::workerArguments(int attempt, const RestoreDecision& d) const {
  std::vector<std::string> a = {"jobhost", "__worker", "--job-id", jobId_, "--attempt", std::to_string(attempt),
                                "--first-checkpoint-id", std::to_string(d.firstCheckpointId)};
  if (o_.jobClass) a.insert(a.end(), {"-c", *o_.jobClass});
  if (o_.parallelism) a.insert(a.end(), {"-p", std::to_string(*o_.parallelism)});
  for (const auto& def : o_.defines) a.insert(a.end(), {"-D", def});
  if (o_.configFile) a.insert(a.end(), {"--config", *o_.configFile});
  if (d.directory) a.insert(a.end(), {"--restore-from", *d.directory});
  if (d.initial) a.push_back("--restore-initial");
  if (o_.allowNonRestoredState) a.push_back("-n");
  if (o_.logFormat != "text") a.insert(a.end(), {"--log-format", o_.logFormat});
  a.push_back(o_.pluginPath);
  a.insert(a.end(), o_.jobArgs.begin(), o_.jobArgs.end());
  return a;
}

namespace {
int64_t steadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::optional<JobSupervisor::WorkerEnd> JobSupervisor::readWorker(int fd) {
  std::optional<WorkerEnd> ended;
  for (;;) {
    try {
      capnp::StreamFdMessageReader reader(fd);
      auto m = reader.getRoot<wire::FromWorker>();
      {
        std::lock_guard lock(mu_);
        lastHeardMs_ = steadyNowMs();
      }
      switch (m.which()) {
        case wire::FromWorker::RUNNING: {
          {
            std::lock_guard lock(mu_);
            info_.runningSinceMs = wallClockMs();
            if (attemptRestores_) info_.lastRestoreMs = info_.runningSinceMs;  // restored by now
            // A dependency's outage ends with a checkpoint of the new attempt (below), not
            // when it runs: a job whose own state fills the disk would otherwise go round
            // restore, fill, fail, 0.5 s, forever, never backing off.
            if (restoreOutage_.active()) {
              restoreOutage_.recovered();
              info_.storeUnavailableSinceMs = 0;
              info_.checkpointStoreError.clear();
            }
          }
          setState(JobState::kRunning);
          ready_.signalReady(jobId_);
          break;
        }
        case wire::FromWorker::STATS: {
          auto s = m.getStats();
          std::vector<TaskMetricsSample> tasks;
          for (auto t : s.getTasks()) {
            TaskMetricsSample x;
            x.name = t.getName();
            x.subtask = t.getSubtask();
            x.parallelism = t.getParallelism();
            x.recordsIn = t.getRecordsIn();
            x.recordsOut = t.getRecordsOut();
            x.idleNanos = t.getIdleNanos();
            x.backPressuredNanos = t.getBackPressuredNanos();
            x.inputWatermark = t.getInputWatermark();
            for (auto b : t.getBackends()) x.backends.push_back({b.getOperatorUid(), b.getBackend(), b.getEntries()});
            tasks.push_back(std::move(x));
          }
          const int64_t at = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
          std::lock_guard lock(mu_);
          info_.tasks = taskRates_.add(at, std::move(tasks));
          info_.recordsInPerSecond = info_.recordsOutPerSecond = 0;
          for (const auto& t : info_.tasks) {
            info_.recordsInPerSecond += t.recordsInPerSecond;
            info_.recordsOutPerSecond += t.recordsOutPerSecond;
          }
          info_.recordsIn = s.getRecordsIn();
          info_.recordsOut = s.getRecordsOut();
          if (s.getLastCheckpointId()) {
            info_.lastCheckpointId = s.getLastCheckpointId();
            info_.lastCheckpointPath = s.getLastCheckpointPath();
          }
          attemptOutages_ = s.getStoreOutages();
          attemptDeclined_ = s.getCheckpointsDeclinedUnavailable();
          info_.checkpointStoreOutages = endedOutages_ + attemptOutages_ + restoreOutagesSeen_;
          info_.checkpointsDeclinedUnavailable = endedDeclined_ + attemptDeclined_;
          info_.storeUnavailableSinceMs = s.getStoreUnavailableSinceMs();
          info_.checkpointStoreError = s.getStoreError();
          break;
        }
        case wire::FromWorker::SAVEPOINT_DONE: {
          auto d = m.getSavepointDone();
          std::lock_guard lock(mu_);
          bool stop = stopRequests_.erase(d.getRequestId()) > 0;
          bool ok = d.getError().size() == 0;
          // Before the worker reports its end: it ends the job after a stop savepoint.
          if (stop && ok) {
            stopped_ = true;
            endSavepoint_ = d.getPath().cStr();
            cancelRequested_ = true;
            info_.state = JobState::kCancelling;
          }
          if (abandoned_.erase(d.getRequestId())) break;
          if (!ok)
            savepoints_.emplace(d.getRequestId(), state::Status::IOError(d.getError().cStr()));
          else
            savepoints_.emplace(d.getRequestId(), std::string(d.getPath().cStr()));
          changed_.notify_all();
          break;
        }
        case wire::FromWorker::CHECKPOINT_EVENT:
          onCheckpointRecord(readCheckpointRecord(m.getCheckpointEvent()));
          break;
        case wire::FromWorker::ENDED: {
          auto e = m.getEnded();
          ended = WorkerEnd{static_cast<int>(e.getKind()), e.getMessage(), e.getOperatorName(), e.getSubtask(),
                            e.getRestoreFailure(), e.getExitCode(), e.getStoreUnavailable(),
                            e.getDependencyUnavailable()};
          break;
        }
      }
    } catch (const kj::Exception&) {
      return ended;  // EOF: the worker exited (or died)
    }
  }
}

void JobSupervisor::discardCheckpointsOnCancel() {
  // `_metadata` of every checkpoint first, then what is left, then the directory.
  auto storage = state::openStorage(jobDir_);
  auto registry = storage.ok() ? state::SnapshotRegistry::load(std::move(*storage))
                               : state::Result<state::SnapshotRegistry>(storage.status());
  state::Status s = registry.status();
  if (registry.ok()) {
    for (uint64_t id : registry->checkpointIds()) {
      state::Status d = registry->discard(state::checkpointDirName(id));
      if (!d.ok() && s.ok()) s = d;
    }
    if (s.ok() && registry->unreadable().empty()) {
      auto garbage = registry->findGarbage();
      if (garbage.ok()) s = registry->collect(*garbage);
    }
  }
  std::error_code ec;
  if (s.ok() && registry.ok() && registry->unreadable().empty()) {
    // What is left are empty directories and the lock file; anything else (a savepoint a
    // user took into this directory, say) is not a checkpoint and stays, and so does the
    // directory then.
    if (state::isObjectStoreUri(jobDir_)) {
      jobLock_.reset();  // deletes the lease object; an object store has no directories left over
    } else {
      ec = removeJobDirectoryLayout();
      if (ec == std::errc::directory_not_empty) {
        spdlog::info("kept {}: it holds files that are not checkpoints", jobDir_);
        ec.clear();
      }
    }
  }
  if (!s.ok() || ec)
    spdlog::warn("could not delete all checkpoints of cancelled job {} in {}: {}", jobId_, jobDir_,
                 !s.ok() ? s.message() : ec.message());
  else
    spdlog::info("deleted the checkpoints of cancelled job {} (DELETE_ON_CANCELLATION)", jobId_);
}

std::error_code JobSupervisor::removeJobDirectoryLayout() {
  const fs::path dir(jobDir_);
  std::error_code ec;
  std::vector<fs::path> layout;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ignored;
    if (it->is_directory(ignored) &&
        (name == state::kSharedDirName || name == state::kTaskOwnedDirName || state::parseCheckpointDirName(name)))
      layout.push_back(it->path());
  }
  for (const auto& d : layout) fs::remove(d, ec);  // only if empty
  // The lock file goes while this run still holds the lock (JobDirectoryLock::acquire
  // counts a lock only if the path still names the locked file), then the lock.
  fs::remove(dir / state::kLockFileName, ec);
  ec.clear();
  fs::remove(dir, ec);  // only if empty
  jobLock_.reset();
  return ec;
}

void JobSupervisor::removeUnusedJobDirectory() {
  if (!createdJobDir_ || jobDir_.empty() || !jobLock_) return;  // not made by this run, or not held
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(jobDir_), ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path name = it->path().filename();
    std::error_code ignored;
    const bool emptySubdirectory = (name == state::kSharedDirName || name == state::kTaskOwnedDirName) &&
                                   it->is_directory(ignored) && fs::is_empty(it->path(), ignored);
    if (name != state::kLockFileName && !emptySubdirectory) return;  // written into: not ours to remove
  }
  if (!ec && !removeJobDirectoryLayout()) spdlog::debug("removed the unused job directory {}", jobDir_);
}

int JobSupervisor::run() {
  ran_ = true;
  const std::string& className = setup_.className;
  bool checkpointing = !jobDir_.empty();
  spdlog::info("job {} ({}) starting: backend {}{}, parallelism {}, checkpoints {}", jobId_, className,
               state::backendTypeName(setup_.backend), setup_.incremental ? " (incremental)" : "", setup_.parallelism,
               checkpointing ? "every " + formatDuration(setup_.interval) + " to " + jobDir_ : "off");
  int exitCode = kExitOk;
  bool cancelled = false;
  for (int attempt = 1;; ++attempt) {
    // Nothing runs now: what the previous attempt left is collected and the restore
    // source decided. If the job's own checkpoints cannot be read, the attempt fails (and
    // the restart strategy decides) rather than falling back to an older snapshot.
    auto restore = decideRestore(attempt);
    std::string message, where;
    // Earlier attempts' working directories go (a crash loop must not fill the disk).
    state::Status workDir = workDir_ ? workDir_->beginAttempt(attempt).status() : state::Status::OK();
    if (!restore.ok() && isStoreUnavailability(restore.status())) {
      // The store does not answer: wait for it; the restart strategy does not count this.
      if (!waitOut(Outage::kCheckpointStore, restore.status(),
                   "reading the checkpoints of job " + jobId_ + " before attempt " + std::to_string(attempt))) {
        setState(JobState::kCanceled);
        cancelled = true;
        exitCode = interruptedBySignal() ? kExitInterrupted : kExitOk;
        break;
      }
      continue;
    }
    if (!restore.ok()) {
      message = restore.status().message();
    } else if (!workDir.ok()) {
      message = workDir.message();
    } else {
      WorkerProcess w;
      try {
        WorkerSpawn spawn;
        spawn.args = workerArguments(attempt, *restore);
        spawn.inheritFds = {jobLock_ ? jobLock_->fd() : -1, workDir_ ? workDir_->lockFd() : -1};
        spawn.pluginFd = setup_.plugin->pinnedFd();
        spawn.pluginDigest = setup_.plugin->contentDigest();
        w = spawnWorkerProcess(spawn);
      } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        exitCode = kExitJobFailed;
        break;
      }
      attemptRestores_ = restore->directory.has_value();
      setLogJob(jobId_, attempt);
      {
        std::lock_guard lock(mu_);
        workerChannel_ = w.channel;
        attempt_ = attempt;
        taskRates_.reset();
        sendLeaseLocked();  // before it can publish anything (an object store's lease)
        if (cancelRequested_) sendLocked([](wire::ToWorker::Builder b) { b.setCancel(); });
      }
      // The heartbeat watchdog: a running worker sends its statistics every 0.5 s from a
      // thread of its own; one that sends nothing for heartbeat.timeout is stopped
      // (SIGSTOP), hung in the kernel or wedged as a whole, and would otherwise stay so
      // while /healthz says RUNNING. Killed, it fails the attempt like any crash. (Only
      // while RUNNING: the restore and the operators' open() have time-outs of their own.)
      bool attemptOver = false;
      std::thread watchdog([this, &attemptOver, pid = w.pid] {
        std::unique_lock lock(mu_);
        lastHeardMs_ = steadyNowMs();
        while (!attemptOver) {
          changed_.wait_for(lock, std::chrono::milliseconds(250));
          // runningSinceMs: this attempt's worker said RUNNING (reset when an attempt ends).
          if (attemptOver || info_.state != JobState::kRunning || info_.runningSinceMs == 0) continue;
          const int64_t silent = steadyNowMs() - lastHeardMs_;
          if (silent < setup_.heartbeatTimeout.count()) continue;
          watchdogKill_ = "the worker process (pid " + std::to_string(pid) + ") sent nothing for " +
                          formatDuration(std::chrono::milliseconds(silent)) +
                          " (heartbeat.timeout " + formatDuration(setup_.heartbeatTimeout) +
                          "): stopped or hung, so it was killed";
          spdlog::error("job {}: {}", jobId_, watchdogKill_);
          ::kill(pid, SIGKILL);
          break;
        }
      });
      auto ended = readWorker(w.channel);
      {
        std::lock_guard lock(mu_);
        attemptOver = true;
        changed_.notify_all();
      }
      watchdog.join();
      int status = 0;
      waitpid(w.pid, &status, 0);
      std::string crashReport;
      {
        char buf[1024];
        ssize_t n;
        while ((n = ::read(w.crash, buf, sizeof buf)) > 0) crashReport.append(buf, static_cast<size_t>(n));
      }
      bool requested, stopped;
      int64_t ranSinceMs;  // 0: it never ran
      {
        std::lock_guard lock(mu_);
        workerChannel_ = -1;
        ranSinceMs = info_.runningSinceMs;
        info_.runningSinceMs = 0;
        failInProgressLocked("the job attempt ended before it completed");
        changed_.notify_all();
        requested = cancelRequested_;
        stopped = stopped_;
        endedOutages_ += attemptOutages_;
        endedDeclined_ += attemptDeclined_;
        attemptOutages_ = attemptDeclined_ = 0;
        if (restoreOutage_.active() == false) {
          info_.storeUnavailableSinceMs = 0;  // the next attempt reports its own
          info_.checkpointStoreError.clear();
        }
      }
      close(w.channel);
      close(w.crash);
      // Before its files go: whether the disk under the state was full when it ended.
      const bool diskWasFull = workDir_ && localDiskFull(workDir_->path());
      // A worker that died (kill -9, OOM) could not remove its working directory.
      std::error_code rmError;
      fs::remove_all(attemptLocalDir(setup_, jobId_, attempt), rmError);

      if (ended) {
        auto kind = static_cast<wire::EndKind>(ended->kind);
        if (kind == wire::EndKind::FINISHED) {
          spdlog::info("job {} ({}) finished", jobId_, className);
          setState(JobState::kFinished);
          break;
        }
        if (kind == wire::EndKind::SETUP_FAILED) {  // the worker printed why
          exitCode = ended->exitCode;
          setState(JobState::kFailed);
          break;
        }
        bool lost;
        std::string lostWhy;
        {
          std::lock_guard lock(mu_);
          lost = leaseLost_;
          lostWhy = lease_.why;
        }
        bool again;
        {
          std::lock_guard lock(mu_);
          again = restartFromNewest_ && !cancelRequested_;
          restartFromNewest_ = false;
        }
        if (again && kind == wire::EndKind::CANCELLED) {
          spdlog::info("job {}: restarting from the newest checkpoint in {} after acquiring its lease again", jobId_,
                       jobDir_);
          continue;
        }
        if (lost) {
          spdlog::error("job {} stopped: {}; another instance runs it now (this one wrote nothing after its lease "
                        "could not be renewed)",
                        jobId_, lostWhy);
          setState(JobState::kFailed);
          exitCode = kExitJobFailed;
          break;
        }
        if (kind == wire::EndKind::CANCELLED || requested) {
          if (interruptedBySignal()) {
            spdlog::info("job {} stopped by signal", jobId_);
            exitCode = kExitInterrupted;
          } else {
            spdlog::info("job {} {}", jobId_, stopped ? "stopped with a savepoint" : "cancelled");
          }
          setState(JobState::kCanceled);
          cancelled = true;
          break;
        }
        message = ended->message;
        where = ended->operatorName.empty() ? "" : "operator '" + ended->operatorName + "' " + ended->subtask + ": ";
        if (ended->dependencyUnavailable) {
          // A database or broker the job writes to or reads from does not answer: wait,
          // then restore the latest checkpoint (the sinks' recovery commits or rolls back
          // what was pending). Not counted by the restart strategy.
          // (Without checkpoints: an attempt that ran for a minute ended the outage too.)
          if (ranSinceMs != 0 && wallClockMs() - ranSinceMs > 60'000) dependencyOutage_.recovered();
          if (!waitOut(Outage::kDependency, waitedOutStatus(where + message), "attempt " + std::to_string(attempt))) {
            setState(JobState::kCanceled);
            cancelled = true;
            exitCode = interruptedBySignal() ? kExitInterrupted : kExitOk;
            break;
          }
          continue;
        }
        if (ended->storeUnavailable) {
          // It could not restore because the store does not answer (or the disk is full):
          // wait for it; the restart strategy does not count this.
          if (!waitOut(Outage::kCheckpointStore, waitedOutStatus(message), "the restore of attempt " + std::to_string(attempt))) {
            setState(JobState::kCanceled);
            cancelled = true;
            exitCode = interruptedBySignal() ? kExitInterrupted : kExitOk;
            break;
          }
          continue;
        }
        if (ended->restoreFailure) {
          if (ended->exitCode == kExitUsage) spdlog::error("job {} cannot run as configured, not retrying: {}", jobId_, message);
          else spdlog::error("job {} failed while restoring state, not retrying: {}", jobId_, message);
          exitCode = ended->exitCode ? ended->exitCode : kExitIncompatible;
          setState(JobState::kFailed);
          break;
        }
      } else {
        // No report: the worker died.
        if (WIFSIGNALED(status)) message = "the worker process was killed by " + describeSignal(WTERMSIG(status));
        else message = "the worker process exited with code " + std::to_string(WEXITSTATUS(status)) + " without a report";
        {
          std::lock_guard lock(mu_);
          if (!watchdogKill_.empty()) message = std::move(watchdogKill_);
          watchdogKill_.clear();
        }
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
          exitCode = interruptedBySignal() ? kExitInterrupted : kExitOk;
          break;
        }
        // RocksDB 7.8 (Debian 12) can abort instead of returning an error when a write
        // meets a full disk (an assertion in WritableFileWriter after a failed append): a
        // worker that aborted (or met SIGBUS) while the disk under its state was full met
        // the full disk, and that is waited out as the backend's DependencyUnavailable is
        // (issue 31). A kill -9 or the OOM killer stays a failure for the restart strategy.
        if (diskWasFull && WIFSIGNALED(status) && (WTERMSIG(status) == SIGABRT || WTERMSIG(status) == SIGBUS)) {
          if (!waitOut(Outage::kDependency,
                       state::Status::NoSpace(where + message + ", with the local disk of its state (" +
                                              workDir_->path() + ") full: No space left on device"),
                       "attempt " + std::to_string(attempt))) {
            setState(JobState::kCanceled);
            cancelled = true;
            exitCode = interruptedBySignal() ? kExitInterrupted : kExitOk;
            break;
          }
          continue;
        }
      }
    }
    {
      std::lock_guard lock(mu_);
      info_.lastFailure = where + message;
      info_.lastFailureMs = wallClockMs();
    }
    std::chrono::milliseconds delay{0};
    if (!restart_->onFailure(&delay)) {
      setState(JobState::kFailed);
      spdlog::error("job {} failed: Recovery is suppressed by {}; root cause: {}{}", jobId_, restart_->describe(), where,
                    message);
      exitCode = kExitJobFailed;
      break;
    }
    spdlog::warn("job {} attempt {} failed: {}{}; restarting in {} ({})", jobId_, attempt, where, message,
                 formatDuration(delay), restart_->describe());
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
        exitCode = interruptedBySignal() ? kExitInterrupted : kExitOk;
        break;
      }
    }
  }
  if (workDir_) workDir_->remove();
  if (checkpointing) {
    if (cancelled && setup_.deleteOnCancel) discardCheckpointsOnCancel();
    else if (exitCode != kExitOk) removeUnusedJobDirectory();
    std::lock_guard lock(mu_);
    const bool checkpointsKept = !(cancelled && setup_.deleteOnCancel);
    if (!endSavepoint_.empty() && (!o_.jobId || !checkpointsKept))
      // Newer than every checkpoint. (A stable --job-id whose directory holds checkpoints
      // continues from the newest with --restore latest, below: it refuses -s.)
      spdlog::info("{} with savepoint {} (continue with: {})", stopped_ ? "stopped" : "cancelled", endSavepoint_,
                   shellCommand({"jobhost", "run", "-s", endSavepoint_, "-c", className, o_.pluginPath}));
    else if (checkpointsKept && info_.lastCheckpointId && o_.jobId)
      spdlog::info("latest checkpoint: {} (continue with: {})", info_.lastCheckpointPath,
                   shellCommand({"jobhost", "run", "--job-id", *o_.jobId, "--restore", "latest", "-c", className,
                                 o_.pluginPath}));
    else if (checkpointsKept && info_.lastCheckpointId)
      spdlog::info("latest checkpoint: {} (restore with: {})", info_.lastCheckpointPath,
                   shellCommand({"jobhost", "run", "-s", info_.lastCheckpointPath, "-c", className, o_.pluginPath}));
  }
  return exitCode;
}

}  // namespace jobhost::host
