#include "checkpoint/checkpoint_coordinator.h"

#include "checkpoint/job_directory_lock.h"

#include "jobhost/state/s3_storage.h"

#include "config/units.h"
#include "jobhost/state/checkpoint_layout.h"
#include "wall_clock.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace jobhost::host {

namespace fs = std::filesystem;
using state::Status;

namespace {
std::string chkDir(uint64_t id) { return state::checkpointDirName(id); }
}  // namespace

const char* checkpointStatusName(CheckpointRecord::Status s) {
  switch (s) {
    case CheckpointRecord::Status::kInProgress: return "IN_PROGRESS";
    case CheckpointRecord::Status::kCompleted: return "COMPLETED";
    case CheckpointRecord::Status::kFailed: return "FAILED";
  }
  return "?";
}

std::vector<CheckpointDependency> checkpointDependencies(const state::CheckpointMetadata& m) {
  std::map<uint64_t, CheckpointDependency> deps;
  std::set<std::string> seen;
  for (const auto& op : m.operators)
    for (const auto& sub : op.subtasks)
      for (const auto& f : state::fileUses(sub.keyed)) {
        if (!f.shared || f.createdByCheckpoint == m.checkpointId || !seen.insert(f.file.path).second) continue;
        auto& d = deps[f.createdByCheckpoint];
        d.checkpointId = f.createdByCheckpoint;
        ++d.files;
        d.bytes += f.file.size;
      }
  std::vector<CheckpointDependency> out;
  for (auto& [id, d] : deps) out.push_back(d);
  return out;
}

CheckpointRecord recordFromMetadata(const state::CheckpointMetadata& m, const std::string& path) {
  CheckpointRecord r;
  r.id = m.checkpointId;
  r.status = CheckpointRecord::Status::kCompleted;
  r.savepoint = m.kind == state::SnapshotKind::kSavepoint;
  r.canonical = m.format == state::SnapshotFormat::kCanonical;
  r.triggerTimeMs = m.timestampMs;
  r.durationMicros = m.stats.asyncMicros;  // measured from the trigger (see finalizeLocked)
  r.syncMicros = m.stats.syncMicros;
  r.asyncMicros = r.durationMicros > r.syncMicros ? r.durationMicros - r.syncMicros : 0;
  r.alignmentMicros = m.stats.alignmentMicros;
  r.newBytes = m.stats.newBytes;
  r.totalBytes = m.stats.totalBytes;
  r.dependsOn = checkpointDependencies(m);
  r.incremental = !r.canonical && m.incremental;
  r.path = path;
  return r;
}

CheckpointCoordinator::CheckpointCoordinator(CoordinatorOptions options, state::SnapshotRegistry registry,
                                             state::CheckpointMetadata templ, uint64_t firstCheckpointId)
    : options_(std::move(options)),
      storage_(registry.storagePtr()),
      registry_(std::move(registry)),
      template_(std::move(templ)),
      nextId_(std::max(firstCheckpointId, registry_.highestCheckpointIdSeen() + 1)) {
  std::lock_guard lock(mu_);
  for (uint64_t id : registry_.checkpointIds()) {
    retained_.push_back(id);
    retainedMetadata_[id] = *registry_.checkpoint(id);
  }
  cleaner_ = std::thread([this] { cleanerLoop(); });
  // The checkpoints found here are retained as they are, however many: the oldest go only
  // once a checkpoint of this attempt has completed (subsumeLocked after it). Trimming
  // them now deleted the older ones before the restore had even read the newest, so a
  // newest one that cannot be restored (damaged, or refused) took the one before with it.
  for (uint64_t id : retained_) recordLocked(recordFromMetadata(retainedMetadata_.at(id), storage_->describe(chkDir(id))));
}

CheckpointCoordinator::~CheckpointCoordinator() { stop(); }

void CheckpointCoordinator::attach(JobExecution* execution) {
  std::lock_guard lock(mu_);
  execution_ = execution;
}

void CheckpointCoordinator::detach() {
  std::lock_guard lock(mu_);
  if (pending_)
    abortLocked(pending_->id, CheckpointFailureReason::kAttemptEnded, "the job attempt ended before it completed");
  execution_ = nullptr;
}

void CheckpointCoordinator::start() {
  if (options_.interval.count() <= 0) return;
  thread_ = std::thread([this] { loop(); });
}

