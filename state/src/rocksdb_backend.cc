// state/src/rocksdb_backend.cc — the RocksDB keyed state backend (createRocksDbBackend).
//
// One RocksDB instance per backend, in <localDir>/db; one column family per declared
// state; key layout in rocksdb_backend.h. Writes never go to the WAL: as in Flink,
// durability comes only from checkpoints, so the local directory is scratch space
// (wiped on open and when the backend goes away).
//
// Snapshots:
//  - full (kCanonical, or kNative without incremental): the sync phase takes a RocksDB
//    snapshot; the async phase scans every column family under it, key group by key
//    group, into one key-group file (KeyGroupsStateHandle).
//  - incremental (kNative with incremental): the sync phase flushes the memtables and
//    hard-links a native RocksDB checkpoint into <localDir>/chk-*; the async phase
//    uploads the SSTs not already uploaded by a *completed* checkpoint to the shared
//    directory (never overwriting: a name taken by an aborted upload gets a unique
//    suffix) and the MANIFEST/CURRENT/OPTIONS files to the exclusive directory
//    (IncrementalStateHandle), as one FileBatch on options.transferThreads threads: no
//    file is published before all are durable, and an aborted or failed upload leaves
//    none of them.
//
// Restore reads both handle types; a single incremental handle covering the whole range
// becomes the live instance (keys outside the range are removed with DeleteRange),
// anything else is copied key group by key group into the live instance.
//
// The live instance opens lazily, at the first state access, snapshot or restore that
// needs it, with every registered state's column family in the one DB::Open: a restore
// never creates a throw-away empty DB nor column families one by one before the real
// open. Restore downloads on options.transferThreads threads; SSTs (immutable) become
// hard links to the checkpoint's files where the checkpoint is on the same file system,
// MANIFEST/CURRENT/OPTIONS (which RocksDB rewrites) are always copied; nothing is
// fsynced, since the local directory is scratch that every open() wipes.
//
// Thread-safety: as KeyedStateBackend (keyed_backend.h): every backend method runs on
// the task thread; AsyncSnapshot::run() may run on another thread concurrently with
// record processing. The DB and column-family handles live in a shared DbInstance that
// AsyncSnapshots keep alive; the incremental bookkeeping (confirmed/pending SSTs) is
// guarded by DbInstance::mu.
#include "rocksdb_backend.h"

#include <rocksdb/sst_file_reader.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "jobhost/errors.h"
#include "random_id.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/keyed_backend.h"
#include "jobhost/state/snapshot_file.h"
#include "parallel_transfer.h"
#include "rocksdb_checkpoint_copy.h"
#include "rocksdb_entry_cache.h"

namespace jobhost::state {

namespace fs = std::filesystem;
namespace layout = rocksdb_layout;

namespace {

constexpr size_t kRestoreBatchBytes = 4u << 20;  // WriteBatch size during restore

// ----------------------------------------------------------------------------------
// Helpers

Status fromRocks(const rocksdb::Status& s, const std::string& context) {
  std::string msg = context + ": rocksdb: " + s.ToString();
  if (s.IsCorruption()) return Status::Corruption(msg);
  if (s.IsNotFound()) return Status::NotFound(msg);
  if (s.IsNoSpace()) return Status::NoSpace(msg);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(msg);
  return Status::IOError(msg);
}

Status fromErrorCode(const std::string& context, const std::error_code& ec) {
  return fromErrno(context, ec.value());
}

/// The same code as s with `context: ` in front of the message.
Status withContext(const Status& s, const std::string& context) {
  std::string msg = context + ": " + s.message();
  switch (s.code()) {
    case Status::Code::kOk:
      return Status::OK();
    case Status::Code::kNotFound:
      return Status::NotFound(msg);
    case Status::Code::kCorruption:
      return Status::Corruption(msg);
    case Status::Code::kInvalidArgument:
      return Status::InvalidArgument(msg);
    case Status::Code::kNoSpace:
      return Status::NoSpace(msg);
    case Status::Code::kPermissionDenied:
      return Status::PermissionDenied(msg);
    case Status::Code::kIncompatible:
      return Status::Incompatible(msg);
    case Status::Code::kUnavailable:
      return Status::Unavailable(msg);
    case Status::Code::kIOError:
      break;
  }
  return Status::IOError(msg);
}

std::string joinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool isSst(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".sst") == 0;
}

/// A file name usable inside a local directory (no separators, not . or ..).
bool isPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

/// ListState append: concatenation, no delimiter (elements carry their own length).
class ConcatMergeOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& /*key*/, const rocksdb::Slice* existing,
             const rocksdb::Slice& value, std::string* newValue,
             rocksdb::Logger* /*logger*/) const override {
    newValue->clear();
    if (existing != nullptr) {
      newValue->reserve(existing->size() + value.size());
      newValue->append(existing->data(), existing->size());
    }
    newValue->append(value.data(), value.size());
    return true;
  }
  const char* Name() const override { return "jobhost.ConcatMergeOperator"; }
};

/// RocksDB's POSIX file system creates files 0644 minus the umask, and 7.8 does not
/// implement Env::SetAllowNonOwnerAccess(false) (the base class answers NotSupported).
/// So every file RocksDB creates goes through this wrapper, which chmods it to 0600 right
/// after creation, before a byte of state is written to it — whatever the umask. The
/// directories above it are 0700 (the host's job_work_directory.h), so nobody else can
/// reach the file in between. Hard links (checkpoints) share the inode and its mode.
class PrivateFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  explicit PrivateFileSystem(const std::shared_ptr<rocksdb::FileSystem>& target) : FileSystemWrapper(target) {}
  static const char* kClassName() { return "JobhostPrivateFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r, rocksdb::IODebugContext* d) override {
    return ownerOnly(f, target()->NewWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    return ownerOnly(f, target()->ReopenWritableFile(f, o, r, d));
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old, const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return ownerOnly(f, target()->ReuseWritableFile(f, old, o, r, d));
  }
  rocksdb::IOStatus NewRandomRWFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* r, rocksdb::IODebugContext* d) override {
    return ownerOnly(f, target()->NewRandomRWFile(f, o, r, d));
  }
  rocksdb::IOStatus LockFile(const std::string& f, const rocksdb::IOOptions& o, rocksdb::FileLock** l,
                             rocksdb::IODebugContext* d) override {
    return ownerOnly(f, target()->LockFile(f, o, l, d));
  }
  rocksdb::IOStatus NewLogger(const std::string& f, const rocksdb::IOOptions& o, std::shared_ptr<rocksdb::Logger>* r,
                              rocksdb::IODebugContext* d) override {
    return ownerOnly(f, target()->NewLogger(f, o, r, d));
  }

 private:
  static rocksdb::IOStatus ownerOnly(const std::string& f, rocksdb::IOStatus s) {
    if (s.ok() && ::chmod(f.c_str(), 0600) != 0)
      return rocksdb::IOStatus::IOError("cannot make " + f + " private (chmod 0600): " + std::strerror(errno));
    return s;
  }
};

rocksdb::Env* privateEnv() {
  static const std::unique_ptr<rocksdb::Env> env =
      rocksdb::NewCompositeEnv(std::make_shared<PrivateFileSystem>(rocksdb::FileSystem::Default()));
  return env.get();
}

rocksdb::DBOptions makeDbOptions() {
  rocksdb::DBOptions o;
  o.env = privateEnv();
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.max_background_jobs = 2;
  o.avoid_flush_during_shutdown = true;  // the directory is wiped anyway
  o.keep_log_file_num = 2;
  o.max_log_file_size = 4u << 20;
  return o;
}

