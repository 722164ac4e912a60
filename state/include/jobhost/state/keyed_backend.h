// jobhost/state/keyed_backend.h — the keyed state backend interface and its factories.
//
// One backend instance holds the keyed state of one stateful operator in one subtask,
// for the key groups in its range. The runtime sets the current key before each record;
// the SDK's typed state objects call the KeyedStateAccess methods.
//
// Checkpointing is two-phase: snapshotSync() runs on the task thread while records are
// paused and must be cheap (heap: copy-on-write marks; rocksdb: flush + native
// checkpoint); the AsyncSnapshot it returns writes the files on a background thread and
// produces the handle. The backend may keep processing records while an AsyncSnapshot
// runs; at most one AsyncSnapshot per backend runs at a time. An aborted checkpoint's
// AsyncSnapshot stops early (SnapshotRequest::aborted).
//
// Thread-safety: every KeyedStateBackend method — state access, restore(),
// snapshotSync(), notifyCheckpointComplete(), notifyCheckpointAborted() — is called on
// the thread of the task that owns the backend, one at a time. AsyncSnapshot::run() and
// the AsyncSnapshot's destructor run on another thread and may overlap with any of those
// calls: whatever the backend shares with an AsyncSnapshot it must guard itself.
// Ordering: when notifyCheckpointComplete(N) or notifyCheckpointAborted(N) is called,
// this backend's AsyncSnapshot for N, if there is one, has returned from run() (so what
// run() recorded is visible) or will never run (an aborted checkpoint's part that had
// not started; it is destroyed without running, possibly concurrently).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/state_handle.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

enum class BackendType { kHashMap, kRocksDb };
const char* backendTypeName(BackendType t);  // "hashmap" / "rocksdb"

/// kNative: the backend's own format (rocksdb incremental if configured, else
/// key-group files). kCanonical: always the key-group format (savepoints, convert).
enum class SnapshotFormat { kNative, kCanonical };

/// RocksDB settings users choose (Flink's state.backend.rocksdb.* keys, Flink's defaults).
struct RocksDbOptions {
  enum class CompactionStyle { kLevel, kUniversal, kFifo };
  /// Memtable size per column family (state.backend.rocksdb.writebuffer.size). Default 64 MiB.
  uint64_t writeBufferSize = 64u << 20;
  /// Memtables per column family, the active one included (.writebuffer.count). Default 2.
  int writeBufferCount = 2;
  /// LRU block cache of one backend instance, shared by its column families
  /// (.block.cache-size). Default 8 MiB.
  uint64_t blockCacheSize = 8u << 20;
  /// state.backend.rocksdb.compaction.style. Default LEVEL.
  CompactionStyle compactionStyle = CompactionStyle::kLevel;
  /// Threads that upload a checkpoint's files and download them on restore
  /// (state.backend.rocksdb.checkpoint.transfer.thread.num). Default 4.
  int transferThreads = 4;
  /// Write-back cache of ValueState values and MapState entries in front of the DB, per
  /// backend instance (.entry-cache.size; rocksdb_entry_cache.h). 0 turns it off. Default
  /// 32 MiB: its table of 262143 slots holds up to about 200k small entries (keys to 40
  /// bytes, values to 15); the 131071 slots that fit 16 MiB held too few for NexmarkQ7 and
  /// Q8 at full speed (docs/benchmarks.md).
  uint64_t entryCacheSize = 32u << 20;
};

/// "LEVEL", "UNIVERSAL", "FIFO" (the configuration's spelling).
const char* compactionStyleName(RocksDbOptions::CompactionStyle style);

struct BackendOptions {
  std::string operatorUid;
  int subtaskIndex = 0;
  int maxParallelism = 128;
  KeyGroupRange range;
  /// rocksdb: a private local working directory for this instance (created, wiped on
  /// open and on destruction).
  std::string localDir;
  bool incremental = false;  // rocksdb only
  RocksDbOptions rocksdb;    // rocksdb only
};