void CheckpointCoordinator::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
    done_.notify_all();  // the loop may wait for a pending checkpoint (finalCheckpointWanted)
  }
  if (thread_.joinable()) thread_.join();
  bool outage;
  {
    std::lock_guard lock(mu_);
    outage = health_.unavailableSinceMs != 0;
  }
  {
    std::lock_guard lock(cleanMu_);
    outage = outage || cleanerMetOutage_;  // also when only a deletion met it
    if (outage && !cleanups_.empty()) {
      spdlog::info("{} deletions left undone: the checkpoint store {} is unavailable (jobhost gc removes them later)",
                   cleanups_.size(), options_.storageRootDescription);
      cleanups_.clear();
    }
    cleanStop_ = true;
    cleanCv_.notify_all();
  }
  if (cleaner_.joinable()) cleaner_.join();
}

void CheckpointCoordinator::enqueueCleanup(std::function<Status()> work) {
  std::lock_guard lock(cleanMu_);
  cleanups_.push_back(std::move(work));
  cleanCv_.notify_all();
}

void CheckpointCoordinator::cleanerLoop() {
  std::unique_lock lock(cleanMu_);
  for (;;) {
    cleanCv_.wait(lock, [&] { return cleanStop_ || !cleanups_.empty(); });
    if (cleanups_.empty()) return;  // stopped, nothing left
    auto work = std::move(cleanups_.front());
    cleanups_.pop_front();
    lock.unlock();
    bool fenced;
    {
      std::lock_guard coordinator(mu_);
      fenced = fencedLocked();
    }
    // Queued while this process held the lease, run maybe much later: if it holds it no
    // longer, another instance may own the directory by now (jobhost gc collects it).
    Status s = fenced ? Status::OK() : work();
    if (fenced) spdlog::info("a deletion was skipped: {}", fencedMessage());
    lock.lock();
    if (!s.ok()) cleanerMetOutage_ = isStoreUnavailability(s);
    else if (!fenced) cleanerMetOutage_ = false;
  }
}

void CheckpointCoordinator::finalCheckpointWanted() {
  std::lock_guard lock(mu_);
  triggerSoon_ = true;
  cv_.notify_all();
}

void CheckpointCoordinator::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.interval, [&] { return stop_ || triggerSoon_; });
    if (stop_) return;
    if (triggerSoon_) {
      triggerSoon_ = false;
      // A checkpoint in flight finishes first (the final one must come after it).
      if (pending_) done_.wait_for(lock, options_.timeout, [&] { return stop_ || !pending_; });
      if (stop_) return;
    }
    if (pending_ && !pending_->savepoint && std::chrono::steady_clock::now() - pending_->started > options_.timeout)
      abortLocked(pending_->id,
                  // Stuck in a store that does not answer: part of the outage, not counted.
                  health_.unavailableSinceMs != 0 ? CheckpointFailureReason::kStoreUnavailable
                                                  : CheckpointFailureReason::kExpired,
                  "not complete after " + std::to_string(options_.timeout.count()) +
                      " ms (execution.checkpointing.timeout)");
    if (health_.unavailableSinceMs != 0 && !pending_) {
      // During an outage: one request, no retries, instead of a checkpoint that would
      // only wait for the store too.
      lock.unlock();
      Status answer = storage_->probe();
      lock.lock();
      if (stop_) return;
      if (!answer.ok()) {
        storeUnavailableLocked(answer.toString());
        continue;
      }
      spdlog::debug("the checkpoint store answers again: triggering a checkpoint");
    }
    if (!pending_ && fencedLocked()) {
      // Not holding the job directory's lease: another instance may take it over. Nothing
      // is written until a renewal succeeds (and none may, if it was taken over).
      storeUnavailableLocked(fencedMessageLocked());
      continue;
    }
    lock.unlock();
    triggerCheckpoint();
    lock.lock();
  }
}

void CheckpointCoordinator::setOnComplete(std::function<void(const state::CheckpointMetadata&)> fn) {
  std::lock_guard lock(mu_);
  onComplete_ = std::move(fn);
}

void CheckpointCoordinator::setOnHistoryChange(std::function<void(const CheckpointRecord&)> fn) {
  std::lock_guard lock(mu_);
  onHistory_ = std::move(fn);
}

std::vector<CheckpointRecord> CheckpointCoordinator::history() const {
  std::lock_guard lock(mu_);
  return {history_.records().begin(), history_.records().end()};
}

void CheckpointCoordinator::recordLocked(const CheckpointRecord& r) {
  history_.record(r);
  if (onHistory_) onHistory_(r);
}

