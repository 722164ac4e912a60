// host/job_supervisor.h — the supervisor of `jobhost run`: owns the job directory and runs
// the job's attempts in worker processes (job_worker.h) under the restart strategy.
//
// It is the one place that decides what each attempt restores, and it owns the files:
//  - The job directory is locked (job_directory_lock.h) for the life of the job; workers
//    share the lock. With `--restore-mode claim` the claimed snapshot's directory is
//    locked too, until the claimed snapshot has been disposed of.
//  - The restore source is decided once per attempt, here: attempt 1 restores the -s
//    snapshot, resolved and preflighted once by the caller; every later attempt restores
//    the job's own latest complete checkpoint if it has one, else that same snapshot.
//  - Before every attempt (no worker running) it rebuilds the job directory's registry
//    (jobhost/state/snapshot_registry.h) and collects what the previous attempt left:
//    checkpoints that never completed, shared files nothing references, temporary files.
//  - Claim: once the job's first own checkpoint is complete, the claimed snapshot is
//    discarded through its directory's registry (shared files other snapshots there still
//    reference stay).
//  - DELETE_ON_CANCELLATION: a cancelled job's checkpoints are discarded through the
//    registry (`_metadata` first), then the directory.
//
// The control endpoint (control/control_server.h: `jobhost list`, savepoint, cancel, stop
// and the dashboard reach the job through it) and the signal handler talk to the
// supervisor through JobControl (control/job_control.h), which it implements: they know
// that interface only, never this class.
//
// Thread-safety: run() is called once, on the main thread. The JobControl methods are
// thread-safe (the control endpoint and the signal handler call them on their threads).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/checkpoint_history.h"
#include "checkpoint/job_directory_lock.h"
#include "checkpoint/store_outage.h"
#include "cli/detach.h"
#include "control/job_control.h"
#include "job_setup.h"
#include "job_work_directory.h"
#include "metrics/task_rates.h"
#include "run_options.h"
#include "runtime/restart_strategy.h"

namespace jobhost::host {

class JobSupervisor : public JobControl {
 public:
  /// `initial`: the -s snapshot, resolved and preflighted by the caller (or nullopt).
  JobSupervisor(const RunOptions& options, JobSetup& setup, std::unique_ptr<RestartStrategy> restart,
                std::optional<ResolvedSnapshot> initial);
  ~JobSupervisor();

  /// Creates the job directory and takes the locks. On failure prints one line to stderr
  /// and returns the exit code (kExitUsage: a directory is in use or cannot be created).
  int prepare();
  /// Runs attempts until the job finishes, fails for good or is cancelled; the exit code.
  int run();

  const std::string& jobId() const { return jobId_; }

  // JobControl
  JobStatusInfo status() override;
  std::vector<CheckpointRecord> checkpointHistory() override;
  /// Built before the control endpoint starts; read-only since.
  std::map<std::string, std::string> configuration() override;
  state::Result<std::string> savepoint(const std::optional<std::string>& targetDir,
                                       state::SnapshotFormat format) override;
  /// With a savepoint: the job is cancelled only once it succeeded.
  state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& targetDir) override;
  /// Stop-with-savepoint: the sources emit nothing after the savepoint's barrier and the
  /// job ends once the savepoint is complete (if it fails, the job keeps running).
  state::Result<std::string> stop(const std::optional<std::string>& targetDir, bool drain) override;