/// Column family options from the user's settings; `cache` is the instance's block cache
/// (null: a private one of the configured size, for a short-lived read-only instance).
rocksdb::ColumnFamilyOptions makeCfOptions(const RocksDbOptions& ro, std::shared_ptr<rocksdb::Cache> cache) {
  static std::shared_ptr<rocksdb::MergeOperator> merge = std::make_shared<ConcatMergeOperator>();
  static std::shared_ptr<const rocksdb::FilterPolicy> bloom(
      rocksdb::NewBloomFilterPolicy(10, false));
  rocksdb::ColumnFamilyOptions o;
  o.write_buffer_size = ro.writeBufferSize;
  o.max_write_buffer_number = ro.writeBufferCount;
  switch (ro.compactionStyle) {
    case RocksDbOptions::CompactionStyle::kLevel:
      o.compaction_style = rocksdb::kCompactionStyleLevel;
      break;
    case RocksDbOptions::CompactionStyle::kUniversal:
      o.compaction_style = rocksdb::kCompactionStyleUniversal;
      break;
    case RocksDbOptions::CompactionStyle::kFifo:
      o.compaction_style = rocksdb::kCompactionStyleFIFO;
      break;
  }
  o.merge_operator = merge;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = cache ? std::move(cache) : rocksdb::NewLRUCache(ro.blockCacheSize);
  t.filter_policy = bloom;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

/// Opens the DB in `dir` with the default column family plus `cfNames` (column family
/// names, not state names). handles->at(0) is the default column family.
Status openDb(const std::string& dir, const std::vector<std::string>& cfNames, bool readOnly,
              const rocksdb::ColumnFamilyOptions& cfo, rocksdb::DB** db,
              std::vector<rocksdb::ColumnFamilyHandle*>* handles) {
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  descs.emplace_back(rocksdb::kDefaultColumnFamilyName, cfo);
  for (const auto& n : cfNames) descs.emplace_back(n, cfo);
  rocksdb::DBOptions dbo = makeDbOptions();
  rocksdb::Status s;
  if (readOnly) {
    dbo.create_if_missing = false;
    dbo.create_missing_column_families = false;
    s = rocksdb::DB::OpenForReadOnly(dbo, dir, descs, handles, db);
  } else {
    s = rocksdb::DB::Open(dbo, dir, descs, handles, db);
  }
  if (!s.ok()) {
    *db = nullptr;
    handles->clear();
    return fromRocks(s, "cannot open RocksDB instance in " + dir);
  }
  return Status::OK();
}

void closeDb(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*>* handles) {
  if (db == nullptr) return;
  for (auto* h : *handles) {
    if (h != nullptr) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  }
  handles->clear();
  db->Close().PermitUncheckedError();
  delete db;
}

// ----------------------------------------------------------------------------------
// DbInstance: the live RocksDB and its column families, shared with AsyncSnapshots.

struct DbInstance {
  rocksdb::ColumnFamilyOptions cfOptions;  // every column family's (the user's settings)
  std::string localDir;
  std::string dbDir;
  rocksdb::DB* db = nullptr;
  rocksdb::ColumnFamilyHandle* defaultCf = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;  // index = state id

  // Incremental bookkeeping, guarded by mu (AsyncSnapshot::run records pending files
  // on its thread; notifications arrive on the task thread).
  std::mutex mu;
  std::map<std::string, SharedFileRef>
      confirmed;  // SST name -> ref of the last completed checkpoint
  std::map<uint64_t, std::map<std::string, SharedFileRef>> pending;  // checkpoint -> all its SSTs
  uint64_t lastCompleted = 0;

  ~DbInstance() {
    close();
    if (!localDir.empty()) {
      std::error_code ec;
      fs::remove_all(localDir, ec);
    }
  }

  void close() {
    if (db == nullptr) return;
    std::vector<rocksdb::ColumnFamilyHandle*> all;
    all.push_back(defaultCf);
    all.insert(all.end(), cfs.begin(), cfs.end());
    closeDb(db, &all);
    db = nullptr;
    defaultCf = nullptr;
    std::fill(cfs.begin(), cfs.end(), nullptr);
  }
};

// ----------------------------------------------------------------------------------
// Full snapshot: scan all column families under a RocksDB snapshot into a key-group file.

class FullAsyncSnapshot : public AsyncSnapshot {
 public:
  FullAsyncSnapshot(std::shared_ptr<DbInstance> inst, const rocksdb::Snapshot* snap,
                    std::vector<rocksdb::ColumnFamilyHandle*> cfs,
                    std::vector<StateDescriptorInfo> states, KeyGroupRange range,
                    SnapshotRequest request)
      : inst_(std::move(inst)),
        snap_(snap),
        cfs_(std::move(cfs)),
        states_(std::move(states)),
        range_(range),
        request_(std::move(request)) {}

  ~FullAsyncSnapshot() override { release(); }

  Result<KeyedStateHandle> run() override {
    if (snap_ == nullptr)
      return Status::InvalidArgument("rocksdb full snapshot: run() called twice");
    Result<KeyedStateHandle> r = write();
    release();
    return r;
  }

 private:
  void release() {
    if (snap_ != nullptr) {
      inst_->db->ReleaseSnapshot(snap_);
      snap_ = nullptr;
    }
  }

  Result<KeyedStateHandle> write() {
    const std::string path = joinPath(request_.exclusiveDir, request_.filePrefix + ".kg");
    if (request_.isAborted()) return request_.abortedError(request_.storage->describe(path));
    auto writer = KeyGroupWriter::create(*request_.storage, path, states_, range_);
    if (!writer.ok()) return writer.status();
    KeyGroupWriter& w = **writer;

    rocksdb::ReadOptions ro;
    ro.snapshot = snap_;
    ro.fill_cache = false;
    std::string lower;
    layout::appendKeyGroup(&lower, std::max(range_.start, 0));
    // Iterators advance monotonically: every column family is sorted by key group, so
    // one seek per column family and then a merge over the key groups in order.
    std::vector<std::unique_ptr<rocksdb::Iterator>> its;
    for (auto* cf : cfs_) {
      its.emplace_back(inst_->db->NewIterator(ro, cf));
      its.back()->Seek(lower);
    }
    Status s;
    for (int kg = range_.start; kg <= range_.end && s.ok(); ++kg) {
      if (request_.isAborted()) {
        s = request_.abortedError(request_.storage->describe(path));  // the writer discards the file
        break;
      }
      s = w.beginKeyGroup(kg);
      for (size_t i = 0; i < its.size() && s.ok(); ++i) {
        rocksdb::Iterator* it = its[i].get();
        const bool isMap = states_[i].kind == StateKind::kMap;
        for (; it->Valid(); it->Next()) {
          rocksdb::Slice k = it->key();
          std::string_view kv(k.data(), k.size());
          if (kv.size() < 2) {
            s = Status::Corruption("rocksdb state '" + states_[i].name + "' holds a key of " +
                                   std::to_string(kv.size()) + " bytes (no key group)");
            break;
          }
          int entryKg = layout::decodeKeyGroup(kv);
          if (entryKg < kg) continue;  // below the range: skip (not expected)
          if (entryKg > kg) break;
          rocksdb::Slice v = it->value();
          std::string_view value(v.data(), v.size());
          if (isMap) {
            std::string_view key, userKey;
            if (!layout::decodeMapKey(kv, &key, &userKey)) {
              s = Status::Corruption("rocksdb state '" + states_[i].name +
                                     "' holds a malformed map key");
              break;
            }
            s = w.add(static_cast<int>(i), key, userKey, value);
          } else {
            s = w.add(static_cast<int>(i), kv.substr(2), {}, value);
          }
          if (!s.ok()) break;
        }
        if (s.ok() && !it->status().ok()) {
          s = fromRocks(it->status(), "rocksdb snapshot scan of state '" + states_[i].name + "'");
        }
      }
    }
    its.clear();
    if (!s.ok()) return s;
    auto handle = w.finish();
    if (!handle.ok()) return handle.status();
    return KeyedStateHandle(std::move(handle).value());
  }

  std::shared_ptr<DbInstance> inst_;
  const rocksdb::Snapshot* snap_;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs_;
  std::vector<StateDescriptorInfo> states_;
  KeyGroupRange range_;
  SnapshotRequest request_;
};

// ----------------------------------------------------------------------------------
// Incremental snapshot: upload a native RocksDB checkpoint, reusing confirmed SSTs.

class IncrementalAsyncSnapshot : public AsyncSnapshot {
 public:
  IncrementalAsyncSnapshot(std::shared_ptr<DbInstance> inst, std::string localCheckpointDir,
                           std::map<std::string, SharedFileRef> base, std::string backendId,
                           std::vector<std::string> columnFamilies, KeyGroupRange range,
                           SnapshotRequest request, int threads)
      : inst_(std::move(inst)),
        dir_(std::move(localCheckpointDir)),
        base_(std::move(base)),
        backendId_(std::move(backendId)),
        columnFamilies_(std::move(columnFamilies)),
        range_(range),
        request_(std::move(request)),
        threads_(threads) {}

  ~IncrementalAsyncSnapshot() override { removeLocal(); }

  Result<KeyedStateHandle> run() override {
    if (done_) return Status::InvalidArgument("rocksdb incremental snapshot: run() called twice");
    done_ = true;
    Result<KeyedStateHandle> r = upload();
    removeLocal();
    return r;
  }

 private:
  void removeLocal() {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }

  /// Adds an SST to the batch for the shared directory under <backendId>-<name>, or,
  /// when that name is taken (an upload of an aborted checkpoint), under a unique variant
  /// of it.
  Status uploadShared(FileBatch& batch, const std::string& local, const std::string& name, std::string* path) {
    CheckpointStorage& st = *request_.storage;
    const std::string base = joinPath(request_.sharedDir, backendId_ + "-" + name);
    const std::string withId = base + "-" + std::to_string(request_.checkpointId);
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string candidate = attempt == 0   ? base
                              : attempt == 1 ? withId
                                             : withId + "-" + std::to_string(attempt);
      if (st.exists(candidate)) continue;
      Status s = batch.putFile(candidate, local);
      if (s.ok()) {
        *path = std::move(candidate);
        return s;
      }
      // Lost a race with another creator of the same path: try the next name.
      if (s.isInvalidArgument() && st.exists(candidate)) continue;
      return s;
    }
    return Status::IOError("cannot find a free shared file name for " + st.describe(base));
  }

  Result<KeyedStateHandle> upload() {
    CheckpointStorage& st = *request_.storage;
    const bool selfContained = request_.sharedDir.empty();
    std::vector<std::pair<std::string, uint64_t>> files;  // name, size
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      uint64_t size = it->file_size(ec);
      if (ec) break;
      files.emplace_back(it->path().filename().string(), size);
    }
    if (ec) return fromErrorCode("cannot list local RocksDB checkpoint " + dir_, ec);
    std::sort(files.begin(), files.end());

    IncrementalStateHandle h;
    h.backendId = backendId_;
    h.checkpointId = request_.checkpointId;
    h.range = range_;
    h.columnFamilies = columnFamilies_;
    // Every file goes into one FileBatch, on threads_ threads, largest first: each is
    // copied and made durable under a temporary name as it is added (the fsyncs of the
    // threads overlap), and commit() publishes them all with one fsync per directory —
    // two dependent journal commits, where a putFile() per file in two rounds (SSTs,
    // then the rest) waited for at least four. The abort is checked before each file
    // starts and before the commit; an abort or a failure drops the uncommitted batch,
    // which leaves none of its files, so an aborted upload leaves nothing in the
    // exclusive directory (nor in the shared one). run() returns (so the caller can
    // publish _metadata) only once every file is published and durable. A creator
    // racing for one of the shared names (found by commit()) fails the checkpoint; the
    // next one sees the name taken and picks another.
    std::vector<SharedFileRef> refs(files.size());
    std::vector<size_t> order(files.size());  // indices into files, largest first
    for (size_t i = 0; i < files.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return files[a].second > files[b].second; });
    std::unique_ptr<FileBatch> batch = st.createBatch();
    std::atomic<size_t> started{0};
    auto abortedError = [&] {
      return request_.abortedError("the RocksDB files of " + request_.filePrefix + " to " +
                                   st.describe(request_.exclusiveDir) + " (" + std::to_string(started.load()) +
                                   " of " + std::to_string(files.size()) + " started)");
    };
    auto transfer = [&](size_t i) -> Status {
      if (request_.isAborted()) return abortedError();
      started.fetch_add(1);
      const auto& [name, size] = files[i];
      const std::string local = dir_ + "/" + name;
      SharedFileRef& ref = refs[i];
      ref.localName = name;
      ref.file.size = size;
      ref.createdByCheckpoint = request_.checkpointId;
      auto b = base_.find(name);
      if (isSst(name) && !selfContained && b != base_.end() && b->second.file.size == size) {
        ref = b->second;  // uploaded by a completed checkpoint: reference it unchanged
        return Status::OK();
      }
      if (isSst(name) && !selfContained) return uploadShared(*batch, local, name, &ref.file.path);
      ref.file.path = joinPath(request_.exclusiveDir, request_.filePrefix + "-" + name);
      return batch->putFile(ref.file.path, local);
    };
    Status s = runParallel(order.size(), threads_, [&](size_t k) { return transfer(order[k]); });
    // Every transfer has returned (runParallel waits for them): nothing adds any more.
    if (s.ok() && request_.isAborted()) s = abortedError();
    if (s.ok()) s = batch->commit();
    if (!s.ok()) return s;  // the uncommitted batch removes its files as it goes
    std::map<std::string, SharedFileRef> all;
    for (size_t i = 0; i < files.size(); ++i) {
      if (isSst(files[i].first)) {
        all[files[i].first] = refs[i];
        h.sharedFiles.push_back(std::move(refs[i]));
      } else {
        h.privateFiles.push_back(std::move(refs[i]));
      }
    }
    if (!selfContained) {
      std::lock_guard<std::mutex> lock(inst_->mu);
      inst_->pending[request_.checkpointId] = std::move(all);
    }
    return KeyedStateHandle(std::move(h));
  }

  std::shared_ptr<DbInstance> inst_;
  std::string dir_;
  std::map<std::string, SharedFileRef> base_;
  std::string backendId_;
  std::vector<std::string> columnFamilies_;
  KeyGroupRange range_;
  SnapshotRequest request_;
  int threads_;
  bool done_ = false;
};

