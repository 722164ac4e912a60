// local_file_storage.cc — CheckpointStorage on a local (or locally mounted) filesystem.
//
// Publishing protocol for every new file: write to ".<name>.tmp.<random>" in the final
// directory, fsync it, move it to the final name without overwriting (renameat2
// RENAME_NOREPLACE, else link+unlink), then fsync the directory. Directories created on
// the way are made durable by fsyncing their parents. list() skips temporary names,
// so a crash at any point leaves either nothing or the complete file visible;
// listTemporary() finds what a crash left.
//
// A FileBatch (LocalFileBatch) runs the same steps with the waits shared: putFile()
// writes and fsyncs its temporary file on the caller's thread (so the fsyncs of files
// added from several threads overlap); commit() moves every file to its final name and
// then fsyncs each directory involved once — those of the files and the parents of
// directories created for them — all at once, on a thread per directory, so that they
// wait for one journal commit together instead of one after the other. Nothing is under
// a final name before every file of the batch is durable; a failed commit() removes what
// it had moved.
//
// Every OS call goes through the FileSystem given to openStorage() (file_system.h);
// this file turns its errno values into Status messages naming the storage path.
//
// Thread-safety: LocalFileStorage holds only its immutable root path and a thread-safe
// FileSystem; every operation works on its own files, so all methods are thread-safe.
// Races between concurrent operations on the same path are resolved by the kernel
// (O_EXCL, RENAME_NOREPLACE / link), never by overwriting.
#include <algorithm>
#include <cerrno>
#include <sys/stat.h>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/file_system.h"
#include "jobhost/state/s3_storage.h"
#include "jobhost/state/status.h"
#include "parallel_transfer.h"