void CheckpointCoordinator::failRecordLocked(uint64_t id, const std::string& reason) {
  if (auto r = history_.fail(id, reason, wallClockMs()); r && onHistory_) onHistory_(*r);
}

bool CheckpointCoordinator::triggerCheckpoint() {
  std::lock_guard lock(mu_);
  if (!execution_ || !execution_->running()) return false;
  if (pending_) {
    spdlog::debug("checkpoint {} still in progress; skipping this trigger", pending_->id);
    return false;
  }
  Pending p;
  p.id = nextId_++;
  p.started = std::chrono::steady_clock::now();
  p.timestampMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  p.expectedTasks = execution_->taskCount();
  CheckpointTarget target;
  target.checkpointId = p.id;
  target.format = state::SnapshotFormat::kNative;
  target.storage = storage_;
  target.exclusiveDir = chkDir(p.id);
  target.sharedDir = "shared";
  target.lastCompleted = retained_.empty() ? 0 : retained_.back();
  pending_ = std::move(p);
  spdlog::debug("triggering checkpoint {}", target.checkpointId);
  if (!execution_->triggerCheckpoint(target)) {
    pending_.reset();
    return false;
  }
  CheckpointRecord r;
  r.id = target.checkpointId;
  r.triggerTimeMs = pending_->timestampMs;
  r.incremental = template_.incremental;
  r.path = storage_->describe(target.exclusiveDir);
  recordLocked(r);
  return true;
}

void CheckpointCoordinator::acknowledge(uint64_t id, TaskSnapshot snapshot) {
  std::lock_guard lock(mu_);
  if (!pending_ || pending_->id != id) {
    // A late part of an aborted checkpoint or savepoint: it has stopped writing now.
    std::vector<TaskSnapshot> late;
    late.push_back(std::move(snapshot));
    cleanUpAbortedLocked(id, late);
    return;
  }
  pending_->acks.push_back(std::move(snapshot));
  if (static_cast<int>(pending_->acks.size()) < pending_->expectedTasks) return;
  Pending p = std::move(*pending_);
  pending_.reset();
  finalizeLocked(std::move(p));
}

void CheckpointCoordinator::decline(uint64_t id, CheckpointFailureReason reason, const Status& detail) {
  std::lock_guard lock(mu_);
  if (!pending_ || pending_->id != id) {
    cleanUpAbortedLocked(id, {});
    return;
  }
  abortLocked(id, failureReasonFor(reason, detail, options_.localStorage), detail.toString());
}

void CheckpointCoordinator::setPublishDeadline(int64_t untilNanos, std::string why) {
  std::lock_guard lock(mu_);
  publishUntilNanos_ = untilNanos;
  fenceWhy_ = why.empty() ? "this process does not hold the job directory's lease" : std::move(why);
}

bool CheckpointCoordinator::fencedLocked() const { return monotonicNanos() >= publishUntilNanos_; }

// One wording for both places that decline while fenced (before a trigger and at publish).
std::string CheckpointCoordinator::fencedMessageLocked() const { return "not publishing: " + fenceWhy_; }

std::string CheckpointCoordinator::fencedMessage() const {
  std::lock_guard lock(mu_);
  return fencedMessageLocked();
}

CheckpointCoordinator::StoreHealth CheckpointCoordinator::storeHealth() const {
  std::lock_guard lock(mu_);
  return health_;
}

void CheckpointCoordinator::storeUnavailableLocked(const std::string& error) {
  ++health_.declined;
  health_.lastError = error;
  if (health_.unavailableSinceMs != 0) {
    spdlog::debug("checkpoint store {} still unavailable ({} checkpoints declined): {}",
                  options_.storageRootDescription, health_.declined, error);
    return;
  }
  health_.unavailableSinceMs = wallClockMs();
  ++health_.outages;
  spdlog::warn("checkpoint store {} unavailable since {}: {}; checkpoints are declined until it answers again (the "
               "job keeps running)",
               options_.storageRootDescription, formatLocalTime(health_.unavailableSinceMs), error);
}