// ----------------------------------------------------------------------------------
// The backend.

class RocksDbBackend final : public KeyedStateBackend {
 public:
  explicit RocksDbBackend(const BackendOptions& options)
      : options_(options),
        inst_(std::make_shared<DbInstance>()),
        backendId_(randomHexId(16)),
        cache_(options.rocksdb.entryCacheSize) {
    writeOptions_.disableWAL = true;
    inst_->cfOptions = makeCfOptions(options_.rocksdb, rocksdb::NewLRUCache(options_.rocksdb.blockCacheSize));
  }

  Status open() {
    const std::string& dir = options_.localDir;
    if (dir.empty())
      return Status::InvalidArgument("rocksdb backend: no local directory configured");
    std::error_code ec;
    fs::path abs = fs::absolute(dir, ec);
    if (ec || abs.lexically_normal() == abs.root_path()) {
      return Status::InvalidArgument("rocksdb backend: refusing to use '" + dir +
                                     "' as local directory");
    }
    // Errors name the directory and the setting that chooses it (state.local.dir), and
    // keep the OS's code: a full or read-only disk is worth a retry, not a final error.
    fs::remove_all(dir, ec);
    if (ec) return fromErrorCode("cannot wipe rocksdb local directory " + dir + " (under state.local.dir)", ec);
    fs::create_directories(dir, ec);
    if (ec) return fromErrorCode("cannot create rocksdb local directory " + dir + " (under state.local.dir)", ec);
    inst_->localDir = dir;
    inst_->dbDir = joinPath(dir, "db");
    return Status::OK();  // the DB itself opens lazily (ensureOpen)
  }

