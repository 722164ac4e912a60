// jobhost/state/checkpoint_storage.h — where checkpoints are kept: whole files under a root.
//
// CheckpointStorage addresses immutable files by a relative path under a root. The
// interface has only whole-file operations (create-once, read, list, remove; no rename,
// no links, no in-place update) so that an object store can implement it later. The
// local-filesystem implementation is returned by openStorage(); it does all its I/O
// through a FileSystem (file_system.h), which tests replace to inject faults.
//
// Paths: relative, '/'-separated, e.g. "job-1/chk-3/_metadata". Rejected with
// InvalidArgument: empty paths, absolute paths, a leading or trailing '/', empty
// components ("a//b"), "." and ".." components, NUL bytes, and file names reserved for
// in-flight temporary files (a name starting with '.' that contains ".tmp.").
// Directory prefixes (list, listTemporary, removeAll) follow the same rules, except that
// "" means the root and one trailing '/' is accepted. A prefix denotes the files *under*
// it: a prefix naming a file (not a directory) has nothing under it.
//
// Durability: a file becomes visible under its final name only once it is completely
// written and durable (WritableFile::close, putFile and put returning OK; for a
// FileBatch, at the latest when its commit() returns OK). A crash or failure never
// leaves a partial file under a final name, and never overwrites a file.
//
// Temporary files: while a file is written it lives under a temporary name in its final
// directory. A crash can leave such a file behind; list() never reports it,
// listTemporary() does, and removeTemporary() deletes it. A live writer's temporary file
// looks exactly the same as a crashed one's, so only the owner of a directory — the
// process holding its lock, with no writer of its own open there — may remove
// temporary files in it.
//
// Errors: methods return Status/Result. Messages name the full location (see describe())
// and the OS reason, e.g. "Unavailable: cannot write /ckpt/job/chk-3/_metadata:
// Input/output error". Codes: InvalidArgument (bad path, file already exists), NotFound,
// NoSpace, PermissionDenied, Unavailable, Corruption, IOError (anything else).
//
// Unavailable or corrupt (status.h) is decided here, in each implementation, and nowhere
// above: Unavailable when the operation got no complete answer — an object store's 5xx,
// 429 or SlowDown, a connection refused, reset or timed out, a HEAD without Content-Length,
// a body shorter than its Content-Length or than the range asked for, EIO and the network
// errnos of a local or network file system. Such a failure says nothing about the file.
// Corruption only from a complete answer that contradicts the file as it was opened (a
// read past its end, an object store now reporting another size for it). Sizes reported
// by open(), fileSize() and list() always come from complete answers. Whether a file
// matches a snapshot's `_metadata` is decided by jobhost/state/snapshot_file.h alone.
//
// Thread-safety: all CheckpointStorage methods are thread-safe and may be called
// concurrently, including on the same paths (the outcome is then that of some serial
// order, e.g. exactly one of two concurrent creators of one path succeeds). A
// WritableFile is used by one thread at a time. ReadableFile methods are thread-safe.
// Files returned by create()/open() may outlive the storage object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/state/status.h"

namespace jobhost::state {

class FileSystem;  // file_system.h

/// A file being written. Obtained from CheckpointStorage::create(); owned by the caller.
/// Not thread-safe: use from one thread at a time.
class WritableFile {
 public:
  WritableFile() = default;
  WritableFile(const WritableFile&) = delete;
  WritableFile& operator=(const WritableFile&) = delete;

  /// Discards the file unless close() returned OK: nothing becomes visible under the
  /// final name and temporary data is removed (best effort).
  virtual ~WritableFile() = default;

  /// Appends bytes. Data may be buffered; errors may therefore surface only in a later
  /// append() or in close(). After an error every later call returns that same error.
  /// Appending after close() is InvalidArgument.
  virtual Status append(std::string_view data) = 0;

  /// Bytes appended so far (including buffered bytes).
  virtual uint64_t size() const = 0;

  /// Flushes, makes the contents durable and publishes the file under its final name.
  /// Fails with InvalidArgument "already exists" if a file appeared at the path since
  /// create(); the existing file is left untouched. On any failure the file is
  /// discarded and is not visible. Calling close() again returns InvalidArgument.
  virtual Status close() = 0;
};

/// A published file opened for reading. Owned by the caller. Thread-safe.
class ReadableFile {
 public:
  ReadableFile() = default;
  ReadableFile(const ReadableFile&) = delete;
  ReadableFile& operator=(const ReadableFile&) = delete;
  virtual ~ReadableFile() = default;

  /// Size of the file when it was opened.
  virtual uint64_t size() const = 0;