void CheckpointCoordinator::storeAnswersLocked(uint64_t id) {
  if (health_.unavailableSinceMs == 0) return;
  spdlog::info("checkpoint store {} answers again: checkpoint {} completed after an outage of {} ({} checkpoints "
               "declined in all)",
               options_.storageRootDescription, id,
               formatDuration(std::chrono::milliseconds(wallClockMs() - health_.unavailableSinceMs)), health_.declined);
  health_.unavailableSinceMs = 0;
  health_.lastError.clear();
  auto deferred = std::move(deferredCleanups_);
  deferredCleanups_.clear();
  // Every entry was aborted when it was deferred, whether or not aborted_ still holds it.
  for (auto& [aborted, uploaded] : deferred) discardAbortedLocked(aborted, std::move(uploaded));
}

void CheckpointCoordinator::cleanUpAbortedLocked(uint64_t id, const std::vector<TaskSnapshot>& parts) {
  if (auto sp = abortedSavepoints_.find(id); sp != abortedSavepoints_.end()) {
    // A savepoint directory is new and ours alone until its _metadata exists.
    enqueueCleanup([storage = sp->second.first, dir = sp->second.second] {
      Status s = storage->removeAll(dir);
      if (!s.ok()) spdlog::warn("could not clean up {}: {}", storage->describe(dir), s.toString());
      return s;
    });
    return;
  }
  const bool deferred = deferredCleanups_.count(id) > 0;
  if (!aborted_.count(id) && !deferred) return;
  std::vector<state::FileRef> uploaded;  // shared files this checkpoint uploaded itself
  for (const auto& part : parts)
    for (const auto& [uid, sub] : part.operators)
      for (const auto& f : state::fileUses(sub.keyed))
        if (f.shared && f.createdByCheckpoint == id) uploaded.push_back(f.file);
  if (health_.unavailableSinceMs != 0) {
    // It would only meet the outage (and hold the lock meanwhile): after it. Only the
    // file names are kept, not the parts (their operator state and in-flight records can
    // be megabytes, and an outage can abort a checkpoint every interval for hours), and
    // under their own key: aborted_ forgets older ids (abortedIdsRemembered).
    auto& later = deferredCleanups_[id];
    later.insert(later.end(), std::make_move_iterator(uploaded.begin()), std::make_move_iterator(uploaded.end()));
    return;
  }
  discardAbortedLocked(id, std::move(uploaded));
}

void CheckpointCoordinator::discardAbortedLocked(uint64_t id, std::vector<state::FileRef> uploaded) {
  enqueueCleanup([this, id, uploaded = std::move(uploaded)] {
    std::vector<state::RemovedFile> removed;
    Status s = registry_.discardIncomplete(chkDir(id), uploaded, &removed);
    if (!s.ok()) spdlog::warn("could not clean up after aborted checkpoint {}: {}", id, s.toString());
    for (const auto& r : removed) spdlog::debug("removed {} ({})", storage_->describe(r.path), r.reason);
    return s;
  });
}

void CheckpointCoordinator::abortLocked(uint64_t id, CheckpointFailureReason why, const std::string& reason) {
  if (pending_ && pending_->savepoint) {
    SavepointRequest* sp = pending_->savepoint;
    spdlog::warn("savepoint {} failed: {}", sp->storage->describe(sp->dir), reason);
    sp->result = Status::IOError("savepoint failed: " + reason);
    failRecordLocked(id, reason);
    pending_.reset();
    done_.notify_all();
    // Withdraw it first, so tasks that have not snapshotted yet write nothing more; parts
    // still writing report later and clean up again (cleanUpAbortedLocked).
    if (execution_) execution_->notifyCheckpointAborted(id);
    abortedSavepoints_[id] = {sp->storage, sp->dir};
    while (abortedSavepoints_.size() > 16) abortedSavepoints_.erase(abortedSavepoints_.begin());
    cleanUpAbortedLocked(id, {});
    return;
  }
  if (countsAgainstTolerance(why)) spdlog::warn("checkpoint {} failed and was discarded: {}", id, reason);
  else if (why == CheckpointFailureReason::kStoreUnavailable)
    spdlog::info("checkpoint {} was declined ({}): {}", id, checkpointFailureName(why), reason);
  else spdlog::info("checkpoint {} was not taken ({}): {}", id, checkpointFailureName(why), reason);
  if (why == CheckpointFailureReason::kStoreUnavailable) storeUnavailableLocked(reason);
  failRecordLocked(id, reason);
  std::vector<TaskSnapshot> reported;  // parts that reported before the abort
  if (pending_ && pending_->id == id) reported = std::move(pending_->acks);
  pending_.reset();
  done_.notify_all();
  aborted_.insert(id);
  while (aborted_.size() > std::max<size_t>(1, options_.abortedIdsRemembered)) aborted_.erase(aborted_.begin());
  if (countsAgainstTolerance(why)) ++consecutiveFailures_;
  if (execution_ && countsAgainstTolerance(why) && consecutiveFailures_ > options_.tolerableFailures)
    execution_->failExternally("checkpoint " + std::to_string(id) + " failed: " + reason + " (" +
                               std::to_string(consecutiveFailures_) +
                               " in a row; execution.checkpointing.tolerable-failed-checkpoints = " +
                               std::to_string(options_.tolerableFailures) + ")");
  // Withdraw it first, so tasks that have not snapshotted yet write nothing more. What the
  // parts that already reported uploaded goes now; parts still writing report later.
  if (execution_) execution_->notifyCheckpointAborted(id);
  cleanUpAbortedLocked(id, reported);
}