namespace jobhost::state {
namespace {

constexpr size_t kWriteBufferSize = 64 * 1024;
constexpr size_t kCopyChunkSize = 1 << 20;
constexpr std::string_view kTempMarker = ".tmp.";
// Keeps ".<name>.tmp.<16 hex>" within NAME_MAX (255) for long names.
constexpr size_t kMaxTempStemLength = 200;
constexpr int kTempNameAttempts = 16;

// Names of in-flight temporary files: ".<name>.tmp.<random>".
bool isTempName(std::string_view name) {
  return name.size() > 1 && name[0] == '.' && name.find(kTempMarker) != std::string_view::npos;
}

std::string parentOf(const std::string& absPath) {
  size_t slash = absPath.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return absPath.substr(0, slash);
}

std::string baseNameOf(const std::string& absPath) {
  size_t slash = absPath.rfind('/');
  return slash == std::string::npos ? absPath : absPath.substr(slash + 1);
}

std::string randomHex() {
  thread_local std::mt19937_64 rng([] {
    std::random_device device;
    std::seed_seq seq{device(), device(), device(), device()};
    return std::mt19937_64(seq);
  }());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// Like fromErrno, but a path component that is a file (ENOTDIR) also means "no such
// file": storage paths behave like object keys.
Status lookupError(const std::string& context, int err) {
  return fromErrno(context, err == ENOTDIR ? ENOENT : err);
}

Status alreadyExists(const std::string& fullPath) {
  return Status::InvalidArgument("cannot create " + fullPath + ": already exists");
}

Status fsyncDir(FileSystem& fs, const std::string& dir) {
  if (int err = fs.syncDir(dir); err != 0) return fromErrno("cannot sync directory " + dir, err);
  return Status::OK();
}

// Directories whose fsync a batch defers to its commit().
using DirSet = std::set<std::string>;

// mkdir -p for an absolute directory. The parent of every directory it creates is
// fsynced, or, with deferredSyncs, added to it for the caller to fsync later.
Status ensureDir(FileSystem& fs, const std::string& dir, DirSet* deferredSyncs = nullptr) {
  FileInfo info;
  int err = fs.stat(dir, &info);
  if (err == 0) {
    if (info.type == FileType::kDirectory) return Status::OK();
    return fromErrno("cannot create directory " + dir, ENOTDIR);
  }
  if (err != ENOENT) return fromErrno("cannot create directory " + dir, err);
  std::string parent = parentOf(dir);
  if (parent != dir) {
    Status s = ensureDir(fs, parent, deferredSyncs);
    if (!s.ok()) return s;
  }
  if (err = fs.mkdir(dir); err != 0 && err != EEXIST) {
    return fromErrno("cannot create directory " + dir, err);
  }
  // Also after EEXIST: a concurrent creator may not have synced the parent yet, and our
  // file must not depend on it having done so.
  if (deferredSyncs != nullptr) {
    deferredSyncs->insert(parent);
    return Status::OK();
  }
  return fsyncDir(fs, parent);
}

bool copyRangeUnsupported(int err) {
  return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == ENOTSUP ||
         err == EBADF;
}

// Appends in (from offset 0 to its end) to out. In the kernel where it supports that for
// these files, else a read/append loop. Adds the copied byte count to *copied.
Status copyFile(const FsReadableFile& in, FsWritableFile& out, const std::string& inName,
                const std::string& outName, uint64_t* copied) {
  uint64_t offset = 0;
  for (;;) {
    size_t n = 0;
    int err = out.appendCopyOf(in, offset, kCopyChunkSize, &n);
    if (err == 0) {
      if (n == 0) return Status::OK();
      offset += n;
      *copied += n;
      continue;
    }
    if (copyRangeUnsupported(err)) break;  // nothing was written: continue by hand
    return fromErrno("cannot copy " + inName + " to " + outName, err);
  }
  std::vector<char> buf(kCopyChunkSize);
  for (;;) {
    size_t n = 0;
    if (int err = in.read(offset, buf.size(), buf.data(), &n); err != 0) {
      return fromErrno("cannot read " + inName, err);
    }
    if (n == 0) return Status::OK();
    if (int err = out.append(std::string_view(buf.data(), n)); err != 0) {
      return fromErrno("cannot write " + outName, err);
    }
    offset += n;
    *copied += n;
  }
}

class LocalWritableFile final : public WritableFile {
 public:
  LocalWritableFile(std::shared_ptr<FileSystem> fs, std::string finalPath, std::string tempPath,
                    std::unique_ptr<FsWritableFile> file)
      : fs_(std::move(fs)),
        finalPath_(std::move(finalPath)),
        tempPath_(std::move(tempPath)),
        file_(std::move(file)) {}

  ~LocalWritableFile() override { discard(); }

  Status append(std::string_view data) override {
    if (closed_) return Status::InvalidArgument("cannot write " + finalPath_ + ": already closed");
    if (!status_.ok()) return status_;
    if (buffer_.size() + data.size() > kWriteBufferSize) {
      Status s = flush();
      if (!s.ok()) return fail(std::move(s));
      if (data.size() >= kWriteBufferSize) {
        s = write(data);
        if (!s.ok()) return fail(std::move(s));
        size_ += data.size();
        return Status::OK();
      }
    }
    buffer_.append(data);
    size_ += data.size();
    return Status::OK();
  }

  uint64_t size() const override { return size_; }

  Status close() override {
    if (closed_) return Status::InvalidArgument("cannot close " + finalPath_ + ": already closed");
    Status s = seal();
    if (!s.ok()) return s;
    s = moveToFinalName();
    if (!s.ok()) return s;
    s = fsyncDir(*fs_, parentOf(finalPath_));
    if (!s.ok()) {
      unpublish();  // not durable, so not successfully closed: must not stay visible
      status_ = s;
    }
    return s;
  }

  // close() in steps, for LocalFileBatch. seal(): flush, fsync and close the temporary
  // file — complete and durable, not yet published; no append() after it.
  Status seal() {
    closed_ = true;
    if (!status_.ok()) return status_;
    Status s = flush();
    if (!s.ok()) return fail(std::move(s));
    if (int err = file_->sync(); err != 0) return fail(fromErrno("cannot sync " + finalPath_, err));
    std::unique_ptr<FsWritableFile> file = std::move(file_);
    if (int err = file->close(); err != 0) return fail(fromErrno("cannot write " + finalPath_, err));
    return Status::OK();
  }

  // After seal(): moves the file to its final name, never replacing a file there. The
  // name is durable only once the caller has fsynced the directory.
  Status moveToFinalName() {
    if (!status_.ok()) return status_;
    int err = fs_->renameNoReplace(tempPath_, finalPath_);
    if (err != 0) {
      return fail(err == EEXIST ? alreadyExists(finalPath_)
                                : fromErrno("cannot publish " + finalPath_, err));
    }
    tempPath_.clear();  // now lives under finalPath_
    return Status::OK();
  }

  // After moveToFinalName(): removes the file from its final name again (best effort),
  // for a publication that could not be made durable.
  void unpublish() { (void)fs_->unlink(finalPath_); }

  const std::string& finalPath() const { return finalPath_; }

  // Appends the whole local file src (named srcName for messages).
  Status appendFrom(const FsReadableFile& src, const std::string& srcName, uint64_t* copied) {
    if (!status_.ok()) return status_;
    Status s = flush();
    if (!s.ok()) return fail(std::move(s));
    s = copyFile(src, *file_, srcName, finalPath_, copied);
    size_ += *copied;
    if (!s.ok()) return fail(std::move(s));
    return Status::OK();
  }

 private:
  Status write(std::string_view data) {
    if (int err = file_->append(data); err != 0) return fromErrno("cannot write " + finalPath_, err);
    return Status::OK();
  }

  Status flush() {
    if (buffer_.empty()) return Status::OK();
    Status s = write(buffer_);
    buffer_.clear();
    return s;
  }

  // Records the first error and discards the temporary file right away (frees space).
  Status fail(Status s) {
    status_ = s;
    discard();
    return s;
  }

  void discard() {
    file_.reset();  // closes without syncing
    if (!tempPath_.empty()) {
      (void)fs_->unlink(tempPath_);
      tempPath_.clear();
    }
    buffer_.clear();
  }

  const std::shared_ptr<FileSystem> fs_;
  const std::string finalPath_;
  std::string tempPath_;                  // empty once published or discarded
  std::unique_ptr<FsWritableFile> file_;  // null once closed or discarded
  std::string buffer_;
  uint64_t size_ = 0;
  bool closed_ = false;
  Status status_;  // first error; sticky
};

class LocalReadableFile final : public ReadableFile {
 public:
  LocalReadableFile(std::shared_ptr<FileSystem> fs, std::unique_ptr<FsReadableFile> file,
                    std::string fullPath)
      : fs_(std::move(fs)),
        file_(std::move(file)),
        fullPath_(std::move(fullPath)),
        size_(file_->info().size) {}

  uint64_t size() const override { return size_; }

  Status read(uint64_t offset, size_t n, std::string* out) const override {
    // Checked against the size first so a corrupt length cannot cause a huge allocation.
    if (offset > size_ || n > size_ - offset) {
      return truncated(offset, n, offset < size_ ? size_ - offset : 0);
    }
    out->resize(n);
    size_t got = 0;
    while (got < n) {
      size_t r = 0;
      if (int err = file_->read(offset + got, n - got, out->data() + got, &r); err != 0) {
        return fromErrno("cannot read " + fullPath_, err);
      }
      if (r == 0) break;
      got += r;
    }
    if (got < n) {
      out->resize(got);
      return truncated(offset, n, got);
    }
    return Status::OK();
  }

 private:
  Status truncated(uint64_t offset, size_t wanted, uint64_t got) const {
    return Status::Corruption("truncated read of " + fullPath_ + ": wanted " +
                              std::to_string(wanted) + " bytes at offset " +
                              std::to_string(offset) + ", got " + std::to_string(got) +
                              " (file size " + std::to_string(size_) + ")");
  }

  const std::shared_ptr<FileSystem> fs_;  // outlives file_
  const std::unique_ptr<FsReadableFile> file_;
  const std::string fullPath_;
  const uint64_t size_;
};

std::string stripTrailingSlash(std::string_view prefix) {
  if (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  return std::string(prefix);
}

// Which files walk() collects.
enum class Visible { kPublished, kTemporary };

class LocalFileStorage final : public CheckpointStorage {
 public:
  LocalFileStorage(std::string root, std::shared_ptr<FileSystem> fs)
      : root_(std::move(root)), fs_(std::move(fs)) {}

  Result<std::unique_ptr<WritableFile>> create(const std::string& path) override {
    auto writer = startWrite(path);
    if (!writer.ok()) return writer.status();
    return std::unique_ptr<WritableFile>(std::move(writer).value());
  }

  Status putFile(const std::string& path, const std::string& localSourcePath) override {
    auto writer = copyIn(path, localSourcePath, nullptr);
    if (!writer.ok()) return writer.status();
    return (*writer)->close();
  }

  std::unique_ptr<FileBatch> createBatch() override;

  // putFile() up to the publication: a writer holding a complete copy of
  // localSourcePath, not yet sealed. Directories created as in startWrite().
  Result<std::unique_ptr<LocalWritableFile>> copyIn(const std::string& path, const std::string& localSourcePath,
                                                    DirSet* deferredSyncs) {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    std::unique_ptr<FsReadableFile> src;
    if (int err = fs_->newReadableFile(localSourcePath, &src); err != 0) {
      return fromErrno("cannot open local file " + localSourcePath, err);
    }
    const FileInfo info = src->info();
    if (info.type != FileType::kRegular) {
      return Status::InvalidArgument("cannot upload " + localSourcePath + ": not a regular file");
    }
    auto writer = startWrite(path, deferredSyncs);
    if (!writer.ok()) return writer.status();
    uint64_t copied = 0;
    s = (*writer)->appendFrom(*src, localSourcePath, &copied);
    src.reset();
    if (!s.ok()) return s;
    if (copied != info.size) {
      return Status::IOError("cannot upload " + localSourcePath + " to " + describe(path) +
                             ": source changed size during copy (" + std::to_string(info.size) +
                             " -> " + std::to_string(copied) + " bytes)");
    }
    return writer;
  }

  FileSystem& fileSystem() const { return *fs_; }

  Status put(const std::string& path, std::string_view bytes) override {
    auto writer = startWrite(path);
    if (!writer.ok()) return writer.status();
    Status s = (*writer)->append(bytes);
    if (!s.ok()) return s;
    return (*writer)->close();
  }

  Result<std::unique_ptr<ReadableFile>> open(const std::string& path) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    auto file = openPublished(full);
    if (!file.ok()) return file.status();
    return std::unique_ptr<ReadableFile>(new LocalReadableFile(fs_, std::move(*file), full));
  }

  Status get(const std::string& path, std::string* out) override {
    auto file = open(path);
    if (!file.ok()) return file.status();
    return (*file)->read(0, (*file)->size(), out);
  }

  Status getToLocalFile(const std::string& path, const std::string& localDest) override {
    return fetchToLocal(path, localDest, FetchOptions{}, nullptr);
  }

  Status fetchToLocal(const std::string& path, const std::string& localDest, const FetchOptions& options,
                      bool* linked) override {
    if (linked != nullptr) *linked = false;
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    auto src = openPublished(full);
    if (!src.ok()) return src.status();
    if (options.allowHardLink) {
      // Same file system: a second name for the same immutable bytes, no copy. Anything
      // else (EXDEV, no link support) falls back to copying.
      int err = fs_->link(full, localDest);
      if (err == 0) {
        if (linked != nullptr) *linked = true;
        return Status::OK();
      }
      if (err == EEXIST) return fromErrno("cannot create local file " + localDest, err);
    }
    std::unique_ptr<FsWritableFile> dst;
    if (int err = fs_->newWritableFile(localDest, FileSystem::CreateMode::kTruncate, &dst);
        err != 0) {
      return fromErrno("cannot create local file " + localDest, err);
    }
    // A local copy of state is private (0600) from before its first byte, whatever the
    // umask: it lands in a job's working directory or a reader's temporary directory.
    if (::chmod(localDest.c_str(), S_IRUSR | S_IWUSR) != 0)
      return fromErrno("cannot make local file " + localDest + " private (chmod 0600)", errno);
    const uint64_t expected = (*src)->info().size;
    uint64_t copied = 0;
    s = copyFile(**src, *dst, full, localDest, &copied);
    src->reset();
    if (s.ok() && copied != expected) {
      s = Status::Corruption("truncated copy of " + full + " to " + localDest + ": expected " +
                             std::to_string(expected) + " bytes, copied " +
                             std::to_string(copied));
    }
    if (s.ok() && options.sync) {
      if (int err = dst->sync(); err != 0) s = fromErrno("cannot sync local file " + localDest, err);
    }
    if (int err = dst->close(); err != 0 && s.ok()) {
      s = fromErrno("cannot write local file " + localDest, err);
    }
    if (!s.ok()) (void)fs_->unlink(localDest);
    return s;
  }

  Result<uint64_t> fileSize(const std::string& path) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    FileInfo info;
    if (int err = fs_->stat(full, &info); err != 0) return lookupError("cannot stat " + full, err);
    if (info.type != FileType::kRegular) {
      return Status::NotFound("cannot stat " + full + ": not a file");
    }
    return info.size;
  }

  bool exists(const std::string& path) override {
    if (!validateStoragePath(path).ok()) return false;
    FileInfo info;
    return fs_->stat(fullPath(path), &info) == 0 && info.type == FileType::kRegular;
  }

  Status list(const std::string& dirPrefix, std::vector<FileEntry>* out) override {
    return collect(dirPrefix, Visible::kPublished, out);
  }

  Status listTemporary(const std::string& dirPrefix, std::vector<FileEntry>* out) override {
    return collect(dirPrefix, Visible::kTemporary, out);
  }

  Status remove(const std::string& path) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    return removeFile(fullPath(path));
  }