  // --- KeyedStateAccess -------------------------------------------------------------

  int registerState(const StateDescriptorInfo& d) override {
    auto it = byName_.find(d.name);
    if (it != byName_.end()) {
      StateDescriptorInfo& existing = states_[it->second];
      if (existing.kind != d.kind) {
        throw StateError("state '" + d.name + "' is already registered as " +
                         stateKindName(existing.kind) + "; cannot register it as " +
                         stateKindName(d.kind));
      }
      existing = d;  // same kind: the latest declaration wins (e.g. after restore)
      return it->second;
    }
    // Before the DB is open the column family is created by the open itself.
    rocksdb::ColumnFamilyHandle* h = nullptr;
    if (inst_->db != nullptr) {
      rocksdb::Status s =
          inst_->db->CreateColumnFamily(inst_->cfOptions, layout::columnFamilyName(d.name), &h);
      if (!s.ok()) {
        throw StateError("cannot create RocksDB column family for state '" + d.name +
                         "': " + s.ToString());
      }
    }
    int id = static_cast<int>(states_.size());
    states_.push_back(d);
    inst_->cfs.push_back(h);
    byName_.emplace(d.name, id);
    return id;
  }

  using KeyedStateAccess::get;
  using KeyedStateAccess::mapGet;
  bool get(int state, std::string_view* out) override {
    auto* cf = valueCf(state, "get");
    // ListState values are merges of their appends: never cached.
    if (states_[state].kind == StateKind::kValue) return cachedGet(state, cf, valueKey_, out, "get");
    rocksdb::Status s = inst_->db->Get(readOptions_, cf, valueKey_, &got_);
    if (s.IsNotFound()) return false;
    check(s, state, "get");
    *out = got_;
    return true;
  }

  void put(int state, std::string_view value) override {
    auto* cf = valueCf(state, "put");
    if (states_[state].kind == StateKind::kValue && cache_.enabled()) {
      return cacheWrite(state, valueKey_, CacheWrite::kPut, value, "put");
    }
    check(inst_->db->Put(writeOptions_, cf, valueKey_, rocksdb::Slice(value.data(), value.size())),
          state, "put");
  }

  void append(int state, std::string_view element) override {
    auto* cf = cfFor(state, "append");
    if (states_[state].kind != StateKind::kList) kindError(state, "append", "ListState");
    check(inst_->db->Merge(writeOptions_, cf, valueKey_,
                           rocksdb::Slice(element.data(), element.size())),
          state, "append");
  }

  void clear(int state) override {
    auto* cf = cfFor(state, "clear");
    if (states_[state].kind != StateKind::kMap) {
      if (states_[state].kind == StateKind::kValue && cache_.enabled()) {
        return cacheWrite(state, valueKey_, CacheWrite::kRemove, {}, "clear");
      }
      check(inst_->db->Delete(writeOptions_, cf, valueKey_), state, "clear");
      return;
    }
    // Point deletes of the key's entries (no range tombstone per clear()), after the
    // cache's own writes reached the DB; the cache then knows them deleted.
    flushCache(state, "clear");
    std::string upper;
    bool bounded = layout::prefixSuccessor(mapPrefix_, &upper);
    rocksdb::Slice upperSlice(upper);
    rocksdb::ReadOptions ro;
    if (bounded) ro.iterate_upper_bound = &upperSlice;
    std::unique_ptr<rocksdb::Iterator> it(inst_->db->NewIterator(ro, cf));
    batch_.Clear();
    std::vector<std::string> deleted;  // their cache keys, told to the cache once deleted
    for (it->Seek(mapPrefix_); it->Valid() && it->key().starts_with(mapPrefix_); it->Next()) {
      batch_.Delete(cf, it->key()).PermitUncheckedError();
      if (cache_.enabled()) {
        EntryCache::makeKey(&cacheKey_, state, std::string_view(it->key().data(), it->key().size()));
        deleted.push_back(cacheKey_);
      }
    }
    check(it->status(), state, "clear");
    it.reset();
    if (batch_.Count() > 0) check(inst_->db->Write(writeOptions_, &batch_), state, "clear");
    batch_.Clear();
    for (const std::string& k : deleted) cache_.deletedInDb(k);
  }

  bool mapGet(int state, std::string_view userKey, std::string_view* out) override {
    auto* cf = mapCf(state, "mapGet");
    mapKey_.assign(mapPrefix_).append(userKey);
    return cachedGet(state, cf, mapKey_, out, "mapGet");
  }

  void mapPut(int state, std::string_view userKey, std::string_view value) override {
    auto* cf = mapCf(state, "mapPut");
    mapKey_.assign(mapPrefix_).append(userKey);
    if (cache_.enabled()) return cacheWrite(state, mapKey_, CacheWrite::kPut, value, "mapPut");
    check(inst_->db->Put(writeOptions_, cf, mapKey_, rocksdb::Slice(value.data(), value.size())),
          state, "mapPut");
  }

  void mapPutAbsent(int state, std::string_view userKey, std::string_view value) override {
    if (!cache_.enabled()) return mapPut(state, userKey, value);
    mapCf(state, "mapPutAbsent");
    mapKey_.assign(mapPrefix_).append(userKey);
    cacheWrite(state, mapKey_, CacheWrite::kPutAbsent, value, "mapPutAbsent");
  }

  void mapRemove(int state, std::string_view userKey) override {
    auto* cf = mapCf(state, "mapRemove");
    mapKey_.assign(mapPrefix_).append(userKey);
    if (cache_.enabled()) return cacheWrite(state, mapKey_, CacheWrite::kRemove, {}, "mapRemove");
    check(inst_->db->Delete(writeOptions_, cf, mapKey_), state, "mapRemove");
  }