 private:
  /// A savepoint of the running attempt into `targetDir` (default state.savepoints.dir).
  /// `stop`: stop-with-savepoint — the job ends once it is complete, with nothing emitted
  /// after it; `drain` (with stop): the sources send the maximum watermark first.
  state::Result<std::string> takeSavepoint(const std::optional<std::string>& targetDir, state::SnapshotFormat format,
                                           bool stop, bool drain = false);
  /// Cancels the job (the running attempt, or the next restart).
  void requestCancel();
  /// What an attempt restores, decided before it starts.
  struct RestoreDecision {
    std::optional<std::string> directory;
    bool initial = false;
    uint64_t firstCheckpointId = 1;
  };
  struct WorkerEnd {
    int kind = 0;  // wire::EndKind
    std::string message, operatorName, subtask;
    bool restoreFailure = false;
    int exitCode = 0;
    bool storeUnavailable = false;  // it could not restore: the store did not answer
    bool dependencyUnavailable = false;  // user code threw DependencyUnavailable
  };
  /// Collects what the previous attempt left and decides what this one restores. An
  /// error if the job directory cannot be read (with the storage's code: Unavailable is
  /// waited out), or holds checkpoints none of which can be.
  state::Result<RestoreDecision> decideRestore(int attempt);
  std::vector<std::string> workerArguments(int attempt, const RestoreDecision& d) const;
  /// Reads the worker's messages until it closes the channel; returns its end report.
  std::optional<WorkerEnd> readWorker(int fd);
  void onCheckpointRecord(const CheckpointRecord& r);  // called without mu_
  void disposeClaimedSnapshot();
  void discardCheckpointsOnCancel();
  /// Removes the local job directory prepare() created if the run wrote nothing into it
  /// (a job refused or failed before its first checkpoint): it would only be clutter
  /// under state.checkpoints.dir. Anything else in it keeps it as it is.
  void removeUnusedJobDirectory();
  /// What both removals share: the empty layout directories of the local job directory
  /// (shared/, taskowned/, chk-<n>), then, while the lock is still held, the lock file
  /// and the directory if it is empty; then the lock. The error of removing the directory
  /// (directory_not_empty: something else is in it).
  std::error_code removeJobDirectoryLayout();
  void setState(JobState s);
  template <class Fill>
  void sendLocked(Fill fill);
  void recordCheckpointLocked(const CheckpointRecord& r);
  /// The checkpoint figures of info_ from history_ (after every change of it).
  void updateCheckpointStatsLocked();
  void failInProgressLocked(const std::string& reason);
  /// What an attempt met and waits out (not counted by the restart strategy).
  enum class Outage {
    kCheckpointStore,  // a restore could not read the store (or the disk under it was full)
    kDependency,       // user code threw DependencyUnavailable: a database, broker or full disk
  };
  /// Waits with that outage's backoff after `what` failed with `s`, in RESTARTING; the
  /// status shows it (the store's outage as "unavailable since", a dependency's as the
  /// last failure). False if the job was cancelled meanwhile.
  bool waitOut(Outage outage, const state::Status& s, const std::string& what);
  /// The job directory's lease changed (JobDirectoryLock::onLeaseChange, its thread).
  void onLease(const JobDirectoryLock::LeaseState& l);
  void sendLeaseLocked();

  const RunOptions& o_;
  JobSetup& setup_;
  std::unique_ptr<RestartStrategy> restart_;
  std::optional<ResolvedSnapshot> initial_;
  std::string jobId_;
  std::string jobDir_;  // empty when checkpointing is off
  bool createdJobDir_ = false;  // prepare() made jobDir_ (local storage): it did not exist
  bool ran_ = false;            // run() was called (it removes an unused jobDir_ itself)
  std::optional<JobDirectoryLock> jobLock_;
  std::optional<JobDirectoryLock> claimLock_;  // until the claimed snapshot is disposed of
  std::optional<JobWorkDirectory> workDir_;    // rocksdb only: <state.local.dir>/<jobId>
  bool claimDisposed_ = false;                 // main thread only
  uint64_t highestTriggeredId_ = 0;            // main thread only: of any attempt's records
  StoreOutage restoreOutage_;                  // main thread only: restores waiting for the store
  StoreOutage dependencyOutage_{std::chrono::milliseconds(500), std::chrono::seconds(30),
                                "the database or broker"};  // main thread only: a database or broker that does not answer

  std::mutex mu_;
  std::condition_variable changed_;
  JobStatusInfo info_;                 // guarded by mu_
  int workerChannel_ = -1;             // guarded by mu_
  int attempt_ = 0;                    // guarded by mu_
  uint64_t nextRequest_ = 0;           // guarded by mu_
  std::map<uint64_t, state::Result<std::string>> savepoints_;  // guarded by mu_
  std::set<uint64_t> abandoned_;       // guarded by mu_: requests whose caller gave up
  std::set<uint64_t> stopRequests_;    // guarded by mu_: savepoint requests that stop the job
  bool cancelRequested_ = false;       // guarded by mu_
  bool stopped_ = false;               // guarded by mu_
  /// When the worker of the attempt last sent anything (steady clock, ms; mu_), and why
  /// the heartbeat watchdog killed it ("" if it did not; mu_).
  int64_t lastHeardMs_ = 0;
  std::string watchdogKill_;
  /// The savepoint of `stop` or `cancel -s`, once taken: what to continue from (mu_).
  std::string endSavepoint_;
  CheckpointHistory history_;          // guarded by mu_
  TaskRates taskRates_;                // guarded by mu_: the running attempt's task samples
  bool attemptRestores_ = false;
  JobDirectoryLock::LeaseState lease_;  // guarded by mu_
  bool leaseLost_ = false;              // guarded by mu_: another instance took the job directory over
  bool restartFromNewest_ = false;      // guarded by mu_: the lease was acquired again after it was gone       // main thread: the running attempt restores a snapshot
  /// Store counters of the attempts that ended (the running one's come with its stats);
  /// guarded by mu_.
  uint64_t endedOutages_ = 0, endedDeclined_ = 0;
  uint64_t attemptOutages_ = 0, attemptDeclined_ = 0;  // guarded by mu_: the running attempt's
  uint64_t restoreOutagesSeen_ = 0;    // guarded by mu_: outages met while restoring
  DetachHandshake ready_;              // main thread: `jobhost run -d` waits for RUNNING
};

}  // namespace jobhost::host