  /// Replaces *out with exactly n bytes starting at offset. If the file ends before
  /// offset + n (a complete answer says so), returns Corruption ("truncated ...");
  /// Unavailable if no complete answer came. *out is then unspecified.
  virtual Status read(uint64_t offset, size_t n, std::string* out) const = 0;
};

/// One file found by CheckpointStorage::list().
struct FileEntry {
  std::string path;  // relative to the storage root, '/'-separated
  uint64_t size = 0;

  bool operator==(const FileEntry&) const = default;
};

/// Files uploaded together and published together: CheckpointStorage::createBatch().
///
/// Uploading n files with putFile() costs, on a local file system, n times "fsync the
/// file, rename it, fsync its directory", each a journal commit the next step waits for.
/// A batch makes each file's bytes durable under a temporary name as it is added (the
/// fsyncs of files added from several threads run at the same time), and commit() then
/// renames them all and fsyncs each directory involved once.
///
/// Contract:
///  - A file is under its final name only once its bytes are durable, as with putFile().
///  - commit() returning OK: every file added is published under its final name and
///    durable, exactly as if putFile() had returned OK for each.
///  - commit() failing, or the batch destroyed without a successful commit() (a failure
///    or an abort of the caller): no file of the batch stays under its final name (any
///    already published are removed again) and its temporary files are removed. Best
///    effort, as every clean-up: a removal that fails leaves a complete file, which is
///    garbage for `jobhost gc` like any file no `_metadata` references.
///  - Before commit() returns, whether an added file is visible depends on the storage:
///    LocalFileStorage shows none; the default implementation (object stores, whose
///    every put is atomic and durable) publishes each file in putFile(). Readers must
///    not rely on either.
///  - A crash at any point leaves under final names only complete files (all, some or
///    none of the batch); temporary files are what listTemporary() reports.
///
/// Thread-safety: putFile() may be called from several threads at once (parallel
/// transfers); commit() once, from one thread, after every putFile() has returned. The
/// destructor must not run concurrently with either. A batch must not outlive the
/// storage that created it.
class FileBatch {
 public:
  FileBatch() = default;
  FileBatch(const FileBatch&) = delete;
  FileBatch& operator=(const FileBatch&) = delete;

  /// Removes every file of the batch unless commit() returned OK (see above).
  virtual ~FileBatch() = default;

  /// Adds a copy of the local file localSourcePath, to be published at path. Errors as
  /// CheckpointStorage::putFile(): InvalidArgument "already exists" if a file is at path
  /// or the batch already holds one for path (a creator racing with the batch is
  /// detected by commit()), NotFound for a missing source, I/O errors. A failed putFile()
  /// leaves nothing of that file, and the batch usable: the caller may add the file
  /// under another name, or discard the batch. After commit(): InvalidArgument.
  virtual Status putFile(const std::string& path, const std::string& localSourcePath) = 0;

  /// Publishes every file added, durably. On failure none of them is published (see
  /// above): InvalidArgument "already exists" if a file appeared at one of the paths
  /// since it was added (nothing is overwritten), I/O errors. OK for an empty batch. A
  /// second call is InvalidArgument.
  virtual Status commit() = 0;
};

class CheckpointStorage {
 public:
  CheckpointStorage() = default;
  CheckpointStorage(const CheckpointStorage&) = delete;
  CheckpointStorage& operator=(const CheckpointStorage&) = delete;
  virtual ~CheckpointStorage() = default;

  /// Starts writing a new file at path; missing parent directories (and the root) are
  /// created. Fails with InvalidArgument "already exists" if a file is already at path
  /// (a concurrent creator is only detected at close()).
  virtual Result<std::unique_ptr<WritableFile>> create(const std::string& path) = 0;

  /// Copies the local file localSourcePath to path, durably, as create()+close() would.
  /// Never overwrites: InvalidArgument "already exists" if path exists. A missing
  /// source is NotFound, with the source path in the message.
  virtual Status putFile(const std::string& path, const std::string& localSourcePath) = 0;

  /// Writes bytes as a new file at path: create(), append(bytes), close().
  virtual Status put(const std::string& path, std::string_view bytes) = 0;

  /// Starts a batch of files to copy in and publish together (FileBatch), for uploads of
  /// many files (a RocksDB checkpoint's SSTs, MANIFEST, CURRENT and OPTIONS). The default
  /// publishes each file with putFile() as it is added, and removes them again when the
  /// batch goes away uncommitted: right for a storage whose puts are atomic and durable
  /// one by one (an object store).
  virtual std::unique_ptr<FileBatch> createBatch();

  /// Opens the file at path for reading. NotFound if there is no file at path
  /// (including when path is a directory).
  virtual Result<std::unique_ptr<ReadableFile>> open(const std::string& path) = 0;

  /// Replaces *out with the whole content of the file at path.
  virtual Status get(const std::string& path, std::string* out) = 0;