  Status removeTemporary(const std::string& path) override {
    size_t slash = path.rfind('/');
    const std::string_view name =
        slash == std::string::npos ? std::string_view(path) : std::string_view(path).substr(slash + 1);
    if (!isTempName(name)) {
      return Status::InvalidArgument("cannot remove '" + path +
                                     "' as a temporary file: not a temporary name (use "
                                     "listTemporary() to find them)");
    }
    if (slash != std::string::npos) {
      Status s = validateStoragePath(std::string_view(path).substr(0, slash));
      if (!s.ok()) return s;
    }
    if (name.find('\0') != std::string_view::npos) {
      return Status::InvalidArgument("invalid storage path '" + path + "': contains a NUL byte");
    }
    return removeFile(fullPath(path));
  }

  Status removeAll(const std::string& dirPrefix) override {
    Status s = validateStoragePrefix(dirPrefix);
    if (!s.ok()) return s;
    const std::string prefix = stripTrailingSlash(dirPrefix);
    if (prefix.empty()) return removeContents(root_);
    const std::string full = fullPath(prefix);
    FileInfo info;
    if (int err = fs_->lstat(full, &info); err != 0) {
      if (err == ENOENT || err == ENOTDIR) return Status::OK();
      return fromErrno("cannot remove " + full, err);
    }
    if (info.type != FileType::kDirectory) return Status::OK();  // a file prefix has nothing under it
    s = removeTree(full);
    if (!s.ok()) return s;
    return fsyncDir(*fs_, parentOf(full));
  }

