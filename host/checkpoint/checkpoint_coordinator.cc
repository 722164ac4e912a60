#include "checkpoint/checkpoint_coordinator.h"

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
std::string humanBytes(uint64_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  else if (b < (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (b < (1ULL << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  return buf;
}
std::string chkDir(uint64_t id) { return "chk-" + std::to_string(id); }
int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
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
      if (auto* inc = std::get_if<state::IncrementalStateHandle>(&sub.keyed))
        for (const auto& f : inc->sharedFiles) {
          if (f.createdByCheckpoint == m.checkpointId || !seen.insert(f.file.path).second) continue;
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
  r.newBytes = m.stats.newBytes;
  r.totalBytes = m.stats.totalBytes;
  r.dependsOn = checkpointDependencies(m);
  r.incremental = !r.canonical && m.backend == "rocksdb" && m.incremental;
  r.path = path;
  return r;
}

CheckpointCoordinator::CheckpointCoordinator(CoordinatorOptions options, std::unique_ptr<state::CheckpointStorage> storage,
                                             state::CheckpointMetadata templ, uint64_t firstCheckpointId)
    : options_(std::move(options)), storage_(std::move(storage)), template_(std::move(templ)), nextId_(firstCheckpointId) {}

CheckpointCoordinator::~CheckpointCoordinator() { stop(); }

state::Result<std::vector<std::string>> CheckpointCoordinator::recover() {
  std::lock_guard lock(mu_);
  std::vector<state::FileEntry> files;
  if (Status s = storage_->list("", &files); !s.ok()) return s;
  std::map<uint64_t, bool> chks;  // id -> has _metadata
  for (const auto& f : files) {
    auto slash = f.path.find('/');
    if (slash == std::string::npos) continue;
    std::string top = f.path.substr(0, slash);
    if (top.rfind("chk-", 0) != 0) continue;
    uint64_t id = 0;
    try {
      id = std::stoull(top.substr(4));
    } catch (...) {
      continue;
    }
    chks[id] |= f.path == top + "/" + state::kMetadataFileName;
  }
  std::vector<std::string> removed;
  retained_.clear();
  for (auto& [id, complete] : chks) {
    nextId_ = std::max(nextId_, id + 1);
    if (!complete) continue;
    std::string bytes;
    std::string dir = chkDir(id);
    if (Status s = storage_->get(dir + "/" + state::kMetadataFileName, &bytes); !s.ok()) return s;
    auto m = state::parseMetadata(bytes, dir, storage_->describe(dir + "/" + state::kMetadataFileName));
    if (!m.ok()) return m.status();  // never run with an incomplete set (FLINK-22502)
    retained_.push_back(std::move(*m));
  }
  while (static_cast<int>(retained_.size()) > std::max(1, options_.numRetained)) subsumeLocked();
  for (const auto& m : retained_) recordLocked(recordFromMetadata(m, storage_->describe(chkDir(m.checkpointId))));
  std::set<std::string> referenced;
  for (const auto& m : retained_)
    for (const auto& f : m.referencedFiles()) referenced.insert(f.path);
  for (auto& [id, complete] : chks) {
    if (complete) continue;
    if (storage_->removeAll(chkDir(id)).ok()) removed.push_back(storage_->describe(chkDir(id)) + " (never completed)");
  }
  for (const auto& f : files) {
    if (f.path.rfind("shared/", 0) != 0 || referenced.count(f.path)) continue;
    if (storage_->remove(f.path).ok()) removed.push_back(storage_->describe(f.path) + " (referenced by no checkpoint)");
  }
  return removed;
}

void CheckpointCoordinator::attach(JobExecution* execution) {
  std::lock_guard lock(mu_);
  execution_ = execution;
}

void CheckpointCoordinator::detach() {
  std::lock_guard lock(mu_);
  if (pending_) abortLocked(pending_->id, "the job attempt ended before it completed");
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
  }
  if (thread_.joinable()) thread_.join();
}

void CheckpointCoordinator::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.interval, [&] { return stop_; });
    if (stop_) return;
    if (pending_ && !pending_->savepoint && std::chrono::steady_clock::now() - pending_->started > options_.timeout)
      abortLocked(pending_->id, "not complete after " + std::to_string(options_.timeout.count()) +
                                    " ms (execution.checkpointing.timeout)");
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
  return {history_.begin(), history_.end()};
}

void CheckpointCoordinator::recordLocked(const CheckpointRecord& r) {
  auto it = std::find_if(history_.rbegin(), history_.rend(), [&](const CheckpointRecord& h) {
    return h.id == r.id && h.triggerTimeMs == r.triggerTimeMs;
  });
  if (it != history_.rend()) {
    *it = r;
  } else {
    history_.push_back(r);
    while (history_.size() > kHistoryLimit) history_.pop_front();
  }
  if (onHistory_) onHistory_(r);
}

void CheckpointCoordinator::failRecordLocked(uint64_t id, const std::string& reason) {
  for (auto it = history_.rbegin(); it != history_.rend(); ++it) {
    if (it->id != id || it->status != CheckpointRecord::Status::kInProgress) continue;
    CheckpointRecord r = *it;
    r.status = CheckpointRecord::Status::kFailed;
    r.failureReason = reason;
    int64_t elapsedMs = std::max<int64_t>(0, nowMs() - r.triggerTimeMs);
    r.durationMicros = static_cast<uint64_t>(elapsedMs) * 1000;
    recordLocked(r);
    return;
  }
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
  pending_ = std::move(p);
  spdlog::debug("triggering checkpoint {}", target.checkpointId);
  if (!execution_->triggerCheckpoint(target)) {
    pending_.reset();
    return false;
  }
  CheckpointRecord r;
  r.id = target.checkpointId;
  r.triggerTimeMs = pending_->timestampMs;
  r.incremental = template_.backend == "rocksdb" && template_.incremental;
  r.path = storage_->describe(target.exclusiveDir);
  recordLocked(r);
  return true;
}

void CheckpointCoordinator::acknowledge(uint64_t id, TaskSnapshot snapshot) {
  std::lock_guard lock(mu_);
  if (!pending_ || pending_->id != id) return;  // late ack of an aborted checkpoint
  pending_->acks.push_back(std::move(snapshot));
  if (static_cast<int>(pending_->acks.size()) < pending_->expectedTasks) return;
  Pending p = std::move(*pending_);
  pending_.reset();
  finalizeLocked(std::move(p));
}

void CheckpointCoordinator::decline(uint64_t id, const Status& reason) {
  std::lock_guard lock(mu_);
  if (!pending_ || pending_->id != id) return;
  abortLocked(id, reason.toString());
}

void CheckpointCoordinator::abortLocked(uint64_t id, const std::string& reason) {
  if (pending_ && pending_->savepoint) {
    SavepointRequest* sp = pending_->savepoint;
    spdlog::warn("savepoint {} failed: {}", sp->storage->describe(sp->dir), reason);
    Status s = sp->storage->removeAll(sp->dir);
    if (!s.ok()) spdlog::warn("could not clean up {}: {}", sp->storage->describe(sp->dir), s.toString());
    sp->result = Status::IOError("savepoint failed: " + reason);
    failRecordLocked(id, reason);
    pending_.reset();
    done_.notify_all();
    if (execution_) execution_->notifyCheckpointAborted(id);
    return;
  }
  spdlog::warn("checkpoint {} failed and was discarded: {}", id, reason);
  failRecordLocked(id, reason);
  pending_.reset();
  done_.notify_all();
  ++consecutiveFailures_;
  if (execution_ && consecutiveFailures_ > options_.tolerableFailures && reason.find("attempt ended") == std::string::npos)
    execution_->failExternally("checkpoint " + std::to_string(id) + " failed: " + reason + " (" +
                               std::to_string(consecutiveFailures_) +
                               " in a row; execution.checkpointing.tolerable-failed-checkpoints = " +
                               std::to_string(options_.tolerableFailures) + ")");
  // Only files owned by this checkpoint go; shared uploads may be referenced later by
  // nothing, and are left for `jobhost gc`.
  Status s = storage_->removeAll(chkDir(id));
  if (!s.ok()) spdlog::warn("could not clean up {}: {}", storage_->describe(chkDir(id)), s.toString());
  if (execution_) execution_->notifyCheckpointAborted(id);
}

void CheckpointCoordinator::finalizeLocked(Pending p) {
  done_.notify_all();
  state::CheckpointMetadata m = template_;
  m.checkpointId = p.id;
  m.timestampMs = p.timestampMs;
  std::map<std::string, const OperatorInfo*> infos;
  for (const auto& info : execution_->operators()) {
    state::OperatorSnapshot op;
    op.uid = info.uid;
    op.name = info.name;
    op.parallelism = info.parallelism;
    op.keyed = info.keyed;
    op.states = info.states;
    m.operators.push_back(std::move(op));
  }
  uint64_t maxSync = 0;
  for (auto& ack : p.acks) {
    maxSync = std::max(maxSync, ack.syncMicros);
    for (auto& [uid, sub] : ack.operators)
      for (auto& op : m.operators)
        if (op.uid == uid) op.subtasks.push_back(std::move(sub));
  }
  for (auto& op : m.operators)
    std::sort(op.subtasks.begin(), op.subtasks.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
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
      if (auto* inc = std::get_if<state::IncrementalStateHandle>(&sub.keyed))
        for (const auto& sf : inc->sharedFiles)
          if (sf.createdByCheckpoint == p.id) m.stats.newBytes += sf.file.size;
  m.stats.syncMicros = maxSync;
  m.stats.asyncMicros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - p.started).count());
  auto bytes = state::serializeMetadata(m, dir);
  Status s = bytes.ok() ? storage_->put(dir + "/" + state::kMetadataFileName, *bytes) : bytes.status();
  if (!s.ok()) {
    abortLocked(p.id, "cannot write its metadata: " + s.toString());
    return;
  }
  ++completed_;
  consecutiveFailures_ = 0;
  spdlog::info("completed checkpoint {} ({} new, {} total, {} ms): {}", p.id, humanBytes(m.stats.newBytes),
               humanBytes(m.stats.totalBytes), m.stats.asyncMicros / 1000, storage_->describe(dir));
  retained_.push_back(m);
  recordLocked(recordFromMetadata(m, storage_->describe(dir)));
  if (execution_) execution_->notifyCheckpointComplete(p.id);
  subsumeLocked();
  if (onComplete_) onComplete_(m);
}