void CheckpointCoordinator::finalizeLocked(Pending p) {
  done_.notify_all();
  state::CheckpointMetadata m = template_;
  m.checkpointId = p.id;
  m.timestampMs = p.timestampMs;
  // The acknowledgements stay whole: if publishing fails, the abort's clean-up reads from
  // them the shared files this checkpoint uploaded.
  m = assembleMetadata(std::move(m), execution_->operators(), p.acks);
  if (p.savepoint) {
    finalizeSavepointLocked(std::move(p), std::move(m));
    return;
  }
  std::string dir = chkDir(p.id);
  for (const auto& f : m.referencedFiles()) {
    m.stats.totalBytes += f.size;
    if (f.path.rfind(dir + "/", 0) == 0) m.stats.newBytes += f.size;
  }
  for (const auto& op : m.operators)
    for (const auto& sub : op.subtasks)
      for (const auto& sf : state::fileUses(sub.keyed))
        if (sf.shared && sf.createdByCheckpoint == p.id) m.stats.newBytes += sf.file.size;
  m.stats.asyncMicros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - p.started).count());
  if (fencedLocked()) {
    // The lease's half-life passed while it was taken: never publish it (another instance
    // may hold the lease by now); its files stay until publishing may go on.
    pending_ = std::move(p);
    abortLocked(pending_->id, CheckpointFailureReason::kStoreUnavailable, fencedMessageLocked());
    return;
  }
  if (Status s = registry_.publish(dir, m); !s.ok()) {
    pending_ = std::move(p);  // abortLocked expects the pending checkpoint
    abortLocked(pending_->id, failureReasonFor(CheckpointFailureReason::kFinalizeFailed, s, options_.localStorage),
                "cannot write its metadata: " + s.toString());
    return;
  }
  ++completed_;
  consecutiveFailures_ = 0;
  storeAnswersLocked(p.id);
  spdlog::info("completed checkpoint {} ({} new, {} total, {} ms): {}", p.id, formatBytes(m.stats.newBytes),
               formatBytes(m.stats.totalBytes), m.stats.asyncMicros / 1000, storage_->describe(dir));
  retained_.push_back(p.id);
  retainedMetadata_[p.id] = m;
  recordLocked(recordFromMetadata(m, storage_->describe(dir)));
  if (execution_) execution_->notifyCheckpointComplete(p.id);
  subsumeLocked();
  if (onComplete_) onComplete_(m);
}

void CheckpointCoordinator::subsumeLocked() {
  while (static_cast<int>(retained_.size()) > std::max(1, options_.numRetained)) {
    uint64_t old = retained_.front();
    retained_.pop_front();
    auto meta = retainedMetadata_.find(old);
    int64_t triggerTime = meta != retainedMetadata_.end() ? meta->second.timestampMs : 0;
    if (meta != retainedMetadata_.end()) retainedMetadata_.erase(meta);
    enqueueCleanup([this, old] {
      std::vector<state::RemovedFile> removed;
      Status s = registry_.discard(chkDir(old), &removed);
      if (!s.ok()) spdlog::warn("could not fully remove subsumed checkpoint {}: {} (jobhost gc removes the rest)", old,
                                s.toString());
      for (const auto& r : removed) spdlog::debug("removed {} ({})", storage_->describe(r.path), r.reason);
      spdlog::debug("subsumed checkpoint {}", old);
      return s;
    });
    const auto& records = history_.records();
    for (auto it = records.rbegin(); it != records.rend(); ++it)
      if (it->id == old && it->triggerTimeMs == triggerTime) {
        CheckpointRecord r = *it;
        r.subsumed = true;
        recordLocked(r);
        break;
      }
  }
}