  void mapForEach(int state,
                  const std::function<bool(std::string_view, std::string_view)>& fn) override {
    auto* cf = mapCf(state, "mapForEach");
    flushCache(state, "mapForEach");  // the iterator reads the DB
    // Locals, not members: fn may call back into this backend (even mapForEach).
    const std::string prefix = mapPrefix_;
    std::string upper;
    bool bounded = layout::prefixSuccessor(prefix, &upper);
    rocksdb::Slice upperSlice(upper);
    rocksdb::ReadOptions ro;
    if (bounded) ro.iterate_upper_bound = &upperSlice;
    std::unique_ptr<rocksdb::Iterator> it(inst_->db->NewIterator(ro, cf));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      rocksdb::Slice k = it->key();
      rocksdb::Slice v = it->value();
      if (!fn(std::string_view(k.data() + prefix.size(), k.size() - prefix.size()),
              std::string_view(v.data(), v.size()))) {
        return;
      }
    }
    check(it->status(), state, "mapForEach");
  }

  void mapAppend(int state, std::string_view userKey, std::string_view element) override {
    auto* cf = mapCf(state, "mapAppend");
    mapKey_.assign(mapPrefix_).append(userKey);
    if (cache_.enabled()) {
      // The merge applies to what the DB holds: write the cached change first, then let
      // the DB be the only copy of this entry.
      EntryCache::makeKey(&cacheKey_, state, mapKey_);
      if (const EntryCache::Entry* e = cache_.dirtyEntry(cacheKey_)) {
        check(e->present ? inst_->db->Put(writeOptions_, cf, mapKey_, rocksdb::Slice(e->value))
                         : inst_->db->Delete(writeOptions_, cf, mapKey_),
              state, "mapAppend");
      }
      cache_.forget(cacheKey_);  // only once the DB holds its change
    }
    check(inst_->db->Merge(writeOptions_, cf, mapKey_, rocksdb::Slice(element.data(), element.size())), state,
          "mapAppend");
  }

  // --- KeyedStateBackend ------------------------------------------------------------

  void forEachEntry(int state, const std::function<void(int, std::string_view, std::string_view, std::string_view)>&
                                   fn) override {
    if (state < 0 || state >= static_cast<int>(states_.size()))
      throw StateError("rocksdb backend: forEachEntry on unknown state handle " + std::to_string(state));
    // Not open yet: nothing was written nor restored (both open it), so there is nothing
    // to visit, and a read must not create the instance.
    if (options_.range.empty() || inst_->db == nullptr) return;
    flushCache(state, "forEachEntry");
    const bool isMap = states_[state].kind == StateKind::kMap;
    std::string lower, upper;
    layout::appendKeyGroup(&lower, options_.range.start);
    layout::appendKeyGroup(&upper, options_.range.end + 1);
    rocksdb::Slice upperSlice(upper);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upperSlice;
    std::unique_ptr<rocksdb::Iterator> it(inst_->db->NewIterator(ro, inst_->cfs[state]));
    for (it->Seek(lower); it->Valid(); it->Next()) {
      std::string_view k(it->key().data(), it->key().size());
      std::string_view v(it->value().data(), it->value().size());
      if (k.size() < 2) continue;
      int kg = layout::decodeKeyGroup(k);
      if (!isMap) {
        fn(kg, k.substr(2), {}, v);
        continue;
      }
      std::string_view key, userKey;
      if (!layout::decodeMapKey(k, &key, &userKey))
        throw StateError("state '" + states_[state].name + "' holds a malformed map key in RocksDB");
      fn(kg, key, userKey, v);
    }
    check(it->status(), state, "forEachEntry");
  }

  void setCurrentKey(int keyGroup, std::string_view key) override {
    if (!options_.range.contains(keyGroup)) {
      throw StateError("key group " + std::to_string(keyGroup) +
                       " is outside this backend's range [" + std::to_string(options_.range.start) +
                       ", " + std::to_string(options_.range.end) + "]");
    }
    layout::encodeValueKey(&valueKey_, keyGroup, key);
    layout::encodeMapPrefix(&mapPrefix_, keyGroup, key);
    hasKey_ = true;
  }

  const KeyGroupRange& range() const override { return options_.range; }
  BackendType type() const override { return BackendType::kRocksDb; }
  std::vector<StateDescriptorInfo> states() const override { return states_; }

  uint64_t approximateEntries() const override {
    uint64_t total = 0;
    if (inst_->db == nullptr) return 0;
    for (auto* cf : inst_->cfs) {
      uint64_t n = 0;
      if (cf != nullptr && inst_->db->GetIntProperty(cf, "rocksdb.estimate-num-keys", &n))
        total += n;
    }
    return total;
  }

  Result<std::unique_ptr<AsyncSnapshot>> snapshotSync(const SnapshotRequest& request) override {
    if (request.storage == nullptr)
      return Status::InvalidArgument("rocksdb snapshot: no checkpoint storage");
    if (Status s = ensureOpen(); !s.ok()) return s;
    // The snapshot reads the DB: the cache's changes go there first.
    if (rocksdb::Status rs = writeCache(); !rs.ok())
      return fromRocks(rs, "rocksdb checkpoint " + std::to_string(request.checkpointId) +
                               ": writing the entry cache failed");
    const bool incremental = request.format == SnapshotFormat::kNative && options_.incremental;
    if (!incremental) {
      const rocksdb::Snapshot* snap = inst_->db->GetSnapshot();
      return std::unique_ptr<AsyncSnapshot>(
          new FullAsyncSnapshot(inst_, snap, inst_->cfs, states_, options_.range, request));
    }

    // Sync phase of an incremental checkpoint: flush, then hard-link a native checkpoint.
    std::vector<rocksdb::ColumnFamilyHandle*> all{inst_->defaultCf};
    all.insert(all.end(), inst_->cfs.begin(), inst_->cfs.end());
    rocksdb::FlushOptions fo;
    fo.wait = true;
    rocksdb::Status rs = inst_->db->Flush(fo, all);
    if (!rs.ok())
      return fromRocks(
          rs, "rocksdb checkpoint " + std::to_string(request.checkpointId) + ": flush failed");

    const std::string dir =
        joinPath(inst_->localDir,
                 "chk-" + std::to_string(request.checkpointId) + "-" + std::to_string(++tempSeq_));
    std::error_code ec;
    fs::remove_all(dir, ec);
    rocksdb::Checkpoint* cp = nullptr;
    rs = rocksdb::Checkpoint::Create(inst_->db, &cp);
    std::unique_ptr<rocksdb::Checkpoint> cpOwner(cp);
    if (rs.ok()) rs = cp->CreateCheckpoint(dir);
    if (!rs.ok()) {
      fs::remove_all(dir, ec);
      return fromRocks(rs, "cannot create local RocksDB checkpoint in " + dir);
    }

    std::map<std::string, SharedFileRef> base;
    if (!request.sharedDir.empty()) {
      std::lock_guard<std::mutex> lock(inst_->mu);
      base = inst_->confirmed;
    }
    std::vector<std::string> names;
    names.reserve(states_.size());
    for (const auto& s : states_) names.push_back(s.name);
    return std::unique_ptr<AsyncSnapshot>(new IncrementalAsyncSnapshot(
        inst_, dir, std::move(base), backendId_, std::move(names), options_.range, request,
        options_.rocksdb.transferThreads));
  }

  void notifyCheckpointComplete(uint64_t checkpointId) override {
    std::lock_guard<std::mutex> lock(inst_->mu);
    auto it = inst_->pending.find(checkpointId);
    if (it == inst_->pending.end() || checkpointId <= inst_->lastCompleted) return;
    // The completed checkpoint's SST set becomes the base: its new uploads are confirmed,
    // and confirmed SSTs it no longer contains (compacted away) are dropped.
    inst_->confirmed = std::move(it->second);
    inst_->lastCompleted = checkpointId;
    // Older pending checkpoints can no longer become the base.
    inst_->pending.erase(inst_->pending.begin(), std::next(it));
  }

  void notifyCheckpointAborted(uint64_t checkpointId) override {
    std::lock_guard<std::mutex> lock(inst_->mu);
    inst_->pending.erase(checkpointId);
  }

  Status restore(const RestoreInput& input) override;

 private:
  // --- state access helpers ---------------------------------------------------------

  rocksdb::ColumnFamilyHandle* cfFor(int state, const char* op) {
    if (state < 0 || state >= static_cast<int>(states_.size())) {
      throw StateError(std::string("rocksdb backend: ") + op + " on unknown state handle " +
                       std::to_string(state));
    }
    if (!hasKey_) {
      throw StateError(std::string("state '") + states_[state].name + "' accessed (" + op +
                       ") outside a keyed context: no current key");
    }
    if (inst_->db == nullptr) {
      if (Status s = ensureOpen(); !s.ok()) throw StateError(s.message());
    }
    return inst_->cfs[state];
  }

  rocksdb::ColumnFamilyHandle* valueCf(int state, const char* op) {
    auto* cf = cfFor(state, op);
    if (states_[state].kind == StateKind::kMap) kindError(state, op, "ValueState or ListState");
    return cf;
  }

  rocksdb::ColumnFamilyHandle* mapCf(int state, const char* op) {
    auto* cf = cfFor(state, op);
    if (states_[state].kind != StateKind::kMap) kindError(state, op, "MapState");
    return cf;
  }

  // --- the entry cache (rocksdb_entry_cache.h) --------------------------------------

  /// get/mapGet of a point entry: from the cache when it knows the key, else from the DB
  /// (and the cache learns the answer, absent included).
  bool cachedGet(int state, rocksdb::ColumnFamilyHandle* cf, const std::string& dbKey, std::string_view* out,
                 const char* op) {
    if (cache_.enabled()) {
      EntryCache::makeKey(&cacheKey_, state, dbKey);
      if (const EntryCache::Entry* e = cache_.find(cacheKey_)) {
        if (!e->present) return false;
        got_.assign(e->value);  // the view must outlive later cache changes
        *out = got_;
        return true;
      }
    }
    rocksdb::Status s = inst_->db->Get(readOptions_, cf, dbKey, &got_);
    const bool found = !s.IsNotFound();
    if (found) check(s, state, op);
    if (cache_.enabled()) {
      cache_.loaded(cacheKey_, state, found ? &got_ : nullptr);
      evictIfFull(state, op);
    }
    if (!found) return false;
    *out = got_;
    return true;
  }

  enum class CacheWrite { kPut, kPutAbsent, kRemove };

  /// A point write of (state, dbKey) into the cache (the DB sees it at the next flush);
  /// `op` names the state operation in errors of the eviction's write.
  void cacheWrite(int state, const std::string& dbKey, CacheWrite how, std::string_view value, const char* op) {
    EntryCache::makeKey(&cacheKey_, state, dbKey);
    switch (how) {
      case CacheWrite::kPut: cache_.put(cacheKey_, state, value); break;
      case CacheWrite::kPutAbsent: cache_.putAbsent(cacheKey_, state, value); break;
      case CacheWrite::kRemove: cache_.remove(cacheKey_, state); break;
    }
    evictIfFull(state, op);
  }

  /// Writes the cache's dirty entries to the DB in one batch; they stay cached.
  rocksdb::Status writeCache() {
    if (cache_.dirtyCount() == 0 || inst_->db == nullptr) return rocksdb::Status::OK();
    // The entries are marked written only once the batch is (a failed write leaves them
    // dirty for the next flush: the checkpoint that failed is declined, the job goes on).
    cacheBatch_.Clear();
    rocksdb::Status result;
    struct Failed {};
    try {
      cache_.flush(
          [&](int st, std::string_view key, const std::string* value) {
            rocksdb::ColumnFamilyHandle* cf = inst_->cfs[st];
            rocksdb::Slice k(key.data(), key.size());
            result = value != nullptr ? cacheBatch_.Put(cf, k, rocksdb::Slice(*value)) : cacheBatch_.Delete(cf, k);
            if (!result.ok()) throw Failed{};
          },
          [&] {
            result = inst_->db->Write(writeOptions_, &cacheBatch_);
            if (!result.ok()) throw Failed{};
          });
    } catch (const Failed&) {
    }
    cacheBatch_.Clear();
    return result;
  }

  void flushCache(int state, const char* op) { check(writeCache(), state, op); }

  /// Past its size the cache drops what it need not write, or is written and halved.
  void evictIfFull(int state, const char* op) {
    if (!cache_.full()) return;
    cache_.makeRoom([&] { flushCache(state, op); });
  }

  [[noreturn]] void kindError(int state, const char* op, const char* wanted) {
    throw StateError(std::string(op) + " on state '" + states_[state].name + "' (a " +
                     stateKindName(states_[state].kind) + "); it needs a " + wanted);
  }

  void check(const rocksdb::Status& s, int state, const char* op) {
    if (s.ok()) return;
    std::string what = std::string("rocksdb state backend: ") + op + " on state '" + states_[state].name +
                       "' failed: " + s.ToString();
    // A full local disk (RocksDB stops writing after a flush or compaction met ENOSPC, and
    // every write then returns that error) is not the job's fault: the host waits for
    // space and restarts the attempt from the latest checkpoint, not counted by the
    // restart strategy (issue 31). The DB is not resumed in place: the restore rebuilds it.
    if (s.IsNoSpace() || what.find("No space left on device") != std::string::npos)
      throw DependencyUnavailable("the local disk of the RocksDB state is full (" + inst_->localDir + "): " + what);
    throw std::runtime_error(what);
  }

  // --- DB lifecycle -------------------------------------------------------------------

  /// Opens the live instance in inst_->dbDir (creating it) if it is not open yet, with a
  /// column family for every registered state. Errors name the local directory.
  Status ensureOpen() {
    if (inst_->db != nullptr) return Status::OK();
    Status s = openLive({});
    if (!s.ok()) return withContext(s, "rocksdb local directory " + inst_->localDir + " (under state.local.dir)");
    return s;
  }

  /// Opens inst_->dbDir with column families for `existing` (state names present in the
  /// directory) and every registered state, all in one DB::Open (missing ones are
  /// created by it), and binds them.
  Status openLive(const std::vector<std::string>& existing) {
    std::vector<std::string> names = existing;  // state names, in handle order
    for (const auto& st : states_)
      if (std::find(names.begin(), names.end(), st.name) == names.end()) names.push_back(st.name);
    std::vector<std::string> cfNames;
    for (const auto& n : names) cfNames.push_back(layout::columnFamilyName(n));
    rocksdb::DB* db = nullptr;
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    Status s = openDb(inst_->dbDir, cfNames, false, inst_->cfOptions, &db, &handles);
    if (!s.ok()) return s;
    inst_->db = db;
    inst_->defaultCf = handles[0];
    inst_->cfs.assign(states_.size(), nullptr);
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = byName_.find(names[i]);
      if (it != byName_.end())
        inst_->cfs[it->second] = handles[i + 1];
      else
        db->DestroyColumnFamilyHandle(handles[i + 1]).PermitUncheckedError();
    }
    return Status::OK();
  }

  /// Registers a restored descriptor; a kind conflict is an error, not an exception.
  Status registerRestored(const StateDescriptorInfo& d) {
    auto it = byName_.find(d.name);
    if (it != byName_.end() && states_[it->second].kind != d.kind) {
      return Status::Incompatible("restore: state '" + d.name + "' is a " + stateKindName(d.kind) +
                                  " in the snapshot but registered as a " +
                                  stateKindName(states_[it->second].kind));
    }
    if (it != byName_.end()) return Status::OK();  // keep the job's own declaration
    try {
      registerState(d);
    } catch (const std::exception& e) {
      return Status::IOError(std::string("restore: ") + e.what());
    }
    return Status::OK();
  }

  int stateIdFor(const std::string& name) const {
    auto it = byName_.find(name);
    return it == byName_.end() ? -1 : it->second;
  }

  Status downloadIncremental(CheckpointStorage& st, const IncrementalStateHandle& h,
                             const std::string& dir);
  Status restoreInPlace(CheckpointStorage& st, const IncrementalStateHandle& h);
  Status restoreByCopy(CheckpointStorage& st, const IncrementalStateHandle& h);
  Status restoreKeyGroups(CheckpointStorage& st, const KeyGroupsStateHandle& h, const KeyGroupRange& keyGroups);
  Status writeBatchIfLarge(rocksdb::WriteBatch* batch, bool force, const std::string& what);

  std::string freshLocalDir(const char* what) {
    return joinPath(inst_->localDir, std::string(what) + "-" + std::to_string(++tempSeq_));
  }

  BackendOptions options_;
  std::shared_ptr<DbInstance> inst_;
  std::vector<StateDescriptorInfo> states_;
  std::unordered_map<std::string, int> byName_;
  std::string backendId_;
  uint64_t tempSeq_ = 0;

  // Current key and reused scratch buffers (no allocation per access once warm).
  bool hasKey_ = false;
  std::string valueKey_;   // kg | key
  std::string mapPrefix_;  // kg | varint(len) | key
  std::string mapKey_;     // mapPrefix_ | userKey
  std::string got_;  // the value get()/mapGet() returned last (their views point into it)
  std::string cacheKey_;  // state handle | DB key
  EntryCache cache_;
  rocksdb::WriteBatch cacheBatch_;
  rocksdb::WriteBatch batch_;
  rocksdb::WriteOptions writeOptions_;
  rocksdb::ReadOptions readOptions_;
};

