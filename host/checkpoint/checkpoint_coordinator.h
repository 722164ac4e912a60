// host/checkpoint/checkpoint_coordinator.h — triggers checkpoints, collects the tasks'
// acknowledgements, publishes `_metadata`, keeps `num-retained` completed checkpoints.
//
// Layout under the job's storage root: see jobhost/state/checkpoint_layout.h.
//
// A checkpoint exists only once chk-<n>/_metadata is durably published (every data file
// was fsynced and published before). Every deletion — subsumption of the oldest retained
// checkpoint, the files of an aborted one — goes through the job directory's
// SnapshotRegistry (jobhost/state/snapshot_registry.h), which deletes `_metadata` first
// and a shared file only when no retained checkpoint references it. An aborted
// checkpoint's asynchronous parts may still be writing when it is aborted; each one that
// reports afterwards (a late acknowledge or decline) triggers another clean-up of what it
// wrote, so an aborted chk-<n> is never left behind or recreated.
//
// The coordinator runs in the worker process, which shares the job directory's lock with
// its supervisor; the supervisor collects what a previous attempt left before starting
// the next one (host/job_supervisor.cc).
//
// An unavailable store (runtime/checkpoint_failure.h: kStoreUnavailable — Unavailable or
// NoSpace at any step) never fails the job. The checkpoint that met it is declined (not
// counted against tolerable-failed-checkpoints), an outage begins (logged once with
// since when; storeHealth() reports it), and from then on every interval asks the store
// once (CheckpointStorage::probe) instead of triggering: each interval it does not answer
// counts as one more declined checkpoint. The first interval it answers triggers a
// checkpoint at once, so checkpoints complete again within about two intervals of the
// store coming back; the outage ends when one completes. Clean-ups of what declined
// checkpoints wrote wait until then (they would only meet the outage too).
//
// Deletions (subsumed checkpoints, what aborted ones wrote) run on a cleaner thread of
// their own, in order, as Flink's CheckpointsCleaner does: a store that stops answering in
// the middle of one (each request retried for ~10 s) holds up neither the trigger loop nor
// acknowledgements, declines, status or metrics. A deletion whose turn comes while this
// process is fenced (setPublishDeadline) is skipped: another instance may own the directory
// by then. stop() lets the cleaner finish what is queued while the store answers, and drops
// it during an outage (also one only a deletion met) (`jobhost gc` and the next
// attempt's clean-up remove what is left; a subsumed checkpoint left complete is retained
// one more time, never lost).
//
// Thread-safety: thread-safe; acknowledgements arrive on the uploader thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "checkpoint/checkpoint_history.h"
#include "checkpoint/checkpoint_record.h"
#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/snapshot_registry.h"
#include "runtime/job_execution.h"

namespace jobhost::host {

struct CoordinatorOptions {
  std::chrono::milliseconds interval{0};  // 0: no periodic checkpoints
  int numRetained = 1;
  /// Consecutive failed checkpoints tolerated; one more fails the job
  /// (execution.checkpointing.tolerable-failed-checkpoints). Savepoints do not count.
  int tolerableFailures = 0;
  /// A checkpoint not complete after this long is aborted (execution.checkpointing.timeout).
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::string storageRootDescription;  // for messages, e.g. /abs/checkpoints/<jobId>
  /// The checkpoints go to a local file system: write access lost there while the job
  /// runs is an outage (see failureReasonFor). On an object store a 403 is not.
  bool localStorage = true;
  /// How many aborted checkpoint ids are remembered for their late parts' clean-up (a part
  /// reports late once its upload stopped); 1024 is over 15 minutes of aborts at a 1 s
  /// interval. Aborts during a store outage are kept apart until it ends, however many.
  size_t abortedIdsRemembered = 1024;
};

class CheckpointCoordinator : public CheckpointListener {
 public:
  /// `registry` covers the job's checkpoint directory, loaded by the caller; its complete
  /// checkpoints are the retained ones (the oldest beyond num-retained are discarded at
  /// once). `templ` carries the job-level fields every `_metadata` repeats (job id,
  /// class, plugin, backend, ...). Checkpoint ids continue from the larger of
  /// `firstCheckpointId` and one past every chk-<n> the registry has seen.
  CheckpointCoordinator(CoordinatorOptions options, state::SnapshotRegistry registry, state::CheckpointMetadata templ,
                        uint64_t firstCheckpointId);
  ~CheckpointCoordinator() override;

