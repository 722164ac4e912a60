// tests/support/fault_injection.h — a file system and a checkpoint storage that fail on
// demand, for tests only (LevelDB's FaultInjectionTestEnv, RocksDB's FaultInjectionTestFS).
//
// Usage:
//
//   auto fs = std::make_shared<FaultInjectionFileSystem>();       // over the real disk
//   auto storage = state::openStorage(dir, fs).value();            // all its I/O goes via fs
//   fs->failNth(FsOp::kSync, 1, EIO);                              // the next fsync fails
//   EXPECT_TRUE(storage->put("a", "x").isIOError());
//   ... write more ...
//   fs->setFilesystemActive(false);  // "the process died": nothing reaches the disk any more
//   storage.reset();                 // ... so its clean-up on destruction does nothing
//   ASSERT_TRUE(fs->dropUnsyncedData().ok());  // power loss: only what was made durable stays
//   storage = state::openStorage(dir, fs).value();                 // and go on
//
//   FaultInjectionStorage faulty(std::move(storage));              // one level up
//   faulty.failNth(StorageOp::kPut, 2, ENOSPC);                    // the 2nd put from now
//
// Faults: failNth() fails the n-th operation of a kind counted from the moment the rule
// is set (n = 1: the next one), once; failRandomly() fails each operation of a kind with
// a probability, drawn from an RNG seeded by the caller (the same seed and the same
// sequence of operations give the same failures). A failed operation is not performed:
// nothing is written, renamed or removed. count() counts the attempts of a kind,
// failed ones included.
//
// Thread-safety: both classes are thread-safe (one mutex each); the files they hand out
// follow the FileSystem / CheckpointStorage contracts. With several threads the order of
// operations, and so which one the n-th is, depends on scheduling.
#pragma once

#include <array>
#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/file_system.h"
#include "jobhost/state/status.h"

namespace jobhost::testing {

/// Kinds of FileSystem operations, for faults and counts.
enum class FsOp {
  kOpen,     // newWritableFile, newReadableFile
  kRead,     // FsReadableFile::read
  kWrite,    // FsWritableFile::append, appendCopyOf
  kSync,     // FsWritableFile::sync
  kClose,    // FsWritableFile::close
  kStat,     // stat, lstat
  kList,     // listDir
  kMkdir,    // mkdir
  kRmdir,    // rmdir
  kUnlink,   // unlink
  kRename,   // renameNoReplace
  kSyncDir,  // syncDir
};
inline constexpr size_t kFsOpCount = 12;
const char* fsOpName(FsOp op);  // "write", "fsync-dir", ...

/// Wraps a FileSystem (by default the real one) working on real directories.
///
/// Power loss (dropUnsyncedData) models a file system that keeps, of everything done
/// through this object since the last power loss:
///   - of a file written through it, exactly the bytes it had at its last successful
///     sync() (none if never synced) — a shorter file, never garbage;
///   - a directory entry created (new file, mkdir, the target of a rename) only if its
///     directory was synced (syncDir) after the creation, else the entry is removed (a
///     directory with everything in it);
///   - a removal (unlink, rmdir) or the source side of a rename only if the directory was
///     synced afterwards, else it is undone: the file comes back with the content it had
///     durably (its synced bytes if written through us, else the content at the unlink),
///     the renamed file goes back to its old name, the directory is re-created;
///   - a rename between two directories is durable once the target's directory is synced.
/// Undoing happens newest first and is skipped where impossible (e.g. the parent
/// directory is itself durably gone). appendCopyOf() and link() always answer EXDEV, so copies go
/// through read() and append() and meet their faults. Files opened through this object
/// must not outlive it (LocalFileStorage's files keep their FileSystem alive).
/// Not modelled: torn or reordered writes inside a file (a file is its synced prefix),
/// fsync errors that lose dirty pages (the data stays until the power loss), changes
/// made to the directory without this object, sizes of files not written through it.
/// Memory: every unlink keeps the durable content of the file until the next sync of
/// its directory — fine for test-sized files.
class FaultInjectionFileSystem final : public state::FileSystem {
 public:
  /// base: the file system doing the real work (nullptr: state::defaultFileSystem()).
  explicit FaultInjectionFileSystem(std::shared_ptr<state::FileSystem> base = nullptr);
  ~FaultInjectionFileSystem() override;