// ----------------------------------------------------------------------------------
// Restore

namespace {
/// RocksDB names the local copy of a file it cannot read (".../db/000011.sst"); add which
/// file of the snapshot that is, so the user knows what is broken where.
Status nameSnapshotFiles(const Status& s, CheckpointStorage& st, const std::vector<const KeyedStateHandle*>& handles) {
  std::string msg = s.message();
  std::string extra;
  for (const KeyedStateHandle* h : handles) {
    const auto* inc = std::get_if<IncrementalStateHandle>(h);
    if (!inc) continue;
    for (const auto* list : {&inc->sharedFiles, &inc->privateFiles})
      for (const auto& f : *list)
        if (msg.find("/" + f.localName) != std::string::npos && extra.find(f.file.path) == std::string::npos)
          extra += (extra.empty() ? "" : ", ") + st.describe(f.file.path) + " (local copy " + f.localName + ")";
  }
  // Only damage is blamed on a snapshot file: a full or failing local disk names the
  // local file RocksDB wrote, and keeps its code (NoSpace, IOError: worth a retry).
  if (extra.empty() || !s.isCorruption()) return s;
  return Status::Corruption(msg + "; the damaged snapshot file: " + extra);
}

/// Every file of the handle was downloaded; a file RocksDB still cannot find (a missing
/// CURRENT, an SST the MANIFEST names) means the checkpoint is incomplete: Corruption.
Status incompleteIfNotFound(const Status& s, const IncrementalStateHandle& h) {
  if (!s.isNotFound()) return s;
  return Status::Corruption("restore of rocksdb checkpoint " + std::to_string(h.checkpointId) +
                            ": its files do not form a complete RocksDB instance (" + s.message() +
                            "); restore from another checkpoint or savepoint");
}
}  // namespace