  /// Copies the file at path to the local file localDest, creating or truncating it,
  /// and fsyncs its data (not its directory entry). On failure localDest is removed.
  /// localDest's parent directory must exist.
  virtual Status getToLocalFile(const std::string& path, const std::string& localDest) = 0;

  /// How fetchToLocal() may produce its local copy.
  struct FetchOptions {
    /// fsync the local copy's data. A restore that syncs once at the end (or not at
    /// all: the checkpoint is the durable copy) turns this off.
    bool sync = true;
    /// Make localDest a hard link to the stored file when the storage keeps its files on
    /// the same local file system; otherwise copy. The caller promises never to write
    /// into, truncate or chmod localDest (reading and unlinking are fine): it *is* the
    /// checkpoint's file. Only for files never modified after creation (SSTs).
    bool allowHardLink = false;
  };

  /// getToLocalFile() with options; *linked (may be null) says whether localDest became
  /// a hard link. Errors as getToLocalFile(); on failure localDest does not exist. The
  /// default copies through getToLocalFile() (syncing, never linking).
  virtual Status fetchToLocal(const std::string& path, const std::string& localDest, const FetchOptions& options,
                              bool* linked) {
    (void)options;
    if (linked != nullptr) *linked = false;
    return getToLocalFile(path, localDest);
  }

  /// Size in bytes of the file at path; NotFound if there is none.
  virtual Result<uint64_t> fileSize(const std::string& path) = 0;

  /// True if a published file exists at path. False for invalid paths, directories
  /// and on errors.
  virtual bool exists(const std::string& path) = 0;

  /// Replaces *out with every file under dirPrefix ("" = whole storage), recursively,
  /// sorted by path. In-flight temporary files are skipped. A missing prefix gives an
  /// empty list and OK.
  virtual Status list(const std::string& dirPrefix, std::vector<FileEntry>* out) = 0;

  /// Removes the file at path, durably (the removal survives a crash once this returns
  /// OK: the registry relies on it to remove `_metadata` before the files it names).
  /// NotFound if there is none. Directories that become empty are left in place (list()
  /// does not report them).
  virtual Status remove(const std::string& path) = 0;

  /// In-flight temporary files under dirPrefix (writes that never completed, e.g. left by
  /// a crash), recursively, sorted, by their real storage-relative names. list() still
  /// skips them. A missing prefix gives an empty list and OK.
  virtual Status listTemporary(const std::string& dirPrefix, std::vector<FileEntry>* out) = 0;

  /// Removes one file returned by listTemporary(). InvalidArgument for a name that is not
  /// a temporary name; NotFound if gone. Only the owner of the directory (the process
  /// holding its lock) may call this: a temporary file of a live writer looks the same,
  /// and removing it makes that writer's close() fail.
  virtual Status removeTemporary(const std::string& path) = 0;

  /// Removes everything under dirPrefix ("" = whole storage, the root itself is kept),
  /// including in-flight temporary files; writers still open under it will then fail
  /// in close(). OK if the prefix does not exist.
  virtual Status removeAll(const std::string& dirPrefix) = 0;

  /// A human-usable location for path, for messages (for local storage the absolute
  /// local path). Does not validate path.
  virtual std::string describe(const std::string& path) const = 0;

  /// The storage root as a URI, e.g. "file:///var/lib/jobhost/checkpoints".
  virtual std::string rootUri() const = 0;

  /// Asks the storage once, without retries or backoff, whether it answers now: OK, or
  /// the error (Unavailable while it does not answer). Reads and writes nothing. For
  /// callers waiting out an outage (the checkpoint coordinator asks once per interval, so
  /// it sees the store come back at once). The default asks fileSize() of a name no file
  /// has and takes NotFound for an answer.
  virtual Status probe();
};

/// Checks a file path against the rules above. OK or InvalidArgument naming the path.
Status validateStoragePath(std::string_view path);

/// Checks a directory prefix (list, removeAll): "" or a valid path, optionally with one
/// trailing '/'. OK or InvalidArgument.
Status validateStoragePrefix(std::string_view dirPrefix);

/// Opens checkpoint storage at uriOrPath: "file:///abs/path", an absolute path, or a
/// relative path (resolved against the current directory now). Other URI schemes are
/// InvalidArgument("unsupported storage scheme 'x'; use a local path or file:///").
/// Does not touch the filesystem: the root directory is created on the first write.
/// File URIs are not percent-decoded. All I/O goes through fs (nullptr: the real one,
/// defaultFileSystem()); the storage and its open files keep fs alive.
Result<std::unique_ptr<CheckpointStorage>> openStorage(const std::string& uriOrPath,
                                                       std::shared_ptr<FileSystem> fs = nullptr);

}  // namespace jobhost::state