  /// The n-th operation of kind op from now (n >= 1) fails with errno err, once. A
  /// second rule for the same kind replaces the first.
  void failNth(FsOp op, uint64_t n, int err);
  /// Each later operation of kind op fails with errno err with the given probability,
  /// drawn from an RNG seeded with seed. Replaces a failNth() rule of that kind.
  void failRandomly(FsOp op, double probability, int err, uint64_t seed);
  /// The first later operation of kind op whose path contains `part` fails with errno
  /// err, once. Only kRename looks at paths (its target's). Replaces a rule of that kind.
  void failOnPath(FsOp op, const std::string& part, int err);
  /// Removes every fault rule.
  void clearFaults();
  /// Operations of kind op attempted since construction (failed ones included; not
  /// those refused while the file system is inactive).
  uint64_t count(FsOp op) const;

  /// While inactive (false), every operation fails with EIO and changes nothing: the
  /// process "is dead" (LevelDB's SetFilesystemActive). Destroy what the dead process
  /// held in this state, then call dropUnsyncedData().
  void setFilesystemActive(bool active);

  /// Simulates a power loss and reboot (see the class comment), then makes the file
  /// system active again. Files opened before fail every later call with EIO. Returns an
  /// IOError if the real file system refused to roll something back.
  state::Status dropUnsyncedData();

  // state::FileSystem
  int newWritableFile(const std::string& path, CreateMode mode,
                      std::unique_ptr<state::FsWritableFile>* out) override;
  int newReadableFile(const std::string& path, std::unique_ptr<state::FsReadableFile>* out) override;
  int stat(const std::string& path, state::FileInfo* out) override;
  int lstat(const std::string& path, state::FileInfo* out) override;
  int listDir(const std::string& dir, std::vector<std::string>* names) override;
  int mkdir(const std::string& dir) override;
  int rmdir(const std::string& dir) override;
  int unlink(const std::string& path) override;
  int renameNoReplace(const std::string& from, const std::string& to) override;
  int syncDir(const std::string& dir) override;

 private:
  class WritableFile;
  class ReadableFile;

  // Durability of one file written through us; shared with its open writer and moved
  // with renames.
  struct FileState {
    uint64_t size = 0;        // bytes written
    uint64_t syncedSize = 0;  // bytes at the last successful sync()
  };
  // A directory entry change not yet made durable by a syncDir of its directory.
  struct PendingChange {
    enum Kind { kCreateFile, kMkdir, kRename, kUnlink, kRmdir } kind;
    std::string path;     // created/removed entry; kRename: the target
    std::string from;     // kRename: the source
    std::string content;  // kUnlink: the content a power loss brings back ...
    bool restorable = true;  // ... unless it could not be read before the unlink
  };
  struct Rule {
    bool active = false;
    bool random = false;
    uint64_t failAt = 0;  // count() value that fails (failNth)
    std::string pathContains;  // failOnPath: the first operation on such a path fails
    double probability = 0;
    std::mt19937_64 rng;
    int err = 0;
  };

  // Counts an operation of kind op and decides whether it fails: 0 or the errno to
  // return. EIO while inactive. Requires mu_.
  int admitLocked(FsOp op, std::string_view path = {});
  int admit(FsOp op);
  bool liveLocked(uint64_t generation) const { return generation == generation_; }
  // Removes pending changes made durable by a sync of dir. Requires mu_.
  void syncedDirLocked(const std::string& dir);
  // The content a file at path would have after a power loss now. Requires mu_.
  int durableContentLocked(const std::string& path, std::string* out);
  int removeTreeLocked(const std::string& dir);
  int writeWholeFileLocked(const std::string& path, const std::string& content, bool exclusive);

