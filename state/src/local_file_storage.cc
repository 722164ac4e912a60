// local_file_storage.cc — CheckpointStorage on a local (or locally mounted) filesystem.
//
// Publishing protocol for every new file: write to ".<name>.tmp.<random>" in the final
// directory, fsync it, move it to the final name without overwriting (renameat2
// RENAME_NOREPLACE, else link+unlink), then fsync the directory. Directories created on
// the way are made durable by fsyncing their parents. list() skips temporary names,
// so a crash at any point leaves either nothing or the complete file visible.
//
// Thread-safety: LocalFileStorage holds only its immutable root path; every operation
// works on its own file descriptors, so all methods are thread-safe. Races between
// concurrent operations on the same path are resolved by the kernel (O_EXCL,
// RENAME_NOREPLACE / link), never by overwriting.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/status.h"

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

void closeQuietly(int fd) {
  if (fd >= 0) ::close(fd);
}

Status writeAll(int fd, const char* data, size_t n, const std::string& fullPath) {
  while (n > 0) {
    ssize_t written = ::write(fd, data, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      return fromErrno("cannot write " + fullPath, errno);
    }
    data += written;
    n -= static_cast<size_t>(written);
  }
  return Status::OK();
}

Status fsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fromErrno("cannot sync directory " + dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems cannot fsync directories (EINVAL); nothing more can be done there.
  if (rc != 0 && err != EINVAL) return fromErrno("cannot sync directory " + dir, err);
  return Status::OK();
}

// mkdir -p for an absolute directory; fsyncs the parent of every directory it creates.
Status ensureDir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::OK();
    return fromErrno("cannot create directory " + dir, ENOTDIR);
  }
  if (errno != ENOENT) return fromErrno("cannot create directory " + dir, errno);
  std::string parent = parentOf(dir);
  if (parent != dir) {
    Status s = ensureDir(parent);
    if (!s.ok()) return s;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return fromErrno("cannot create directory " + dir, errno);
  }
  // Also after EEXIST: a concurrent creator may not have synced the parent yet, and our
  // file must not depend on it having done so.
  return fsyncDir(parent);
}

// Copies in to out until EOF. copy_file_range where the kernel supports it for these
// files, else a read/write loop. Adds the copied byte count to *copied.
Status copyFd(int in, int out, const std::string& inName, const std::string& outName,
              uint64_t* copied) {
  const std::string context = "cannot copy " + inName + " to " + outName;
  bool useCopyFileRange = true;
  while (useCopyFileRange) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, kCopyChunkSize, 0);
    if (n > 0) {
      *copied += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) return Status::OK();
    if (errno == EINTR) continue;
    if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
        errno == ENOTSUP || errno == EBADF) {
      useCopyFileRange = false;  // both file offsets are consistent; continue by hand
    } else {
      return fromErrno(context, errno);
    }
  }
  std::vector<char> buf(kCopyChunkSize);
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fromErrno("cannot read " + inName, errno);
    }
    if (n == 0) return Status::OK();
    Status s = writeAll(out, buf.data(), static_cast<size_t>(n), outName);
    if (!s.ok()) return s;
    *copied += static_cast<uint64_t>(n);
  }
}

// Moves temp to final without ever replacing an existing final.
Status publish(const std::string& temp, const std::string& final) {
  const std::string context = "cannot publish " + final;
#if defined(RENAME_NOREPLACE)
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final.c_str(), RENAME_NOREPLACE) == 0) {
    return Status::OK();
  }
  if (errno == EEXIST) return alreadyExists(final);
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOTSUP) {
    return fromErrno(context, errno);
  }
#endif
  if (::link(temp.c_str(), final.c_str()) == 0) {
    ::unlink(temp.c_str());  // a leftover would be a hidden temp name; harmless
    return Status::OK();
  }
  if (errno == EEXIST) return alreadyExists(final);
  if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOTSUP) {
    return fromErrno(context, errno);
  }
  // The filesystem has neither RENAME_NOREPLACE nor hard links. Check, then rename: only
  // a creator racing within this window could be overwritten.
  struct stat st;
  if (::lstat(final.c_str(), &st) == 0) return alreadyExists(final);
  if (::rename(temp.c_str(), final.c_str()) != 0) return fromErrno(context, errno);
  return Status::OK();
}

class LocalWritableFile final : public WritableFile {
 public:
  LocalWritableFile(std::string finalPath, std::string tempPath, int fd)
      : finalPath_(std::move(finalPath)), tempPath_(std::move(tempPath)), fd_(fd) {}

  ~LocalWritableFile() override { discard(); }

