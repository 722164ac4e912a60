// jobhost/state/snapshot_registry.h — the one owner of the files under a checkpoint
// directory: which complete snapshot references which file, and what may be deleted.
//
// A SnapshotRegistry covers one storage root: a job's checkpoint directory
// (<state.checkpoints.dir>/<jobId>, see checkpoint_layout.h) or a directory of savepoints.
// Every immediate subdirectory holding a `_metadata` is a complete snapshot; the registry
// knows, for every file any of them references, which snapshots do. It is rebuilt from the
// `_metadata` files (load()) on every start and attempt, as Flink's SharedStateRegistry is
// re-registered from the completed checkpoint store, and it is the only component that
// deletes snapshot files: subsumption, aborts, recovery clean-up, claim disposal,
// DELETE_ON_CANCELLATION, `savepoint -d` and `gc` all call it (STYLE.md rule 13).
//
// Deletion order (crash safe): a snapshot's `_metadata` goes first — from then on the
// snapshot does not exist — then every file it references that no other registered
// snapshot references, then whatever else is left under its directory. A crash in between
// leaves garbage (files no `_metadata` names), never a `_metadata` whose files are gone.
//
// Garbage is what no complete snapshot references: `chk-<n>` directories without
// `_metadata` (never completed), files under `shared/` no snapshot references, and
// temporary files of writes that never completed. A live writer's in-flight files look
// exactly like garbage, so only the owner of the directory — the process holding its lock
// (host/checkpoint/job_directory_lock.h), with no writer of its own running — may collect
// it. A `_metadata` that cannot be read makes every unreferenced shared file "kept": the
// registry cannot know what that snapshot references.
//
// Thread-safety: publish(), discard() and discardIncomplete() may run at the same time on
// different threads (the checkpoint coordinator publishes on the uploader thread while its
// cleaner deletes): the registry locks its bookkeeping but never holds that lock across a
// storage request, so a deletion whose requests the store keeps failing holds up no
// publish. A file is removed only if, checked just before its request, no registered
// snapshot references it. Everything else (load, the accessors, findGarbage, collect) is
// for an owner with no writer running. The storage must be safe to use from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

/// One file the registry removed or would remove, and why.
struct RemovedFile {
  std::string path;  // storage-relative
  uint64_t size = 0;
  std::string reason;  // e.g. "never completed", "referenced by no checkpoint"
  bool temporary = false;  // an in-flight temporary name (CheckpointStorage::listTemporary)
};

class SnapshotRegistry {
 public:
  /// Reads every `<dir>/_metadata` directly under the storage root. A `_metadata` that
  /// cannot be read or parsed is recorded in unreadable() (with the reason), not fatal.
  /// Fails only if the storage cannot be listed or a present `_metadata` cannot be read
  /// for an I/O reason (IOError, NoSpace, PermissionDenied: worth retrying).
  /// A `_metadata` that is listed but gone when read (removed meanwhile) makes it list
  /// again, a few times over ~0.5 s, then counts as removed.
  static Result<SnapshotRegistry> load(std::shared_ptr<CheckpointStorage> storage);
  /// A registry of the one snapshot in directory `dir` under the storage root, for a
  /// self-contained snapshot (a savepoint) among unrelated ones: reads nothing else, and
  /// so never deletes a file outside `dir` (it cannot know who else references it) and
  /// finds no garbage. NotFound if `dir` has no `_metadata`; Corruption if it cannot be
  /// parsed.
  static Result<SnapshotRegistry> loadOne(std::shared_ptr<CheckpointStorage> storage, const std::string& dir);