Status RocksDbBackend::restore(const RestoreInput& input) {
  if (input.storage == nullptr)
    return Status::InvalidArgument("rocksdb restore: no checkpoint storage");
  CheckpointStorage& st = *input.storage;
  cache_.clear();  // the restored state replaces whatever the cache knew
  for (const auto& d : input.states) {
    if (Status s = registerRestored(d); !s.ok()) return s;
  }
  std::vector<const KeyedStateHandle*> handles;
  for (const auto& h : input.handles) {
    if (!std::holds_alternative<std::monostate>(h)) handles.push_back(&h);
  }
  const KeyGroupRange& range = options_.range;
  Status s;
  if (handles.size() == 1 && std::holds_alternative<IncrementalStateHandle>(*handles[0]) &&
      std::get<IncrementalStateHandle>(*handles[0]).range.intersect(range) == range &&
      !range.empty()) {
    s = restoreInPlace(st, std::get<IncrementalStateHandle>(*handles[0]));
  } else {
    s = ensureOpen();
    for (const KeyedStateHandle* h : handles) {
      if (!s.ok()) break;
      if (std::holds_alternative<KeyGroupsStateHandle>(*h) ||
          std::holds_alternative<IncrementalKeyGroupsStateHandle>(*h)) {
        for (const KeyGroupsRead& read : keyGroupReads(*h, range))
          if (s = restoreKeyGroups(st, *read.file, read.keyGroups); !s.ok()) break;
      } else if (const auto* inc = std::get_if<IncrementalStateHandle>(h)) {
        if (inc->range.intersect(range).empty()) continue;
        s = restoreByCopy(st, *inc);
      }
      if (!s.ok()) break;
    }
  }
  if (!s.ok()) s = nameSnapshotFiles(s, st, handles);
  // A restored backend is a new lineage that depends on none of the restored files.
  backendId_ = randomHexId(16);
  {
    std::lock_guard<std::mutex> lock(inst_->mu);
    inst_->confirmed.clear();
    inst_->pending.clear();
    inst_->lastCompleted = 0;
  }
  return s;
}

Status RocksDbBackend::downloadIncremental(CheckpointStorage& st, const IncrementalStateHandle& h,
                                           const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return fromErrorCode("cannot create restore directory " + dir, ec);
  const std::string what = "restore of rocksdb checkpoint " + std::to_string(h.checkpointId) +
                           " (backend " + h.backendId + ")";
  std::set<std::string> seen;
  std::vector<const SharedFileRef*> files;
  for (const auto* list : {&h.sharedFiles, &h.privateFiles}) {
    for (const SharedFileRef& f : *list) {
      if (!isPlainFileName(f.localName) || !seen.insert(f.localName).second) {
        return Status::Corruption(what + ": invalid or duplicate local file name '" + f.localName +
                                  "' for " + st.describe(f.file.path));
      }
      files.push_back(&f);
    }
  }
  // No fsync: the local directory is scratch that open() wipes, so no crash can ever
  // make RocksDB read it again; the checkpoint is the durable copy.
  return runParallel(files.size(), options_.rocksdb.transferThreads, [&](size_t i) -> Status {
    const SharedFileRef& f = *files[i];
    const std::string dest = dir + "/" + f.localName;
    CheckpointStorage::FetchOptions fo;
    fo.sync = false;
    // SSTs are immutable: RocksDB only reads and (after a compaction) unlinks them. The
    // MANIFEST, CURRENT and OPTIONS files are copies, whatever RocksDB does with them.
    fo.allowHardLink = isSst(f.localName);
    bool linked = false;
    Status s = fetchSnapshotFile(st, f.file, dest, fo, &linked);
    if (!s.ok()) return withContext(s, what + ": cannot download " + f.localName);
    std::error_code sizeEc;
    if (!linked) {
      // A copy is private like the files RocksDB creates (PrivateFileSystem): 0600 whatever
      // the umask; the directory above is 0700, so nobody could open it in between. A hard
      // link is the checkpoint's own file: its mode is the checkpoint directory's business,
      // and the 0700 working directory keeps others from reaching it through this name.
      fs::permissions(dest, fs::perms::owner_read | fs::perms::owner_write, sizeEc);
      if (sizeEc) return fromErrorCode(what + ": cannot make " + dest + " private (chmod 0600)", sizeEc);
    }
    if (isSst(f.localName)) {
      // Every block's checksum, before the instance opens: RocksDB checks a block only when
      // it reads it, so a damaged SST restored fine, failed the job later (restarted from
      // the same checkpoint for ever) and was uploaded into the new job's checkpoints.
      rocksdb::SstFileReader reader(rocksdb::Options{});
      rocksdb::Status rs = reader.Open(dest);
      if (rs.ok()) rs = reader.VerifyChecksum();
      if (!rs.ok())
        return Status::Corruption(what + ": " + st.describe(f.file.path) + " is corrupt: " + rs.ToString());
    }
    return Status::OK();
  });
}