void CheckpointCoordinator::finalizeSavepointLocked(Pending p, state::CheckpointMetadata m) {
  SavepointRequest* sp = p.savepoint;
  m.kind = state::SnapshotKind::kSavepoint;
  m.format = sp->format;
  // A hashmap savepoint is a full KeyGroupsStateHandle even when the job checkpoints
  // incrementally; a native rocksdb savepoint keeps the incremental (native) layout.
  if (sp->format == state::SnapshotFormat::kCanonical || m.backend == "hashmap") m.incremental = false;
  for (const auto& f : m.referencedFiles()) m.stats.totalBytes += f.size;
  m.stats.newBytes = m.stats.totalBytes;
  m.stats.asyncMicros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - p.started).count());
  auto bytes = state::serializeMetadata(m, sp->dir);
  Status s = bytes.ok() ? sp->storage->put(sp->dir + "/" + state::kMetadataFileName, *bytes) : bytes.status();
  if (!s.ok()) {
    pending_ = std::move(p);  // abortLocked reports through the request
    abortLocked(pending_->id, CheckpointFailureReason::kFinalizeFailed, "cannot write its metadata: " + s.toString());
    return;
  }
  std::string path = sp->storage->describe(sp->dir);
  spdlog::info("completed savepoint {} ({} total, {} ms): {}", p.id, formatBytes(m.stats.totalBytes),
               m.stats.asyncMicros / 1000, path);
  recordLocked(recordFromMetadata(m, path));
  sp->result = path;
  done_.notify_all();
}

state::Result<std::string> CheckpointCoordinator::triggerSavepoint(const std::string& targetDir,
                                                                   state::SnapshotFormat format,
                                                                   std::chrono::milliseconds timeout,
                                                                   bool stopSources, bool drain) {
  auto storage = state::openStorage(targetDir);
  if (!storage.ok()) return storage.status();
  SavepointRequest req;
  req.storage = std::move(*storage);
  req.format = format;
  // Concurrent savepoints each draw their own name: no shared generator.
  std::random_device device;
  uint64_t random = (static_cast<uint64_t>(device()) << 32) ^ device();
  char rnd[16];
  std::snprintf(rnd, sizeof rnd, "%012llx", static_cast<unsigned long long>(random & 0xffffffffffffULL));
  req.dir = "savepoint-" + template_.jobId.substr(0, 6) + "-" + rnd;
  std::unique_lock lock(mu_);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  // A checkpoint in flight finishes first.
  if (!done_.wait_until(lock, deadline, [&] { return !pending_ || stop_; }))
    return Status::IOError("timed out waiting for checkpoint " + std::to_string(pending_->id) + " to finish");
  if (!execution_ || !execution_->running()) return Status::InvalidArgument("the job is not running");
  Pending p;
  p.id = nextId_++;
  p.savepoint = &req;
  p.started = std::chrono::steady_clock::now();
  p.timestampMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  p.expectedTasks = execution_->taskCount();
  CheckpointTarget target;
  target.checkpointId = p.id;
  target.format = format;
  target.storage = req.storage;
  target.exclusiveDir = req.dir;
  target.sharedDir = "";  // self-contained
  target.stopSources = stopSources;
  target.drain = stopSources && drain;
  target.savepoint = true;
  pending_ = std::move(p);
  spdlog::info("triggering savepoint {} into {}", target.checkpointId, req.storage->describe(req.dir));
  if (!execution_->triggerCheckpoint(target)) {
    pending_.reset();
    return Status::InvalidArgument("the job is not running");
  }
  {
    CheckpointRecord r;
    r.id = target.checkpointId;
    r.savepoint = true;
    r.canonical = format == state::SnapshotFormat::kCanonical;
    r.triggerTimeMs = pending_->timestampMs;
    r.path = req.storage->describe(req.dir);
    recordLocked(r);
  }
  if (!done_.wait_until(lock, deadline, [&] { return req.result.has_value(); })) {
    if (pending_ && pending_->savepoint == &req)
      abortLocked(pending_->id, CheckpointFailureReason::kExpired, "timed out");
    return Status::IOError("savepoint timed out");
  }
  return std::move(*req.result);
}

std::optional<state::CheckpointMetadata> CheckpointCoordinator::latestCompleted() const {
  std::lock_guard lock(mu_);
  if (retained_.empty()) return std::nullopt;
  return retainedMetadata_.at(retained_.back());
}