  /// Complete snapshots by directory name ("chk-7", "savepoint-3f0c9a-..."); paths in the
  /// metadata are relative to the storage root.
  const std::map<std::string, CheckpointMetadata>& snapshots() const { return snapshots_; }
  /// Directories whose `_metadata` exists but cannot be read, with the reason.
  const std::map<std::string, std::string>& unreadable() const { return unreadable_; }
  /// Complete checkpoints (`chk-<n>` with a readable `_metadata`), by id.
  std::vector<uint64_t> checkpointIds() const;
  const CheckpointMetadata* checkpoint(uint64_t id) const;
  /// The highest id of any `chk-<n>` directory seen, complete or not (0 if none): a new
  /// checkpoint must be numbered above it.
  uint64_t highestCheckpointIdSeen() const { return highestSeen_; }
  /// The snapshots (directory names) that reference `path`.
  std::vector<std::string> referencesOf(const std::string& path) const;
  CheckpointStorage& storage() { return *storage_; }
  const std::shared_ptr<CheckpointStorage>& storagePtr() const { return storage_; }

  /// Publishes a snapshot: writes `<dir>/_metadata` durably (never overwriting) and
  /// registers it. Every file it references must already be durable. On failure nothing
  /// is published (a `_metadata` that became visible before the failure is removed again,
  /// best effort).
  Status publish(const std::string& dir, const CheckpointMetadata& metadata);

  /// Deletes a registered snapshot in the crash-safe order (see the file comment).
  /// `removed` (optional) receives the files removed. NotFound if `dir` is not registered.
  /// Removal errors of individual files after `_metadata` is gone are reported in the
  /// Status but leave the registry consistent (the snapshot is unregistered).
  Status discard(const std::string& dir, std::vector<RemovedFile>* removed = nullptr);

  /// Deletes what a snapshot that never completed wrote: everything under `dir` (which has
  /// no `_metadata`; InvalidArgument if it has one), and those of `uploadedElsewhere`
  /// (e.g. shared files an aborted checkpoint uploaded) that no registered snapshot
  /// references.
  Status discardIncomplete(const std::string& dir, const std::vector<FileRef>& uploadedElsewhere = {},
                           std::vector<RemovedFile>* removed = nullptr);

  /// What no complete snapshot references (see the file comment), sorted by path. Only
  /// meaningful for a job directory, and only for the lock holder with no writer running.
  /// `kept` (optional) receives a line for each thing deliberately left alone.
  Result<std::vector<RemovedFile>> findGarbage(std::vector<std::string>* kept = nullptr) const;
  /// Removes files found by findGarbage(); then removes directories left empty.
  Status collect(const std::vector<RemovedFile>& garbage, std::vector<RemovedFile>* removed = nullptr);

 private:
  static Result<SnapshotRegistry> loadOnce(std::shared_ptr<CheckpointStorage> storage, bool* vanished);
  explicit SnapshotRegistry(std::shared_ptr<CheckpointStorage> storage) : storage_(std::move(storage)) {}
  void add(const std::string& dir, CheckpointMetadata m);
  /// True if every reference to a file outside its own snapshot directory is known.
  bool knowsAllReferences() const { return !partial_ && unreadable_.empty(); }
  /// True if a registered snapshot references a file under `dir`.
  bool referencesUnder(const std::string& dir) const;
  /// Removes `path` unless a registered snapshot references it; NotFound is fine. Called
  /// without the lock (it takes it for the check).
  Status removeIfUnreferenced(const FileRef& f, const std::string& reason, std::vector<RemovedFile>* removed);
  bool isReferenced(const std::string& path) const;

  std::shared_ptr<CheckpointStorage> storage_;
  /// Guards the maps below in publish/discard/discardIncomplete; never held across a
  /// storage request. (A pointer: the registry is moved around.)
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
  std::set<std::string> discarding_;  // directories a discard() is removing
  std::map<std::string, CheckpointMetadata> snapshots_;
  std::map<std::string, std::string> unreadable_;
  std::map<std::string, std::set<std::string>> referencedBy_;  // file path -> snapshot dirs
  uint64_t highestSeen_ = 0;
  bool partial_ = false;  // loadOne(): other snapshots under the root are unknown
};

}  // namespace jobhost::state