  std::string describe(const std::string& path) const override {
    return path.empty() ? root_ : fullPath(path);
  }

  std::string rootUri() const override { return "file://" + root_; }

 private:
  std::string fullPath(const std::string& relative) const {
    return root_ == "/" ? "/" + relative : root_ + "/" + relative;
  }

  // Opens a published file (full path) for reading: NotFound unless it is a regular file.
  Result<std::unique_ptr<FsReadableFile>> openPublished(const std::string& full) {
    std::unique_ptr<FsReadableFile> file;
    if (int err = fs_->newReadableFile(full, &file); err != 0) {
      return lookupError("cannot open " + full, err);
    }
    if (file->info().type != FileType::kRegular) {
      return Status::NotFound("cannot open " + full + ": not a file");
    }
    return file;
  }

  Status removeFile(const std::string& full) {
    if (int err = fs_->unlink(full); err != 0) {
      if (err == EISDIR) return Status::NotFound("cannot remove " + full + ": not a file");
      return lookupError("cannot remove " + full, err);
    }
    return fsyncDir(*fs_, parentOf(full));
  }

  // A writer of a new temporary file for path. Directories created for it are made
  // durable now, or, with deferredSyncs, their parents are added there.
  Result<std::unique_ptr<LocalWritableFile>> startWrite(const std::string& path, DirSet* deferredSyncs = nullptr) {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    FileInfo info;
    int err = fs_->lstat(full, &info);
    if (err == 0) return alreadyExists(full);
    if (err != ENOENT) return fromErrno("cannot create " + full, err);
    const std::string dir = parentOf(full);
    s = ensureDir(*fs_, dir, deferredSyncs);
    if (!s.ok()) return s;
    const std::string stem = baseNameOf(full).substr(0, kMaxTempStemLength);
    for (int attempt = 0; attempt < kTempNameAttempts; ++attempt) {
      std::string temp = dir + "/." + stem + std::string(kTempMarker) + randomHex();
      std::unique_ptr<FsWritableFile> file;
      err = fs_->newWritableFile(temp, FileSystem::CreateMode::kExclusive, &file);
      if (err == 0) {
        return std::make_unique<LocalWritableFile>(fs_, full, std::move(temp), std::move(file));
      }
      if (err != EEXIST) return fromErrno("cannot create " + full, err);
    }
    return Status::IOError("cannot create " + full + ": no unused temporary name");
  }