void CheckpointCoordinator::subsumeLocked() {
  while (static_cast<int>(retained_.size()) > std::max(1, options_.numRetained)) {
    state::CheckpointMetadata old = std::move(retained_.front());
    retained_.pop_front();
    std::set<std::string> stillUsed;
    for (const auto& r : retained_)
      for (const auto& f : r.referencedFiles()) stillUsed.insert(f.path);
    std::string dir = chkDir(old.checkpointId);
    // _metadata first: from here on the checkpoint no longer exists.
    Status s = storage_->remove(dir + "/" + state::kMetadataFileName);
    if (!s.ok() && !s.isNotFound()) spdlog::warn("could not remove subsumed checkpoint {}: {}", old.checkpointId, s.toString());
    for (const auto& f : old.referencedFiles()) {
      if (stillUsed.count(f.path) || f.path.rfind("shared/", 0) != 0) continue;
      Status r = storage_->remove(f.path);
      if (!r.ok() && !r.isNotFound()) spdlog::warn("could not delete unused shared file {}: {}", f.path, r.toString());
      else spdlog::debug("deleted shared file {} (last used by checkpoint {})", f.path, old.checkpointId);
    }
    s = storage_->removeAll(dir);
    if (!s.ok()) spdlog::warn("could not remove {}: {}", storage_->describe(dir), s.toString());
    spdlog::debug("subsumed checkpoint {}", old.checkpointId);
    for (auto it = history_.rbegin(); it != history_.rend(); ++it)
      if (it->id == old.checkpointId && it->triggerTimeMs == old.timestampMs) {
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
  if (sp->format == state::SnapshotFormat::kCanonical) m.incremental = false;
  for (const auto& f : m.referencedFiles()) m.stats.totalBytes += f.size;
  m.stats.newBytes = m.stats.totalBytes;
  m.stats.asyncMicros = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - p.started).count());
  auto bytes = state::serializeMetadata(m, sp->dir);
  Status s = bytes.ok() ? sp->storage->put(sp->dir + "/" + state::kMetadataFileName, *bytes) : bytes.status();
  if (!s.ok()) {
    pending_ = std::move(p);  // abortLocked reports through the request
    abortLocked(pending_->id, "cannot write its metadata: " + s.toString());
    return;
  }
  std::string path = sp->storage->describe(sp->dir);
  spdlog::info("completed savepoint {} ({} total, {} ms): {}", p.id, humanBytes(m.stats.totalBytes),
               m.stats.asyncMicros / 1000, path);
  recordLocked(recordFromMetadata(m, path));
  sp->result = path;
  done_.notify_all();
}

