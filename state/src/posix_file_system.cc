// posix_file_system.cc — FileSystem on the POSIX (Linux) system calls.
//
// Thread-safety: PosixFileSystem has no state; every file object owns its descriptor.
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jobhost/state/file_system.h"

namespace jobhost::state {
namespace {

FileInfo infoOf(const struct stat& st) {
  FileInfo info;
  if (S_ISREG(st.st_mode)) {
    info.type = FileType::kRegular;
  } else if (S_ISDIR(st.st_mode)) {
    info.type = FileType::kDirectory;
  } else if (S_ISLNK(st.st_mode)) {
    info.type = FileType::kSymlink;
  }
  info.size = static_cast<uint64_t>(st.st_size);
  return info;
}

class PosixReadableFile final : public FsReadableFile {
 public:
  PosixReadableFile(int fd, FileInfo info) : fd_(fd), info_(info) {}
  ~PosixReadableFile() override { ::close(fd_); }

  FileInfo info() const override { return info_; }

  int read(uint64_t offset, size_t n, char* buf, size_t* got) const override {
    for (;;) {
      ssize_t r = ::pread(fd_, buf, n, static_cast<off_t>(offset));
      if (r >= 0) {
        *got = static_cast<size_t>(r);
        return 0;
      }
      if (errno != EINTR) return errno;
    }
  }

  int fd() const { return fd_; }

 private:
  const int fd_;
  const FileInfo info_;
};

class PosixWritableFile final : public FsWritableFile {
 public:
  explicit PosixWritableFile(int fd) : fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  int append(std::string_view data) override {
    const char* p = data.data();
    size_t n = data.size();
    while (n > 0) {
      ssize_t written = ::write(fd_, p, n);
      if (written < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      p += written;
      n -= static_cast<size_t>(written);
      wrote(static_cast<uint64_t>(written));
    }
    return 0;
  }

  int appendCopyOf(const FsReadableFile& src, uint64_t srcOffset, size_t n, size_t* copied) override {
    const auto* posixSrc = dynamic_cast<const PosixReadableFile*>(&src);
    if (posixSrc == nullptr) return EXDEV;  // not a descriptor of ours: copy by hand
    loff_t in = static_cast<loff_t>(srcOffset);
    for (;;) {
      ssize_t r = ::copy_file_range(posixSrc->fd(), &in, fd_, nullptr, n, 0);
      if (r >= 0) {
        *copied = static_cast<size_t>(r);
        wrote(static_cast<uint64_t>(r));
        return 0;
      }
      if (errno != EINTR) return errno;
    }
  }

  int sync() override { return ::fsync(fd_) == 0 ? 0 : errno; }

  int close() override {
    int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  /// Starts the writeback of every kWritebackBytes written (sync_file_range with
  /// SYNC_FILE_RANGE_WRITE: it queues the dirty pages for the disk and does not wait), so
  /// the disk writes a large file while its writer is still producing the rest and the
  /// final fsync finds little left to do (RocksDB's bytes_per_sync). A hint only: errors
  /// are ignored here, as fsync() reports any failure to write.
  void wrote(uint64_t n) {
    written_ += n;
    if (written_ - kicked_ < kWritebackBytes) return;
    (void)::sync_file_range(fd_, static_cast<off64_t>(kicked_), static_cast<off64_t>(written_ - kicked_),
                            SYNC_FILE_RANGE_WRITE);
    kicked_ = written_;
  }
  static constexpr uint64_t kWritebackBytes = uint64_t{1} << 20;
  int fd_;
  uint64_t written_ = 0;  // bytes appended
  uint64_t kicked_ = 0;   // bytes whose writeback was started
};

class PosixFileSystem final : public FileSystem {
 public:
  int newWritableFile(const std::string& path, CreateMode mode,
                      std::unique_ptr<FsWritableFile>* out) override {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == CreateMode::kExclusive ? O_EXCL : O_TRUNC);
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return errno;
    *out = std::make_unique<PosixWritableFile>(fd);
    return 0;
  }

  int newReadableFile(const std::string& path, std::unique_ptr<FsReadableFile>* out) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return err;
    }
    *out = std::make_unique<PosixReadableFile>(fd, infoOf(st));
    return 0;
  }

  int stat(const std::string& path, FileInfo* out) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    *out = infoOf(st);
    return 0;
  }

  int lstat(const std::string& path, FileInfo* out) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return errno;
    *out = infoOf(st);
    return 0;
  }

  int listDir(const std::string& dir, std::vector<std::string>* names) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno;
    std::vector<std::string> found;
    int err = 0;
    for (;;) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        err = errno;
        break;
      }
      std::string_view name(e->d_name);
      if (name != "." && name != "..") found.emplace_back(name);
    }
    ::closedir(d);
    if (err != 0) return err;
    *names = std::move(found);
    return 0;
  }

  int mkdir(const std::string& dir) override { return ::mkdir(dir.c_str(), 0755) == 0 ? 0 : errno; }

  int rmdir(const std::string& dir) override { return ::rmdir(dir.c_str()) == 0 ? 0 : errno; }

  int unlink(const std::string& path) override { return ::unlink(path.c_str()) == 0 ? 0 : errno; }

  int renameNoReplace(const std::string& from, const std::string& to) override {
#if defined(RENAME_NOREPLACE)
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOTSUP) return errno;
#endif
    if (::link(from.c_str(), to.c_str()) == 0) {
      ::unlink(from.c_str());  // a leftover would be a second name of the same file
      return 0;
    }
    if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOTSUP) return errno;
    // Neither RENAME_NOREPLACE nor hard links: check, then rename.
    struct stat st;
    if (::lstat(to.c_str(), &st) == 0) return EEXIST;
    return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
  }

  int link(const std::string& from, const std::string& to) override {
    return ::link(from.c_str(), to.c_str()) == 0 ? 0 : errno;
  }

  int syncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    // Some filesystems cannot fsync directories (EINVAL); nothing more can be done there.
    return rc == 0 || err == EINVAL ? 0 : err;
  }
};

}  // namespace

std::shared_ptr<FileSystem> defaultFileSystem() {
  static const std::shared_ptr<FileSystem> fs = std::make_shared<PosixFileSystem>();
  return fs;
}

}  // namespace jobhost::state