  // list() and listTemporary(): the files of one kind under dirPrefix, sorted by path.
  Status collect(const std::string& dirPrefix, Visible which, std::vector<FileEntry>* out) {
    Status s = validateStoragePrefix(dirPrefix);
    if (!s.ok()) return s;
    const std::string prefix = stripTrailingSlash(dirPrefix);
    std::vector<FileEntry> entries;
    s = walk(prefix.empty() ? root_ : fullPath(prefix), prefix.empty() ? "" : prefix + "/", which,
             &entries);
    if (!s.ok()) return s;
    std::sort(entries.begin(), entries.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    *out = std::move(entries);
    return Status::OK();
  }

  // Appends every regular file of kind `which` under absDir to *entries as relPrefix +
  // name. Directories with temporary names are not entered.
  Status walk(const std::string& absDir, const std::string& relPrefix, Visible which,
              std::vector<FileEntry>* entries) {
    std::vector<std::string> names;
    if (int err = fs_->listDir(absDir, &names); err != 0) {
      // Missing (or removed concurrently), or a file: nothing under it.
      if (err == ENOENT || err == ENOTDIR) return Status::OK();
      return fromErrno("cannot list " + absDir, err);
    }
    std::vector<std::string> subdirs;
    for (const std::string& name : names) {
      const bool temp = isTempName(name);
      if (temp && which == Visible::kPublished) continue;
      FileInfo info;
      if (int err = fs_->lstat(absDir + "/" + name, &info); err != 0) {
        if (err == ENOENT) continue;  // removed concurrently
        return fromErrno("cannot stat " + absDir + "/" + name, err);
      }
      if (info.type == FileType::kDirectory) {
        if (!temp) subdirs.push_back(name);
      } else if (info.type == FileType::kRegular && temp == (which == Visible::kTemporary)) {
        entries->push_back({relPrefix + name, info.size});
      }  // symlinks, sockets etc. are not storage files
    }
    for (const std::string& sub : subdirs) {
      Status s = walk(absDir + "/" + sub, relPrefix + sub + "/", which, entries);
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  // Removes everything inside absDir (not absDir itself). OK if absDir is missing.
  Status removeContents(const std::string& absDir) {
    std::vector<std::string> names;
    if (int err = fs_->listDir(absDir, &names); err != 0) {
      if (err == ENOENT) return Status::OK();
      return fromErrno("cannot remove contents of " + absDir, err);
    }
    for (const std::string& name : names) {
      const std::string child = absDir + "/" + name;
      FileInfo info;
      if (int err = fs_->lstat(child, &info); err != 0) {
        if (err == ENOENT) continue;
        return fromErrno("cannot stat " + child, err);
      }
      if (info.type == FileType::kDirectory) {
        Status s = removeTree(child);
        if (!s.ok()) return s;
      } else if (int err = fs_->unlink(child); err != 0 && err != ENOENT) {
        return fromErrno("cannot remove " + child, err);
      }
    }
    return Status::OK();
  }

  Status removeTree(const std::string& absDir) {
    Status s = removeContents(absDir);
    if (!s.ok()) return s;
    if (int err = fs_->rmdir(absDir); err != 0 && err != ENOENT) {
      return fromErrno("cannot remove " + absDir, err);
    }
    return Status::OK();
  }

  const std::string root_;  // absolute, lexically normal, no trailing '/' (unless "/")
  const std::shared_ptr<FileSystem> fs_;
};

// FileBatch of LocalFileStorage (see the file comment). mu_ guards the bookkeeping only:
// the copies and fsyncs of putFile() run unlocked, in parallel.
class LocalFileBatch final : public FileBatch {
 public:
  explicit LocalFileBatch(LocalFileStorage& storage) : storage_(storage) {}

  // (The destructor: files_ go with the batch, each removing its temporary file unless
  // it was published.)

  Status putFile(const std::string& path, const std::string& localSourcePath) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (committed_) {
        return Status::InvalidArgument("cannot add " + storage_.describe(path) + " to a batch already committed");
      }
      // Reserved while it is copied: two files of one batch for one path would make
      // commit() fail after both were written.
      if (!paths_.insert(path).second) {
        return Status::InvalidArgument("cannot create " + storage_.describe(path) +
                                       ": already exists (added twice to one batch)");
      }
    }
    DirSet deferred;
    auto writer = storage_.copyIn(path, localSourcePath, &deferred);
    Status s = writer.ok() ? (*writer)->seal() : writer.status();
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) {
      paths_.erase(path);
      return s;  // the writer, if any, removed its temporary file
    }
    files_.push_back(std::move(writer).value());
    dirsToSync_.insert(deferred.begin(), deferred.end());
    return s;
  }