  const std::shared_ptr<state::FileSystem> base_;
  mutable std::mutex mu_;
  std::array<uint64_t, kFsOpCount> counts_{};           // GUARDED_BY(mu_)
  std::array<Rule, kFsOpCount> rules_;                  // GUARDED_BY(mu_)
  bool active_ = true;                                  // GUARDED_BY(mu_)
  uint64_t generation_ = 0;                             // GUARDED_BY(mu_); +1 per power loss
  std::map<std::string, std::shared_ptr<FileState>> files_;  // GUARDED_BY(mu_); by current path
  std::vector<PendingChange> pending_;                  // GUARDED_BY(mu_); oldest first
};

/// Kinds of CheckpointStorage calls, for faults and counts.
enum class StorageOp {
  kPut,          // put
  kPutFile,      // putFile, FileBatch::putFile of a batch from createBatch()
  kCreateClose,  // WritableFile::close of a file from create()
  kGet,          // get, getToLocalFile, fetchToLocal
  kOpen,         // open
  kList,         // list, listTemporary
  kRemove,       // remove, removeTemporary
  kRemoveAll,    // removeAll
  kBatchCommit,  // FileBatch::commit of a batch from createBatch() (location: the root)
};
inline constexpr size_t kStorageOpCount = 9;
const char* storageOpName(StorageOp op);  // "put", "create-close", ...

/// A CheckpointStorage that forwards to another one and can fail chosen calls. A failed
/// call does not reach the wrapped storage (a failed create-close discards the file, a
/// failed batch-commit the wrapped storage's batch, so none of its files stays);
/// its Status is what fromErrno(err) gives (EIO: IOError, ENOSPC: NoSpace, ...), with
/// the location and "(injected fault)" in the message. Calls not listed in StorageOp
/// are forwarded and not counted.
class FaultInjectionStorage final : public state::CheckpointStorage {
 public:
  explicit FaultInjectionStorage(std::shared_ptr<state::CheckpointStorage> base);

  /// The n-th call of kind op from now (n >= 1) fails with errno err, once. A second
  /// rule for the same kind replaces the first.
  void failNth(StorageOp op, uint64_t n, int err = EIO);
  /// The first call of kind op on `path` from now fails with errno err, once, whatever
  /// the order of calls (parallel transfers). Replaces a rule for the same kind.
  void failOn(StorageOp op, const std::string& path, int err = EIO);
  void clearFaults();
  /// Calls of kind op since construction, failed ones included.
  uint64_t count(StorageOp op) const;
  state::CheckpointStorage& base() { return *base_; }

  // state::CheckpointStorage
  state::Result<std::unique_ptr<state::WritableFile>> create(const std::string& path) override;
  state::Status putFile(const std::string& path, const std::string& localSourcePath) override;
  state::Status put(const std::string& path, std::string_view bytes) override;
  /// The wrapped storage's batch, with faults on its putFile() and commit().
  std::unique_ptr<state::FileBatch> createBatch() override;
  state::Result<std::unique_ptr<state::ReadableFile>> open(const std::string& path) override;
  state::Status get(const std::string& path, std::string* out) override;
  state::Status getToLocalFile(const std::string& path, const std::string& localDest) override;
  state::Status fetchToLocal(const std::string& path, const std::string& localDest, const FetchOptions& options,
                             bool* linked) override;
  state::Result<uint64_t> fileSize(const std::string& path) override;
  bool exists(const std::string& path) override;
  state::Status list(const std::string& dirPrefix, std::vector<state::FileEntry>* out) override;
  state::Status listTemporary(const std::string& dirPrefix,
                              std::vector<state::FileEntry>* out) override;
  state::Status remove(const std::string& path) override;
  state::Status removeTemporary(const std::string& path) override;
  state::Status removeAll(const std::string& dirPrefix) override;
  std::string describe(const std::string& path) const override;
  std::string rootUri() const override;

 private:
  class WritableFile;
  class Batch;
  struct Faults;  // counts and rules; shared with the files from create(), which may
                  // outlive this object

  const std::shared_ptr<state::CheckpointStorage> base_;
  const std::shared_ptr<Faults> faults_;
};

}  // namespace jobhost::testing