std::vector<uint64_t> CheckpointCoordinator::retainedIds() const {
  std::lock_guard lock(mu_);
  return {retained_.begin(), retained_.end()};
}

std::string CheckpointCoordinator::pathOf(uint64_t id) const { return storage_->describe(chkDir(id)); }

uint64_t CheckpointCoordinator::completedCount() const {
  std::lock_guard lock(mu_);
  return completed_;
}

// ---------------------------------------------------------------------------------------

namespace {

/// The snapshot in directory `dir` (absolute, holding `_metadata`).
state::Result<ResolvedSnapshot> openSnapshotDir(const fs::path& dir) {
  ResolvedSnapshot r;
  r.directory = dir.string();
  auto storage = state::openStorage(dir.parent_path().string());
  if (!storage.ok()) return storage.status();
  r.storage = std::move(*storage);
  std::string bytes;
  std::string rel = dir.filename().string();
  if (Status s = r.storage->get(rel + "/" + state::kMetadataFileName, &bytes); !s.ok()) return s;
  auto m = state::parseMetadata(bytes, rel, (dir / state::kMetadataFileName).string());
  if (!m.ok()) return m.status();
  r.metadata = std::move(*m);
  return r;
}

/// An existing path made absolute and canonical, or why not.
state::Result<fs::path> existingPath(const std::string& input) {
  std::error_code ec;
  fs::path p = fs::absolute(input, ec);
  if (ec || !fs::exists(p, ec)) return Status::NotFound("snapshot path '" + input + "' does not exist");
  return fs::weakly_canonical(p, ec);
}

}  // namespace

/// The newest complete, readable checkpoint of the job directory `storage` (named `input`).
state::Result<ResolvedSnapshot> latestOfJobDirectory(const std::string& input, const std::string& dir) {
  auto storage = state::openStorage(dir);
  if (!storage.ok()) return storage.status();
  auto registry = state::SnapshotRegistry::load(std::move(*storage));
  if (!registry.ok()) return registry.status();
  std::vector<uint64_t> ids = registry->checkpointIds();
  std::vector<std::string> unreadableNewer;
  for (const auto& [d, reason] : registry->unreadable())
    if (auto id = state::parseCheckpointDirName(d); id && (ids.empty() || *id > ids.back()))
      unreadableNewer.push_back(d + " (" + reason + ")");
  if (ids.empty()) {
    std::string more = unreadableNewer.empty() ? "" : "; unreadable: " + unreadableNewer.front();
    return Status::NotFound("'" + input + "' is not a snapshot: it has no _metadata and no completed chk-<n>" + more);
  }
  auto r = openSnapshotDir(fs::path(dir) / state::checkpointDirName(ids.back()));
  if (!r.ok()) return r.status();
  r->note = "using the latest complete checkpoint in " + dir + ": " + state::checkpointDirName(ids.back());
  for (const auto& u : unreadableNewer) r->note += "; skipped the newer " + u + ", whose _metadata cannot be read";
  r->skippedNewer = !unreadableNewer.empty();
  return r;
}

/// A snapshot on an object store: s3://…/chk-<n>[/_metadata], a savepoint, or (if
/// jobDirectoryToo) a job's checkpoint directory.
state::Result<ResolvedSnapshot> resolveObjectStoreSnapshot(const std::string& input, bool jobDirectoryToo) {
  std::string dir = input;
  const size_t bucketStart = dir.find("://") + 3;
  while (dir.size() > bucketStart && dir.back() == '/') dir.pop_back();
  if (dir.size() <= bucketStart) return Status::InvalidArgument("'" + input + "' names no bucket: pass s3://bucket/prefix/...");
  const std::string meta = std::string("/") + state::kMetadataFileName;
  bool namedMetadata = dir.size() > meta.size() && dir.compare(dir.size() - meta.size(), meta.size(), meta) == 0;
  if (namedMetadata) dir.resize(dir.size() - meta.size());
  size_t slash = dir.rfind('/');
  if (slash != std::string::npos && slash > bucketStart && slash + 1 < dir.size()) {
    auto parent = state::openStorage(dir.substr(0, slash));
    if (!parent.ok()) return parent.status();
    std::string name = dir.substr(slash + 1);
    // Only a complete answer "not there" makes it no snapshot; a store that does not
    // answer is that error (Unavailable), never a missing snapshot.
    auto size = (*parent)->fileSize(name + meta);
    if (size.ok()) return openSnapshotDir(fs::path(dir));
    if (!size.status().isNotFound()) return size.status();
    if (namedMetadata) return Status::NotFound("snapshot path '" + input + "' does not exist");
  }
  if (!jobDirectoryToo)
    return Status::InvalidArgument("'" + input + "' is not a snapshot: pass a chk-<n> or savepoint directory (one that "
                                   "holds a _metadata object) or that _metadata object");
  return latestOfJobDirectory(input, dir);
}