  Status commit() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (committed_) return Status::InvalidArgument("cannot commit a batch of files twice");
    committed_ = true;
    for (size_t i = 0; i < files_.size(); ++i) {
      Status s = files_[i]->moveToFinalName();
      if (!s.ok()) return undo(i, std::move(s));
      dirsToSync_.insert(parentOf(files_[i]->finalPath()));
    }
    // Together: on a journaling file system they wait for the same commit, which makes
    // every rename and mkdir durable, instead of a commit (or a cache flush) each in turn.
    const std::vector<std::string> dirs(dirsToSync_.begin(), dirsToSync_.end());
    Status s = runParallel(dirs.size(), static_cast<int>(dirs.size()),
                           [&](size_t i) { return fsyncDir(storage_.fileSystem(), dirs[i]); });
    if (!s.ok()) return undo(files_.size(), std::move(s));
    return Status::OK();
  }

 private:
  // A failed commit(): the first `published` files leave their final names again, the
  // others their temporary names (when files_ goes).
  Status undo(size_t published, Status s) {
    for (size_t i = 0; i < published; ++i) files_[i]->unpublish();
    files_.clear();
    return s;
  }

  LocalFileStorage& storage_;
  std::mutex mu_;
  std::set<std::string> paths_;                          // GUARDED_BY(mu_); added or being added
  std::vector<std::unique_ptr<LocalWritableFile>> files_;  // GUARDED_BY(mu_); sealed, in order of addition
  DirSet dirsToSync_;                                    // GUARDED_BY(mu_)
  bool committed_ = false;                               // GUARDED_BY(mu_)
};