  Status append(std::string_view data) override {
    if (closed_) return Status::InvalidArgument("cannot write " + finalPath_ + ": already closed");
    if (!status_.ok()) return status_;
    if (buffer_.size() + data.size() > kWriteBufferSize) {
      Status s = flush();
      if (!s.ok()) return fail(std::move(s));
      if (data.size() >= kWriteBufferSize) {
        s = writeAll(fd_, data.data(), data.size(), finalPath_);
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
    closed_ = true;
    if (!status_.ok()) return status_;
    Status s = flush();
    if (!s.ok()) return fail(std::move(s));
    if (::fsync(fd_) != 0) return fail(fromErrno("cannot sync " + finalPath_, errno));
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return fail(fromErrno("cannot write " + finalPath_, errno));
    s = publish(tempPath_, finalPath_);
    if (!s.ok()) return fail(std::move(s));
    tempPath_.clear();  // now lives under finalPath_
    s = fsyncDir(parentOf(finalPath_));
    if (!s.ok()) {
      // Not durable, so not successfully closed: must not stay visible.
      ::unlink(finalPath_.c_str());
      status_ = s;
      return s;
    }
    return Status::OK();
  }

  // Appends the rest of the open local file srcFd (named srcName for messages).
  Status appendFrom(int srcFd, const std::string& srcName, uint64_t* copied) {
    if (!status_.ok()) return status_;
    Status s = flush();
    if (!s.ok()) return fail(std::move(s));
    s = copyFd(srcFd, fd_, srcName, finalPath_, copied);
    size_ += *copied;
    if (!s.ok()) return fail(std::move(s));
    return Status::OK();
  }

 private:
  Status flush() {
    if (buffer_.empty()) return Status::OK();
    Status s = writeAll(fd_, buffer_.data(), buffer_.size(), finalPath_);
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
    closeQuietly(std::exchange(fd_, -1));
    if (!tempPath_.empty()) {
      ::unlink(tempPath_.c_str());
      tempPath_.clear();
    }
    buffer_.clear();
  }

  const std::string finalPath_;
  std::string tempPath_;  // empty once published or discarded
  int fd_;
  std::string buffer_;
  uint64_t size_ = 0;
  bool closed_ = false;
  Status status_;  // first error; sticky
};

class LocalReadableFile final : public ReadableFile {
 public:
  LocalReadableFile(int fd, std::string fullPath, uint64_t size)
      : fd_(fd), fullPath_(std::move(fullPath)), size_(size) {}
  ~LocalReadableFile() override { ::close(fd_); }

  uint64_t size() const override { return size_; }

  Status read(uint64_t offset, size_t n, std::string* out) const override {
    // Checked against the size first so a corrupt length cannot cause a huge allocation.
    if (offset > size_ || n > size_ - offset) {
      return truncated(offset, n, offset < size_ ? size_ - offset : 0);
    }
    out->resize(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd_, out->data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0) {
        if (errno == EINTR) continue;
        return fromErrno("cannot read " + fullPath_, errno);
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
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

  const int fd_;
  const std::string fullPath_;
  const uint64_t size_;
};

std::string stripTrailingSlash(std::string_view prefix) {
  if (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  return std::string(prefix);
}

class LocalFileStorage final : public CheckpointStorage {
 public:
  explicit LocalFileStorage(std::string root) : root_(std::move(root)) {}

  Result<std::unique_ptr<WritableFile>> create(const std::string& path) override {
    auto writer = startWrite(path);
    if (!writer.ok()) return writer.status();
    return std::unique_ptr<WritableFile>(std::move(writer).value());
  }

  Status putFile(const std::string& path, const std::string& localSourcePath) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    int src = ::open(localSourcePath.c_str(), O_RDONLY | O_CLOEXEC);
    if (src < 0) return fromErrno("cannot open local file " + localSourcePath, errno);
    struct stat st;
    if (::fstat(src, &st) != 0) {
      s = fromErrno("cannot stat local file " + localSourcePath, errno);
      ::close(src);
      return s;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(src);
      return Status::InvalidArgument("cannot upload " + localSourcePath + ": not a regular file");
    }
    auto writer = startWrite(path);
    if (!writer.ok()) {
      ::close(src);
      return writer.status();
    }
    uint64_t copied = 0;
    s = (*writer)->appendFrom(src, localSourcePath, &copied);
    ::close(src);
    if (!s.ok()) return s;
    if (copied != static_cast<uint64_t>(st.st_size)) {
      return Status::IOError("cannot upload " + localSourcePath + " to " + describe(path) +
                             ": source changed size during copy (" +
                             std::to_string(st.st_size) + " -> " + std::to_string(copied) +
                             " bytes)");
    }
    return (*writer)->close();
  }

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
    int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lookupError("cannot open " + full, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      s = fromErrno("cannot stat " + full, errno);
      ::close(fd);
      return s;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::NotFound("cannot open " + full + ": not a file");
    }
    return std::unique_ptr<ReadableFile>(
        new LocalReadableFile(fd, full, static_cast<uint64_t>(st.st_size)));
  }

  Status get(const std::string& path, std::string* out) override {
    auto file = open(path);
    if (!file.ok()) return file.status();
    return (*file)->read(0, (*file)->size(), out);
  }

  Status getToLocalFile(const std::string& path, const std::string& localDest) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    int src = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
    if (src < 0) return lookupError("cannot open " + full, errno);
    struct stat st;
    if (::fstat(src, &st) != 0) {
      s = fromErrno("cannot stat " + full, errno);
      ::close(src);
      return s;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(src);
      return Status::NotFound("cannot open " + full + ": not a file");
    }
    int dst = ::open(localDest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (dst < 0) {
      s = fromErrno("cannot create local file " + localDest, errno);
      ::close(src);
      return s;
    }
    uint64_t copied = 0;
    s = copyFd(src, dst, full, localDest, &copied);
    ::close(src);
    if (s.ok() && copied != static_cast<uint64_t>(st.st_size)) {
      s = Status::Corruption("truncated copy of " + full + " to " + localDest + ": expected " +
                             std::to_string(st.st_size) + " bytes, copied " +
                             std::to_string(copied));
    }
    if (s.ok() && ::fsync(dst) != 0) s = fromErrno("cannot sync local file " + localDest, errno);
    if (::close(dst) != 0 && s.ok()) s = fromErrno("cannot write local file " + localDest, errno);
    if (!s.ok()) ::unlink(localDest.c_str());
    return s;
  }

  Result<uint64_t> fileSize(const std::string& path) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    struct stat st;
    if (::stat(full.c_str(), &st) != 0) return lookupError("cannot stat " + full, errno);
    if (!S_ISREG(st.st_mode)) return Status::NotFound("cannot stat " + full + ": not a file");
    return static_cast<uint64_t>(st.st_size);
  }

  bool exists(const std::string& path) override {
    if (!validateStoragePath(path).ok()) return false;
    struct stat st;
    return ::stat(fullPath(path).c_str(), &st) == 0 && S_ISREG(st.st_mode);
  }

  Status list(const std::string& dirPrefix, std::vector<FileEntry>* out) override {
    Status s = validateStoragePrefix(dirPrefix);
    if (!s.ok()) return s;
    const std::string prefix = stripTrailingSlash(dirPrefix);
    std::vector<FileEntry> entries;
    s = walk(prefix.empty() ? root_ : fullPath(prefix), prefix.empty() ? "" : prefix + "/",
             &entries);
    if (!s.ok()) return s;
    std::sort(entries.begin(), entries.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    *out = std::move(entries);
    return Status::OK();
  }

  Status remove(const std::string& path) override {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    if (::unlink(full.c_str()) != 0) {
      if (errno == EISDIR) return Status::NotFound("cannot remove " + full + ": not a file");
      return lookupError("cannot remove " + full, errno);
    }
    return fsyncDir(parentOf(full));
  }

  Status removeAll(const std::string& dirPrefix) override {
    Status s = validateStoragePrefix(dirPrefix);
    if (!s.ok()) return s;
    const std::string prefix = stripTrailingSlash(dirPrefix);
    if (prefix.empty()) return removeContents(root_);
    const std::string full = fullPath(prefix);
    struct stat st;
    if (::lstat(full.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return Status::OK();
      return fromErrno("cannot remove " + full, errno);
    }
    if (!S_ISDIR(st.st_mode)) return Status::OK();  // a file prefix has nothing under it
    s = removeTree(full);
    if (!s.ok()) return s;
    return fsyncDir(parentOf(full));
  }

  std::string describe(const std::string& path) const override {
    return path.empty() ? root_ : fullPath(path);
  }

  std::string rootUri() const override { return "file://" + root_; }

 private:
  std::string fullPath(const std::string& relative) const {
    return root_ == "/" ? "/" + relative : root_ + "/" + relative;
  }

  Result<std::unique_ptr<LocalWritableFile>> startWrite(const std::string& path) {
    Status s = validateStoragePath(path);
    if (!s.ok()) return s;
    const std::string full = fullPath(path);
    struct stat st;
    if (::lstat(full.c_str(), &st) == 0) return alreadyExists(full);
    if (errno != ENOENT) return fromErrno("cannot create " + full, errno);
    const std::string dir = parentOf(full);
    s = ensureDir(dir);
    if (!s.ok()) return s;
    const std::string stem = baseNameOf(full).substr(0, kMaxTempStemLength);
    for (int attempt = 0; attempt < kTempNameAttempts; ++attempt) {
      std::string temp = dir + "/." + stem + std::string(kTempMarker) + randomHex();
      int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) return std::make_unique<LocalWritableFile>(full, std::move(temp), fd);
      if (errno != EEXIST) return fromErrno("cannot create " + full, errno);
    }
    return Status::IOError("cannot create " + full + ": no unused temporary name");
  }

  // Appends every regular file under absDir to *entries as relPrefix + name.
  static Status walk(const std::string& absDir, const std::string& relPrefix,
                     std::vector<FileEntry>* entries) {
    DIR* dir = ::opendir(absDir.c_str());
    if (dir == nullptr) {
      // Missing (or removed concurrently), or a file: nothing under it.
      if (errno == ENOENT || errno == ENOTDIR) return Status::OK();
      return fromErrno("cannot list " + absDir, errno);
    }
    std::vector<std::string> subdirs;
    Status s;
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(dir);
      if (e == nullptr) {
        if (errno != 0) s = fromErrno("cannot list " + absDir, errno);
        break;
      }
      std::string_view name(e->d_name);
      if (name == "." || name == ".." || isTempName(name)) continue;
      struct stat st;
      if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // removed concurrently
        s = fromErrno("cannot stat " + absDir + "/" + e->d_name, errno);
        break;
      }
      if (S_ISDIR(st.st_mode)) {
        subdirs.emplace_back(name);
      } else if (S_ISREG(st.st_mode)) {
        entries->push_back({relPrefix + e->d_name, static_cast<uint64_t>(st.st_size)});
      }  // symlinks, sockets etc. are not storage files
    }
    ::closedir(dir);
    if (!s.ok()) return s;
    for (const std::string& sub : subdirs) {
      s = walk(absDir + "/" + sub, relPrefix + sub + "/", entries);
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  // Removes everything inside absDir (not absDir itself). OK if absDir is missing.
  static Status removeContents(const std::string& absDir) {
    DIR* dir = ::opendir(absDir.c_str());
    if (dir == nullptr) {
      if (errno == ENOENT) return Status::OK();
      return fromErrno("cannot remove contents of " + absDir, errno);
    }
    std::vector<std::pair<std::string, bool>> children;  // name, is directory
    Status s;
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(dir);
      if (e == nullptr) {
        if (errno != 0) s = fromErrno("cannot list " + absDir, errno);
        break;
      }
      std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      struct stat st;
      if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        s = fromErrno("cannot stat " + absDir + "/" + e->d_name, errno);
        break;
      }
      children.emplace_back(std::string(name), S_ISDIR(st.st_mode));
    }
    ::closedir(dir);
    if (!s.ok()) return s;
    for (const auto& [name, isDir] : children) {
      const std::string child = absDir + "/" + name;
      if (isDir) {
        s = removeTree(child);
      } else if (::unlink(child.c_str()) != 0 && errno != ENOENT) {
        s = fromErrno("cannot remove " + child, errno);
      }
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  static Status removeTree(const std::string& absDir) {
    Status s = removeContents(absDir);
    if (!s.ok()) return s;
    if (::rmdir(absDir.c_str()) != 0 && errno != ENOENT) {
      return fromErrno("cannot remove " + absDir, errno);
    }
    return Status::OK();
  }

  const std::string root_;  // absolute, lexically normal, no trailing '/' (unless "/")
};

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

Result<std::unique_ptr<CheckpointStorage>> openStorage(const std::string& uriOrPath) {
  if (uriOrPath.empty()) return Status::InvalidArgument("empty checkpoint storage location");
  std::string localPath = uriOrPath;
  size_t schemeEnd = uriOrPath.find("://");
  bool hasScheme = schemeEnd != std::string::npos && schemeEnd > 0;
  for (size_t i = 0; hasScheme && i < schemeEnd; ++i) {
    hasScheme = isSchemeChar(uriOrPath[i], i == 0);
  }
  if (hasScheme) {
    std::string scheme = uriOrPath.substr(0, schemeEnd);
    if (toLower(scheme) != "file") {
      return Status::InvalidArgument("unsupported storage scheme '" + scheme +
                                     "'; use a local path or file:///");
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
  return std::unique_ptr<CheckpointStorage>(new LocalFileStorage(std::move(root)));
}

}  // namespace jobhost::state