state::Result<std::string> CheckpointCoordinator::triggerSavepoint(const std::string& targetDir,
                                                                   state::SnapshotFormat format,
                                                                   std::chrono::milliseconds timeout) {
  auto storage = state::openStorage(targetDir);
  if (!storage.ok()) return storage.status();
  SavepointRequest req;
  req.storage = std::move(*storage);
  req.format = format;
  static std::mt19937_64 rng{std::random_device{}()};
  char rnd[16];
  std::snprintf(rnd, sizeof rnd, "%012llx", static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
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
    if (pending_ && pending_->savepoint == &req) abortLocked(pending_->id, "timed out");
    return Status::IOError("savepoint timed out");
  }
  return std::move(*req.result);
}

void CheckpointCoordinator::discardAll() {
  std::lock_guard lock(mu_);
  for (const auto& m : retained_)
    if (Status s = storage_->remove(chkDir(m.checkpointId) + "/" + state::kMetadataFileName); !s.ok() && !s.isNotFound())
      spdlog::warn("could not delete checkpoint {}: {}", m.checkpointId, s.toString());
  for (const auto& m : retained_)
    for (auto it = history_.rbegin(); it != history_.rend(); ++it)
      if (it->id == m.checkpointId && it->triggerTimeMs == m.timestampMs && !it->subsumed) {
        CheckpointRecord r = *it;
        r.subsumed = true;
        recordLocked(r);
        break;
      }
  retained_.clear();
  Status s = storage_->removeAll("");
  if (!s.ok()) spdlog::warn("could not delete {}: {}", options_.storageRootDescription, s.toString());
}