struct SnapshotRequest {
  uint64_t checkpointId = 0;
  SnapshotFormat format = SnapshotFormat::kNative;
  CheckpointStorage* storage = nullptr;  // not owned; outlives the AsyncSnapshot
  /// Directory (within storage) for files owned by this snapshot only, e.g. "chk-7".
  std::string exclusiveDir;
  /// Directory for files that later checkpoints may reference, e.g. "shared". Empty
  /// means "self-contained": every file goes to exclusiveDir and nothing is reused.
  std::string sharedDir;
  /// Unique per operator subtask, used in file names, e.g. "counts-0".
  std::string filePrefix;
  /// Becomes true (never false again) once the checkpoint is aborted; null: never.
  /// AsyncSnapshot::run() checks it before each file and each key group and, once set,
  /// stops writing and returns an IOError naming the checkpoint ("... was aborted").
  std::shared_ptr<const std::atomic<bool>> aborted;

  bool isAborted() const { return aborted && aborted->load(std::memory_order_acquire); }
  /// What run() returns once isAborted(), e.g. "IO error: checkpoint 7 was aborted;
  /// stopped writing /ckpt/job/chk-7/counts-0.kg".
  Status abortedError(const std::string& what) const {
    return Status::IOError("checkpoint " + std::to_string(checkpointId) + " was aborted; stopped writing " + what);
  }
};

/// The background half of a snapshot.
class AsyncSnapshot {
 public:
  virtual ~AsyncSnapshot() = default;
  /// Writes the snapshot's files (durably: each file fsynced and published) and returns
  /// the handle. On error, files it wrote may remain (the caller cleans up the
  /// exclusive directory); shared files are never deleted here. Returns early with an
  /// error once request.aborted is set; a file being written then is discarded.
  virtual Result<KeyedStateHandle> run() = 0;
};

/// A handle to restore from, with the states (in the order the handle refers to them
/// by index) recorded in the snapshot's metadata.
struct RestoreInput {
  CheckpointStorage* storage = nullptr;  // paths in the handles are relative to it
  std::vector<KeyedStateHandle> handles;  // every handle intersecting this range
  std::vector<StateDescriptorInfo> states;
};

class KeyedStateBackend : public KeyedStateAccess {
 public:
  /// Sets the key of the record being processed. `keyGroup` is in range().
  virtual void setCurrentKey(int keyGroup, std::string_view key) = 0;
  /// mapPut() of an entry the caller knows the current key does not have (the timer
  /// service writing a timer it has not written before). A backend may skip what it does
  /// for an existing entry: RocksDB's entry cache writes nothing, not even a tombstone, for
  /// such an entry removed again before the cache is written.
  virtual void mapPutAbsent(int state, std::string_view userKey, std::string_view value) {
    mapPut(state, userKey, value);
  }
  virtual const KeyGroupRange& range() const = 0;
  virtual BackendType type() const = 0;
  /// States registered so far (declaration order).
  virtual std::vector<StateDescriptorInfo> states() const = 0;
  /// Loads state for this backend's key-group range from handles written by any
  /// backend of a compatible kind. Called once, before any state access. Entries of
  /// key groups outside range() are dropped (rescaling). States in the snapshot are
  /// registered with their recorded descriptors.
  virtual Status restore(const RestoreInput& input) = 0;
  /// The synchronous part of a snapshot (see file comment).
  virtual Result<std::unique_ptr<AsyncSnapshot>> snapshotSync(const SnapshotRequest& request) = 0;
  /// A checkpoint this backend took part in completed: files it uploaded for it may be
  /// referenced by later incremental checkpoints.
  virtual void notifyCheckpointComplete(uint64_t checkpointId) {}
  /// A checkpoint was aborted: nothing it uploaded may be reused. Nothing is deleted.
  virtual void notifyCheckpointAborted(uint64_t checkpointId) {}
  /// Visits every entry of `state` in this backend's key groups, in an unspecified
  /// order: (key group, key, user key — empty unless MapState —, value). For rebuilding
  /// an index of keyed state after a restore (the timer queues); fn must not access
  /// this backend's state.
  virtual void forEachEntry(
      int state,
      const std::function<void(int keyGroup, std::string_view key, std::string_view userKey, std::string_view value)>&
          fn) = 0;
  /// Number of key entries (for tests and metrics); may be approximate for rocksdb.
  virtual uint64_t approximateEntries() const = 0;
};

Result<std::unique_ptr<KeyedStateBackend>> createHeapBackend(const BackendOptions& options);
Result<std::unique_ptr<KeyedStateBackend>> createRocksDbBackend(const BackendOptions& options);

}  // namespace jobhost::state
