// state/src/rocksdb_checkpoint_copy.h — a rocksdb incremental checkpoint copied into a
// private local directory and opened read-only, for readers that scan a snapshot without
// restoring a backend (snapshot_entries.cc). The live backend's own restore stays in
// rocksdb_backend.cc; both open the files with the same options (openRocksDbReadOnly).
//
// Thread-safety: one object, one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/state_handle.h"
#include "jobhost/state/status.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
}  // namespace rocksdb

namespace jobhost::state {

/// Opens the RocksDB instance in `dir` read-only with one column family per state name
/// (rocksdb_backend.h's naming); handles->at(0) is the default column family. Defined in
/// rocksdb_backend.cc, with the backend's options.
Status openRocksDbReadOnly(const std::string& dir, const std::vector<std::string>& stateNames, rocksdb::DB** db,
                           std::vector<rocksdb::ColumnFamilyHandle*>* handles);
void closeRocksDb(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*>* handles);

class RocksCheckpointCopy {
 public:
  /// The files of `h` in the order sharedFiles then privateFiles, opened by the caller.
  /// Copies them into `dir` (created, mode 0700; must not exist) and opens the copy
  /// read-only. A file whose size differs from the recorded one, or that RocksDB cannot
  /// read, is Corruption naming the snapshot file.
  static Result<std::unique_ptr<RocksCheckpointCopy>> open(CheckpointStorage& storage, const IncrementalStateHandle& h,
                                                           const std::vector<const ReadableFile*>& files,
                                                           const std::string& dir);
  ~RocksCheckpointCopy();  // closes the instance and removes dir

  using EntryFn = std::function<Status(std::string_view key, std::string_view userKey, std::string_view value)>;
  /// The entries of h.columnFamilies[cf] in key group kg, in key order.
  Status scan(size_t cf, int kg, bool isMap, const EntryFn& fn);

 private:
  RocksCheckpointCopy() = default;
  std::string dir_;
  std::string what_;  // "rocksdb checkpoint 7 (/ckpt/job/chk-7/...)" for messages
  rocksdb::DB* db_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::vector<std::string> stateNames_;
};

}  // namespace jobhost::state