state::Result<ResolvedSnapshot> openSnapshot(const std::string& input) {
  if (state::isObjectStoreUri(input)) return resolveObjectStoreSnapshot(input, false);
  auto p = existingPath(input);
  if (!p.ok()) return p.status();
  if (fs::is_regular_file(*p) && p->filename() == state::kMetadataFileName) return openSnapshotDir(p->parent_path());
  if (fs::is_directory(*p) && fs::exists(*p / state::kMetadataFileName)) return openSnapshotDir(*p);
  return Status::InvalidArgument("'" + input + "' is not a snapshot: pass a chk-<n> or savepoint directory (one that "
                                 "holds a _metadata file) or that _metadata file");
}

void logResolution(const ResolvedSnapshot& s) {
  if (!s.note.empty()) spdlog::log(s.skippedNewer ? spdlog::level::warn : spdlog::level::info, "{}", s.note);
}

state::Result<ResolvedSnapshot> resolveSnapshot(const std::string& input) {
  if (state::isObjectStoreUri(input)) return resolveObjectStoreSnapshot(input, true);
  auto p = existingPath(input);
  if (!p.ok()) return p.status();
  if (fs::is_regular_file(*p)) {
    if (p->filename() != state::kMetadataFileName)
      return Status::InvalidArgument("'" + input + "' is a file, not a snapshot: pass a chk-<n> or savepoint directory, "
                                     "its _metadata file, or a job's checkpoint directory");
    return openSnapshotDir(p->parent_path());
  }
  if (!fs::is_directory(*p)) return Status::InvalidArgument("'" + input + "' is neither a file nor a directory");
  if (fs::exists(*p / state::kMetadataFileName)) return openSnapshotDir(*p);
  // A job's checkpoint directory: its newest complete checkpoint that can be read. Reading
  // one lists every file below it, so any other directory is refused first: a slip such
  // as `-s /` or `-s ~` must not walk the whole tree.
  if (!state::looksLikeJobDirectory(*p))
    return Status::NotFound("'" + input + "' is not a snapshot: it has no _metadata and no completed chk-<n> (pass a "
                            "chk-<n> or savepoint directory, its _metadata file, or a job's checkpoint directory)");
  return latestOfJobDirectory(input, p->string());
}

state::CheckpointMetadata assembleMetadata(state::CheckpointMetadata m, const std::vector<OperatorInfo>& operators,
                                           const std::vector<TaskSnapshot>& acks) {
  for (const auto& info : operators) {
    state::OperatorSnapshot op;
    op.uid = info.uid;
    op.name = info.name;
    op.parallelism = info.parallelism;
    op.keyed = info.keyed;
    op.states = info.states;
    m.operators.push_back(std::move(op));
  }
  for (const auto& ack : acks)
    for (const auto& entry : ack.channelStateOwners)
      if (m.findOperator(entry.first) == nullptr) {
        state::OperatorSnapshot op;  // an exchange holding in-flight records (unaligned)
        op.uid = entry.first;
        op.name = entry.second.first;
        op.parallelism = entry.second.second;
        m.operators.push_back(std::move(op));
      }
  for (const auto& ack : acks) {
    m.stats.syncMicros = std::max(m.stats.syncMicros, ack.syncMicros);
    m.stats.alignmentMicros = std::max(m.stats.alignmentMicros, ack.alignmentMicros);
    for (const auto& [uid, sub] : ack.operators)
      for (auto& op : m.operators)
        if (op.uid == uid) op.subtasks.push_back(sub);
    for (const auto& [uid, states] : ack.states)
      for (auto& op : m.operators)
        if (op.uid == uid)
          for (const auto& d : states)
            if (std::none_of(op.states.begin(), op.states.end(), [&](const auto& have) { return have.name == d.name; }))
              op.states.push_back(d);
  }
  for (auto& op : m.operators)
    std::sort(op.subtasks.begin(), op.subtasks.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  return m;
}

}  // namespace jobhost::host