std::optional<state::CheckpointMetadata> CheckpointCoordinator::latestCompleted() const {
  std::lock_guard lock(mu_);
  if (retained_.empty()) return std::nullopt;
  return retained_.back();
}

std::string CheckpointCoordinator::pathOf(uint64_t id) const { return storage_->describe(chkDir(id)); }

uint64_t CheckpointCoordinator::completedCount() const {
  std::lock_guard lock(mu_);
  return completed_;
}

// ---------------------------------------------------------------------------------------

namespace {
uint64_t chkNumber(const std::string& name) {
  if (name.rfind("chk-", 0) != 0 || name.size() == 4) return 0;
  uint64_t n = 0;
  for (size_t i = 4; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return 0;
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return n;
}
}  // namespace

state::Result<ResolvedSnapshot> resolveSnapshot(const std::string& input) {
  std::error_code ec;
  fs::path p = fs::absolute(input, ec);
  if (ec || !fs::exists(p, ec))
    return Status::NotFound("snapshot path '" + input + "' does not exist");
  p = fs::weakly_canonical(p, ec);
  ResolvedSnapshot r;
  fs::path dir;
  if (fs::is_regular_file(p)) {
    if (p.filename() != state::kMetadataFileName)
      return Status::InvalidArgument("'" + input + "' is a file, not a snapshot: pass a chk-<n> or savepoint directory, "
                                     "its _metadata file, or a job's checkpoint directory");
    dir = p.parent_path();
  } else if (fs::is_directory(p)) {
    if (fs::exists(p / state::kMetadataFileName)) {
      dir = p;
    } else {
      uint64_t best = 0;
      std::vector<std::string> incomplete;
      for (const auto& e : fs::directory_iterator(p, ec)) {
        uint64_t n = chkNumber(e.path().filename().string());
        if (!n || !e.is_directory()) continue;
        if (fs::exists(e.path() / state::kMetadataFileName)) best = std::max(best, n);
        else incomplete.push_back(e.path().filename().string());
      }
      if (!best) {
        std::string more = incomplete.empty() ? "" : " (incomplete, without _metadata: " + incomplete.front() +
                                                         (incomplete.size() > 1 ? ", ..." : "") + ")";
        return Status::NotFound("'" + input + "' is not a snapshot: it has no _metadata and no completed chk-<n>" +
                                more);
      }
      dir = p / ("chk-" + std::to_string(best));
      r.note = "using the latest complete checkpoint in " + p.string() + ": chk-" + std::to_string(best);
    }
  } else {
    return Status::InvalidArgument("'" + input + "' is neither a file nor a directory");
  }
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

}  // namespace jobhost::host