std::unique_ptr<FileBatch> LocalFileStorage::createBatch() { return std::make_unique<LocalFileBatch>(*this); }

Status invalidPath(std::string_view path, std::string_view why) {
  return Status::InvalidArgument("invalid storage path '" + std::string(path) + "': " +
                                 std::string(why));
}

bool isSchemeChar(char c, bool first) {
  bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (first) return alpha;
  return alpha || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

std::string toLower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

}  // namespace

Status validateStoragePath(std::string_view path) {
  if (path.empty()) return invalidPath(path, "empty path");
  if (path.find('\0') != std::string_view::npos) return invalidPath(path, "contains a NUL byte");
  if (path.front() == '/') return invalidPath(path, "must be relative to the storage root");
  size_t start = 0;
  for (;;) {
    size_t end = path.find('/', start);
    std::string_view component =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (component.empty()) return invalidPath(path, "empty path component");
    if (component == "." || component == "..") {
      return invalidPath(path, "'.' and '..' components are not allowed");
    }
    if (isTempName(component)) {
      return invalidPath(path, "names starting with '.' and containing '.tmp.' are reserved");
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return Status::OK();
}

Status validateStoragePrefix(std::string_view dirPrefix) {
  if (dirPrefix.empty()) return Status::OK();
  std::string_view trimmed = dirPrefix;
  if (trimmed.back() == '/') trimmed.remove_suffix(1);
  if (trimmed.empty()) return invalidPath(dirPrefix, "must be relative to the storage root");
  return validateStoragePath(trimmed);
}

Result<std::unique_ptr<CheckpointStorage>> openStorage(const std::string& uriOrPath,
                                                       std::shared_ptr<FileSystem> fs) {
  if (uriOrPath.empty()) return Status::InvalidArgument("empty checkpoint storage location");
  std::string localPath = uriOrPath;
  size_t schemeEnd = uriOrPath.find("://");
  bool hasScheme = schemeEnd != std::string::npos && schemeEnd > 0;
  for (size_t i = 0; hasScheme && i < schemeEnd; ++i) {
    hasScheme = isSchemeChar(uriOrPath[i], i == 0);
  }
  if (hasScheme) {
    std::string scheme = uriOrPath.substr(0, schemeEnd);
    if (toLower(scheme) == "s3") return openS3Storage(uriOrPath, defaultS3Options());
    if (toLower(scheme) != "file") {
      return Status::InvalidArgument("unsupported storage scheme '" + scheme +
                                     "'; use a local path, file:/// or s3://bucket/prefix");
    }
    localPath = uriOrPath.substr(schemeEnd + 3);
    if (localPath.empty() || localPath.front() != '/') {
      return Status::InvalidArgument("invalid file URI '" + uriOrPath +
                                     "': expected file:///absolute/path");
    }
  }
  std::filesystem::path path(localPath);
  if (path.is_relative()) {
    std::error_code ec;
    path = std::filesystem::absolute(path, ec);
    if (ec) {
      return Status::IOError("cannot resolve storage path " + localPath + ": " + ec.message());
    }
  }
  std::string root = path.lexically_normal().string();
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (fs == nullptr) fs = defaultFileSystem();
  return std::unique_ptr<CheckpointStorage>(new LocalFileStorage(std::move(root), std::move(fs)));
}

}  // namespace jobhost::state