  /// Routes triggers to `execution` (one attempt). detach() before destroying it.
  void attach(JobExecution* execution);
  void detach();
  /// Starts the periodic trigger thread (no-op if the interval is 0).
  void start();
  void stop();
  /// Triggers one checkpoint now; false if one is pending or no job runs.
  bool triggerCheckpoint();
  /// Takes a savepoint into a new directory `savepoint-<short job id>-<random>` under
  /// `targetDir` and blocks until it is complete (returns its absolute path) or failed (the
  /// reason; the job keeps running). Waits for a checkpoint in flight to finish first.
  /// Savepoints are self-contained, never retained, subsumed or deleted by the job.
  /// `stopSources` (jobhost stop): the sources emit nothing after the savepoint's barrier
  /// and stay suspended; they resume if the savepoint fails. The caller ends the job once
  /// it succeeded.
  state::Result<std::string> triggerSavepoint(const std::string& targetDir, state::SnapshotFormat format,
                                              std::chrono::milliseconds timeout = std::chrono::minutes(10),
                                              bool stopSources = false, bool drain = false);
  /// Latest completed checkpoint of this job (retained), if any.
  std::optional<state::CheckpointMetadata> latestCompleted() const;
  std::string pathOf(uint64_t checkpointId) const;
  state::CheckpointStorage& storage() { return *storage_; }
  /// Complete checkpoints retained now, oldest first (for tests).
  std::vector<uint64_t> retainedIds() const;
  uint64_t completedCount() const;
  /// Called with every completed checkpoint (for tests and status).
  void setOnComplete(std::function<void(const state::CheckpointMetadata&)> fn);

  /// The checkpoint store as this coordinator sees it (status, metrics, the dashboard).
  struct StoreHealth {
    int64_t unavailableSinceMs = 0;  // epoch ms the current outage began; 0: the store answers
    std::string lastError;           // the store's last error in the current outage
    uint64_t outages = 0;            // outages so far
    uint64_t declined = 0;           // checkpoints declined because the store was unavailable
  };
  StoreHealth storeHealth() const;

  /// Fencing (JobDirectoryLock::LeaseState, issue 31 item 3): checkpoints are triggered
  /// and their _metadata published only while monotonicNanos() < untilNanos; after it they
  /// are declined as the store being unavailable (`why` says what), and nothing of an
  /// aborted one is deleted until publishing may go on. Default: no fence (a local
  /// directory's flock cannot be lost). Thread-safe.
  void setPublishDeadline(int64_t untilNanos, std::string why);

  /// The newest records kept in the history (checkpoints and savepoints of this attempt,
  /// in progress, completed, failed or subsumed; plus the checkpoints recover() found).
  static constexpr size_t kHistoryLimit = CheckpointHistory::kLimit;
  /// The history, oldest first (at most kHistoryLimit records).
  std::vector<CheckpointRecord> history() const;
  /// Called (under the coordinator's lock: do not call back into it) with a record each
  /// time one is added or changes: triggered, completed, failed, subsumed.
  void setOnHistoryChange(std::function<void(const CheckpointRecord&)> fn);

  void acknowledge(uint64_t checkpointId, TaskSnapshot snapshot) override;
  /// Wakes the trigger loop: the next checkpoint is triggered now, not an interval later.
  void finalCheckpointWanted() override;
  void decline(uint64_t checkpointId, CheckpointFailureReason reason, const state::Status& detail) override;

 private:
  struct SavepointRequest {
    std::shared_ptr<state::CheckpointStorage> storage;  // rooted at the target directory
    std::string dir;                                    // savepoint-<...>
    state::SnapshotFormat format = state::SnapshotFormat::kCanonical;
    std::optional<state::Result<std::string>> result;   // set when done
  };
  struct Pending {
    uint64_t id = 0;
    SavepointRequest* savepoint = nullptr;  // null for checkpoints; owned by the waiting caller
    std::chrono::steady_clock::time_point started;
    int64_t timestampMs = 0;
    int expectedTasks = 0;
    std::vector<TaskSnapshot> acks;
  };
  void finalizeLocked(Pending p);
  void finalizeSavepointLocked(Pending p, state::CheckpointMetadata m);
  /// Aborts checkpoint `id`; a failure `why` that counts against the tolerance
  /// (checkpoint_failure.h) beyond tolerable-failed-checkpoints in a row fails the attempt.
  void abortLocked(uint64_t id, CheckpointFailureReason why, const std::string& reason);
  /// Discards the oldest retained checkpoints beyond num-retained (through the registry,
  /// on the cleaner thread).
  void subsumeLocked();
  /// Queues a deletion for the cleaner thread (callable under mu_).
  void enqueueCleanup(std::function<state::Status()> work);
  void cleanerLoop();
  /// What an aborted checkpoint wrote (called at the abort and again for every late
  /// part): its chk-<n>, and the shared files `parts` uploaded that nothing references; for
  /// an aborted savepoint its directory. No-op for ids that were not aborted.
  void cleanUpAbortedLocked(uint64_t id, const std::vector<TaskSnapshot>& parts);
  /// Removes an aborted checkpoint's directory and the shared files it uploaded, in the
  /// background.
  void discardAbortedLocked(uint64_t id, std::vector<state::FileRef> uploaded);
  void loop();
  /// Begins an outage (if none) or counts one more declined checkpoint in it.
  void storeUnavailableLocked(const std::string& error);
  /// Ends an outage after checkpoint `id` completed; runs the clean-ups it deferred.
  void storeAnswersLocked(uint64_t id);
  /// Adds `r`, or replaces the record with the same id and trigger time; notifies.
  void recordLocked(const CheckpointRecord& r);
  /// The newest IN_PROGRESS record of checkpoint `id` becomes FAILED with `reason`.
  void failRecordLocked(uint64_t id, const std::string& reason);

