// jobhost/state/file_system.h — the operating system's file operations behind an interface.
//
// LocalFileStorage (checkpoint_storage.h) performs all its I/O through a FileSystem, so
// a test can put one in between that fails chosen operations or forgets data that was
// never fsynced (tests/support/fault_injection.h), as leveldb's Env does. The interface
// holds exactly the operations the storage needs, with POSIX semantics; paths are local
// paths as the OS takes them. defaultFileSystem() is the real one.
//
// Errors: every operation returns an errno value, 0 on success — not a Status, because
// callers act on particular errors (EEXIST when publishing, ENOENT while listing, EXDEV
// when copying) and word the message themselves, with their own context (fromErrno in
// status.h). The methods are [[nodiscard]]; ignore a best-effort result with (void).
//
// Thread-safety: a FileSystem is thread-safe. An FsWritableFile is used by one thread at
// a time; FsReadableFile methods are thread-safe. Files do not keep their FileSystem
// alive: whoever holds a file also holds a std::shared_ptr to its FileSystem.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace jobhost::state {

enum class FileType { kRegular, kDirectory, kSymlink, kOther };

struct FileInfo {
  FileType type = FileType::kOther;
  uint64_t size = 0;  // bytes, for regular files
};

/// A file open for reading. Closed by the destructor.
class FsReadableFile {
 public:
  FsReadableFile() = default;
  FsReadableFile(const FsReadableFile&) = delete;
  FsReadableFile& operator=(const FsReadableFile&) = delete;
  virtual ~FsReadableFile() = default;

  /// Type and size of the file when it was opened (fstat).
  virtual FileInfo info() const = 0;

  /// Reads up to n bytes at offset into buf (pread) and sets *got; *got == 0 means the
  /// file ends at or before offset. Interrupted calls are retried.
  [[nodiscard]] virtual int read(uint64_t offset, size_t n, char* buf, size_t* got) const = 0;
};

/// A file open for writing, positioned at its end. The destructor closes it if close()
/// was not called (without syncing, ignoring errors).
class FsWritableFile {
 public:
  FsWritableFile() = default;
  FsWritableFile(const FsWritableFile&) = delete;
  FsWritableFile& operator=(const FsWritableFile&) = delete;
  virtual ~FsWritableFile() = default;

  /// Writes all of data at the end of the file (short writes and EINTR are retried).
  [[nodiscard]] virtual int append(std::string_view data) = 0;

  /// Copies up to n bytes of src, starting at srcOffset, to the end of this file inside
  /// the kernel (copy_file_range) and sets *copied; *copied == 0 means src ends at
  /// srcOffset. EXDEV, EINVAL, ENOSYS, EOPNOTSUPP, ENOTSUP or EBADF mean this pair of
  /// files cannot be copied that way (nothing was written): read src and append instead.
  [[nodiscard]] virtual int appendCopyOf(const FsReadableFile& src, uint64_t srcOffset, size_t n,
                                         size_t* copied) = 0;

  /// Makes the data written so far durable (fsync). Not the directory entry: see
  /// FileSystem::syncDir().
  [[nodiscard]] virtual int sync() = 0;

  /// Closes the file; call at most once, and nothing else after it.
  [[nodiscard]] virtual int close() = 0;
};

class FileSystem {
 public:
  FileSystem() = default;
  FileSystem(const FileSystem&) = delete;
  FileSystem& operator=(const FileSystem&) = delete;
  virtual ~FileSystem() = default;

  enum class CreateMode {
    kExclusive,  // a new file; EEXIST if anything is at the path (O_CREAT | O_EXCL)
    kTruncate,   // a new file, or an existing one emptied (O_CREAT | O_TRUNC)
  };

  /// Opens path for writing (mode 0644 before umask). The new directory entry is durable
  /// only after syncDir() of its directory.
  [[nodiscard]] virtual int newWritableFile(const std::string& path, CreateMode mode,
                                            std::unique_ptr<FsWritableFile>* out) = 0;

  /// Opens path for reading. Succeeds for a directory too: check info().type.
  [[nodiscard]] virtual int newReadableFile(const std::string& path,
                                            std::unique_ptr<FsReadableFile>* out) = 0;

  /// Type and size of what is at path, following symbolic links (stat).
  [[nodiscard]] virtual int stat(const std::string& path, FileInfo* out) = 0;

  /// Type and size of the entry at path itself; a symbolic link is kSymlink (lstat).
  [[nodiscard]] virtual int lstat(const std::string& path, FileInfo* out) = 0;

  /// Replaces *names with the names in directory dir, without "." and "..", in no
  /// particular order. ENOENT or ENOTDIR if dir is missing or not a directory.
  [[nodiscard]] virtual int listDir(const std::string& dir, std::vector<std::string>* names) = 0;

  /// Creates one directory (mode 0755 before umask); EEXIST if something is at dir.
  [[nodiscard]] virtual int mkdir(const std::string& dir) = 0;

  /// Removes an empty directory.
  [[nodiscard]] virtual int rmdir(const std::string& dir) = 0;

  /// Removes a file (EISDIR for a directory).
  [[nodiscard]] virtual int unlink(const std::string& path) = 0;

  /// Moves from to to, never replacing an existing to: EEXIST if to exists. Atomic where
  /// the filesystem supports renameat2(RENAME_NOREPLACE) or hard links (link + unlink,
  /// which may leave from behind if the unlink fails); on a filesystem with neither,
  /// a creator of to racing with the final check-then-rename could be replaced.
  [[nodiscard]] virtual int renameNoReplace(const std::string& from, const std::string& to) = 0;

  /// Makes `to` a second name (hard link) of the file at `from`; EEXIST if to exists,
  /// EXDEV if they are on different file systems. The default answers EXDEV ("cannot
  /// link here: copy instead"), which is what a file system without links, or a test
  /// double that wants every copy to go through read() and append(), should answer.
  [[nodiscard]] virtual int link(const std::string& from, const std::string& to) {
    (void)from;
    (void)to;
    return EXDEV;
  }

  /// Makes the entries of directory dir durable (creations, renames, removals in it).
  /// A filesystem that cannot sync directories (EINVAL from fsync) counts as success.
  [[nodiscard]] virtual int syncDir(const std::string& dir) = 0;
};

/// The real file system (POSIX calls), shared by everyone who asks.
std::shared_ptr<FileSystem> defaultFileSystem();

}  // namespace jobhost::state