Status RocksDbBackend::restoreInPlace(CheckpointStorage& st, const IncrementalStateHandle& h) {
  for (const auto& name : h.columnFamilies) {
    if (stateIdFor(name) < 0) {
      return Status::Corruption("restore: rocksdb checkpoint " + std::to_string(h.checkpointId) +
                                " has column family '" + name +
                                "' with no state descriptor in the metadata");
    }
  }
  const std::string dir = freshLocalDir("restore");
  Status s = downloadIncremental(st, h, dir);
  std::error_code ec;
  if (!s.ok()) {
    fs::remove_all(dir, ec);  // every download thread has finished: nothing writes there any more
    return s;
  }
  // The downloaded directory becomes the live instance (one opened before is dropped).
  inst_->close();
  fs::remove_all(inst_->dbDir, ec);
  fs::rename(dir, inst_->dbDir, ec);
  if (ec) {
    s = fromErrorCode("cannot move restored RocksDB " + dir + " to " + inst_->dbDir, ec);
  } else {
    s = incompleteIfNotFound(openLive(h.columnFamilies), h);
  }
  if (!s.ok()) {
    // Leave nothing behind: the next access opens an empty instance.
    inst_->close();
    fs::remove_all(inst_->dbDir, ec);
    fs::remove_all(dir, ec);
    return s;
  }
  // Drop key groups outside this backend's range (rescaling up).
  const KeyGroupRange& range = options_.range;
  std::string lo, loEnd, hi, hiEnd;
  layout::appendKeyGroup(&lo, 0);
  layout::appendKeyGroup(&loEnd, range.start);
  layout::appendKeyGroup(&hi, range.end + 1);
  hiEnd.assign(3, '\xff');
  for (size_t i = 0; i < states_.size(); ++i) {
    rocksdb::ColumnFamilyHandle* cf = inst_->cfs[i];
    rocksdb::Status rs;
    if (h.range.start < range.start) rs = inst_->db->DeleteRange(writeOptions_, cf, lo, loEnd);
    if (rs.ok() && h.range.end > range.end && range.end + 1 <= 0xffff) {
      rs = inst_->db->DeleteRange(writeOptions_, cf, hi, hiEnd);
    }
    if (!rs.ok())
      return fromRocks(rs, "restore: cannot delete key groups outside the range in state '" +
                               states_[i].name + "'");
  }
  return Status::OK();
}

Status RocksDbBackend::writeBatchIfLarge(rocksdb::WriteBatch* batch, bool force,
                                         const std::string& what) {
  if (batch->Count() == 0 || (!force && batch->GetDataSize() < kRestoreBatchBytes))
    return Status::OK();
  rocksdb::Status rs = inst_->db->Write(writeOptions_, batch);
  batch->Clear();
  if (!rs.ok()) return fromRocks(rs, what + ": write failed");
  return Status::OK();
}

Status RocksDbBackend::restoreByCopy(CheckpointStorage& st, const IncrementalStateHandle& h) {
  const std::string what = "restore of rocksdb checkpoint " + std::to_string(h.checkpointId);
  std::vector<int> target;
  std::vector<std::string> cfNames;
  for (const auto& name : h.columnFamilies) {
    int id = stateIdFor(name);
    if (id < 0) {
      return Status::Corruption(what + " has column family '" + name +
                                "' with no state descriptor in the metadata");
    }
    target.push_back(id);
    cfNames.push_back(layout::columnFamilyName(name));
  }
  const std::string dir = freshLocalDir("restore");
  Status s = downloadIncremental(st, h, dir);
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  if (s.ok()) s = incompleteIfNotFound(openDb(dir, cfNames, true, inst_->cfOptions, &db, &handles), h);
  if (s.ok()) {
    KeyGroupRange r = h.range.intersect(options_.range);
    std::string lower, upper;
    layout::appendKeyGroup(&lower, r.start);
    layout::appendKeyGroup(&upper, r.end + 1);
    rocksdb::Slice lowerSlice(lower), upperSlice(upper);
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    ro.iterate_lower_bound = &lowerSlice;
    if (r.end + 1 <= 0xffff) ro.iterate_upper_bound = &upperSlice;
    rocksdb::WriteBatch batch;
    for (size_t i = 0; i < target.size() && s.ok(); ++i) {
      rocksdb::ColumnFamilyHandle* dst = inst_->cfs[target[i]];
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, handles[i + 1]));
      for (it->Seek(lower); it->Valid() && s.ok(); it->Next()) {
        rocksdb::Status bs = batch.Put(dst, it->key(), it->value());
        if (!bs.ok()) s = fromRocks(bs, what);
        if (s.ok()) s = writeBatchIfLarge(&batch, false, what);
      }
      if (s.ok() && !it->status().ok())
        s = fromRocks(it->status(), what + ": scan of state '" + h.columnFamilies[i] + "'");
    }
    if (s.ok()) s = writeBatchIfLarge(&batch, true, what);
  }
  closeDb(db, &handles);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return s;
}

Status RocksDbBackend::restoreKeyGroups(CheckpointStorage& st, const KeyGroupsStateHandle& h,
                                        const KeyGroupRange& keyGroups) {
  const std::string what = "restore of key-group file " + st.describe(h.file.path);
  std::vector<std::string> names;
  std::vector<int> target;  // file state index -> state id
  rocksdb::WriteBatch batch;
  std::string key;
  Status s = readKeyGroups(st, h, keyGroups, &names, [&](const KeyGroupEntry& e) -> Status {
    if (target.size() != names.size()) {
      target.clear();
      for (const auto& n : names) {
        int id = stateIdFor(n);
        if (id < 0)
          return Status::Corruption(what + ": state '" + n +
                                    "' has no state descriptor in the metadata");
        target.push_back(id);
      }
    }
    if (e.stateIndex < 0 || e.stateIndex >= static_cast<int>(target.size())) {
      return Status::Corruption(what + ": entry refers to state index " +
                                std::to_string(e.stateIndex));
    }
    if (!options_.range.contains(e.keyGroup)) return Status::OK();
    int id = target[e.stateIndex];
    if (states_[id].kind == StateKind::kMap) {
      layout::encodeMapPrefix(&key, e.keyGroup, e.key);
      key.append(e.userKey);
    } else {
      layout::encodeValueKey(&key, e.keyGroup, e.key);
    }
    rocksdb::Status bs =
        batch.Put(inst_->cfs[id], key, rocksdb::Slice(e.value.data(), e.value.size()));
    if (!bs.ok()) return fromRocks(bs, what);
    return writeBatchIfLarge(&batch, false, what);
  });
  if (!s.ok()) return snapshotFileError(s, st, h.file.path);
  return writeBatchIfLarge(&batch, true, what);
}

}  // namespace

Status openRocksDbReadOnly(const std::string& dir, const std::vector<std::string>& stateNames, rocksdb::DB** db,
                           std::vector<rocksdb::ColumnFamilyHandle*>* handles) {
  std::vector<std::string> cfNames;
  for (const auto& n : stateNames) cfNames.push_back(layout::columnFamilyName(n));
  return openDb(dir, cfNames, true, makeCfOptions(RocksDbOptions{}, nullptr), db, handles);
}

void closeRocksDb(rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*>* handles) { closeDb(db, handles); }

const char* compactionStyleName(RocksDbOptions::CompactionStyle style) {
  switch (style) {
    case RocksDbOptions::CompactionStyle::kLevel:
      return "LEVEL";
    case RocksDbOptions::CompactionStyle::kUniversal:
      return "UNIVERSAL";
    case RocksDbOptions::CompactionStyle::kFifo:
      return "FIFO";
  }
  return "?";
}

Result<std::unique_ptr<KeyedStateBackend>> createRocksDbBackend(const BackendOptions& options) {
  auto backend = std::make_unique<RocksDbBackend>(options);
  if (Status s = backend->open(); !s.ok()) return s;
  return std::unique_ptr<KeyedStateBackend>(std::move(backend));
}

}  // namespace jobhost::state