  CoordinatorOptions options_;
  std::shared_ptr<state::CheckpointStorage> storage_;
  /// Thread-safe for publish (under mu_) and the cleaner's deletions (without mu_); the
  /// registry holds no lock across a storage request (snapshot_registry.h).
  state::SnapshotRegistry registry_;
  state::CheckpointMetadata template_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_;  // a pending checkpoint or savepoint ended
  JobExecution* execution_ = nullptr;            // guarded by mu_
  std::optional<Pending> pending_;               // guarded by mu_
  uint64_t nextId_;                              // guarded by mu_
  std::deque<uint64_t> retained_;                // guarded by mu_; ids, oldest first
  std::map<uint64_t, state::CheckpointMetadata> retainedMetadata_;  // guarded by mu_; of retained_
  std::set<uint64_t> aborted_;                   // guarded by mu_; may still report late
  /// Aborted savepoints' storage and directory, for late reports; guarded by mu_.
  std::map<uint64_t, std::pair<std::shared_ptr<state::CheckpointStorage>, std::string>> abortedSavepoints_;
  uint64_t completed_ = 0;                       // guarded by mu_
  StoreHealth health_;                           // guarded by mu_
  int64_t publishUntilNanos_ = INT64_MAX;        // guarded by mu_ (setPublishDeadline)
  std::string fenceWhy_;                         // guarded by mu_
  bool fencedLocked() const;
  std::string fencedMessageLocked() const;
  std::string fencedMessage() const;
  /// Clean-ups deferred while the store is unavailable: aborted id -> the shared files its
  /// reported parts uploaded (cleanUpAbortedLocked); guarded by mu_.
  std::map<uint64_t, std::vector<state::FileRef>> deferredCleanups_;
  int consecutiveFailures_ = 0;                  // guarded by mu_
  bool stop_ = false;                            // guarded by mu_
  bool triggerSoon_ = false;                     // guarded by mu_; finalCheckpointWanted()
  std::function<void(const state::CheckpointMetadata&)> onComplete_;
  CheckpointHistory history_;                    // guarded by mu_
  std::function<void(const CheckpointRecord&)> onHistory_;  // guarded by mu_
  std::thread thread_;
  std::mutex cleanMu_;
  std::condition_variable cleanCv_;
  std::deque<std::function<state::Status()>> cleanups_;  // guarded by cleanMu_
  bool cleanerMetOutage_ = false;  // guarded by cleanMu_: the last deletion met an unavailable store
  bool cleanStop_ = false;                      // guarded by cleanMu_
  std::thread cleaner_;
};

/// Resolves a `-s` argument: a chk-<n> or savepoint directory, its `_metadata` file, or a
/// job's checkpoint directory (then its latest complete checkpoint whose `_metadata` can
/// be read; a newer unreadable one is named in `note`, never skipped silently).
struct ResolvedSnapshot {
  std::string directory;  // absolute path of the directory holding _metadata
  std::shared_ptr<state::CheckpointStorage> storage;  // rooted at its parent
  state::CheckpointMetadata metadata;  // paths relative to storage
  std::string note;  // e.g. "using the latest complete checkpoint chk-7 of ..."
  /// Newer chk-<n> of the job directory passed over because their _metadata cannot be
  /// read (the note names them): worth a warning, not an info line.
  bool skippedNewer = false;
};
state::Result<ResolvedSnapshot> resolveSnapshot(const std::string& path);
/// Logs `s.note`, if any: a warning when newer checkpoints were passed over, else info.
void logResolution(const ResolvedSnapshot& s);
/// Like resolveSnapshot, but only an exact snapshot (a directory holding `_metadata`, or
/// that file): never picks one out of a job directory.
state::Result<ResolvedSnapshot> openSnapshot(const std::string& path);

/// The metadata of a checkpoint or savepoint from its tasks' acknowledgements, as the
/// coordinator publishes it (its one owner; tests build their snapshots with it): `templ`
/// (job, class, backend, ids) with one OperatorSnapshot per operator of the job, then one
/// per exchange holding in-flight records (unaligned checkpoints); each operator's subtask
/// handles sorted by index; the states a backend holds beyond what the class declares,
/// carried forward with their recorded descriptors (a later version of the class that
/// declares them again reads them); the largest synchronous and alignment times. Byte
/// counts and the asynchronous time are the caller's.
state::CheckpointMetadata assembleMetadata(state::CheckpointMetadata templ, const std::vector<OperatorInfo>& operators,
                                           const std::vector<TaskSnapshot>& acks);

}  // namespace jobhost::host
