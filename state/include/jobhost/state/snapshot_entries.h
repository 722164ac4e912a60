// jobhost/state/snapshot_entries.h — the logical entries of one operator's keyed state in
// a snapshot, whatever backend, handle type or parallelism wrote it.
//
// The single owner of "iterate the entries of a snapshot" for readers that do not restore
// a backend (`jobhost state ls|dump|diff`, the dashboard's state view). Every handle type
// is read through the CheckpointStorage interface:
//  - KeyGroupsStateHandle (hashmap snapshots, rocksdb full snapshots, canonical
//    savepoints): streamed from the key-group file, one key group at a time;
//  - IncrementalRemoteKeyedStateHandle (rocksdb incremental checkpoints and native
//    savepoints): its files are copied into a private temporary directory (mode 0700),
//    opened read-only with RocksDB and scanned key group by key group; the copy is
//    removed when the reader moves to another handle and when it is destroyed.
//
// Pinning: open() opens every file the operator's handles reference before anything is
// read, and keeps them open. A running job may delete a checkpoint it no longer retains
// at any time (it holds the directory's lock; readers do not take it): once open() has
// succeeded that cannot disturb the reader (an open file stays readable after unlink);
// a file already gone when open() runs is reported as NotFound naming it. Nothing is
// ever written to or below the snapshot.
//
// Order: key group by key group, as the caller asks; within a key group, in the order
// the handle stores them (sorted for rocksdb, hash order for the heap backend) — callers
// that need an order sort one key group, which bounds their memory by the largest key
// group rather than the whole state.
//
// Errors: Status values; a damaged file (truncated, wrong size, unparsable) is
// Corruption naming the file; I/O errors keep their code.
//
// Thread-safety: one reader is used by one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/state/checkpoint_metadata.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

struct LogicalEntry {
  int state = 0;  // index into OperatorSnapshot::states
  int keyGroup = 0;
  std::string_view key;      // serialized key
  std::string_view userKey;  // serialized map key; empty unless MapState
  std::string_view value;    // serialized value (ListState: the length-prefixed elements)
};

class OperatorStateReader {
 public:
  /// Opens and pins every file of `op`'s keyed handles in `storage` (which must outlive
  /// the reader). `tempRoot`: where the private directory for rocksdb copies is created
  /// (empty: the system temp directory).
  static Result<std::unique_ptr<OperatorStateReader>> open(CheckpointStorage& storage, const OperatorSnapshot& op,
                                                           int maxParallelism, const std::string& tempRoot = "");
  virtual ~OperatorStateReader() = default;

  /// Visits every entry of key group `kg` (0 <= kg < maxParallelism); a key group no
  /// handle covers has none. Stops at and returns fn's first error. The views in an
  /// entry are valid during its callback only.
  virtual Status readKeyGroup(int kg, const std::function<Status(const LogicalEntry&)>& fn) = 0;
  /// Every key group in order.
  Status readAll(const std::function<Status(const LogicalEntry&)>& fn);

  virtual const OperatorSnapshot& operatorSnapshot() const = 0;
  virtual int maxParallelism() const = 0;
  /// The subtask whose handle holds key group kg (-1: none).
  virtual int subtaskOf(int kg) const = 0;
};

}  // namespace jobhost::state
