// host/plugin/elf_metadata.h — reads a plugin's job classes from its file, without
// loading it.
//
// JOBHOST_JOB (sdk/include/jobhost/job.h) puts one record per job class into the ELF
// section ".jhmeta":
//   "JHJOB\001" name "\0" description "\0" backend "\0" incremental "\0"
//               sdkVersion "\0" abiTag "\0"
// The linker concatenates the records, possibly with zero padding between them. The
// section is allocated (SHF_ALLOC), so `strip` keeps it, and reading it runs no plugin
// code. This is what `jobhost info` shows and what the loader checks for SDK/ABI
// compatibility before dlopen().
//
// readPluginMetadata() is a pure function over bytes so that it can be fuzzed
// (tests/fuzz/plugin_metadata_fuzz.cc): it bounds-checks every offset and size taken
// from the input and never crashes, throws (other than std::bad_alloc) or reads out of
// range, whatever the input.
//
// Thread-safety: all functions are reentrant and may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "host/plugin/plugin_error.h"

namespace jobhost::host {

/// One job class as declared in a plugin's .jhmeta section.
struct JobClassMeta {
  std::string name;         // class name as given to -c; a C identifier
  std::string description;  // one line; may be empty
  std::string backend;      // declared state backend, e.g. "hashmap" or "rocksdb"
  bool incremental = false; // declared incremental checkpoints (rocksdb only)
  std::string sdkVersion;   // JOBHOST_SDK_VERSION of the plugin build, e.g. "1.0.0"
  std::string abiTag;       // JOBHOST_ABI_TAG of the plugin build

  bool operator==(const JobClassMeta&) const = default;
};

/// Either the classes of a plugin or why they could not be read.
struct PluginMetadataResult {
  std::vector<JobClassMeta> classes;  // sorted by name; non-empty, names unique if ok()
  std::optional<PluginError> error;   // set iff reading failed; then classes is empty

  bool ok() const { return !error.has_value(); }
};

/// The largest plugin file readPluginFile() reads: 1 GiB.
inline constexpr uint64_t kMaxPluginFileBytes = uint64_t{1} << 30;

/// Parses the job-class records of an ELF64 little-endian shared library for this
/// host's machine, given the whole file's bytes.
///
/// Errors (the message names no file; callers prefix "<path>: "):
///   kNotSharedLibrary  no ELF magic; an executable (also PIE), object file or core dump
///   kWrongArchitecture ELF for another machine, 32-bit or big-endian ELF
///   kNotPlugin         a shared library without a .jhmeta section
///   kCorrupt           truncated or inconsistent ELF headers, or malformed records
PluginMetadataResult readPluginMetadata(std::string_view fileBytes);

/// The bytes of a plugin file, read into a private buffer of transparent huge pages. A
/// plugin with debug info is tens of MB: read into ordinary anonymous memory, its 4 KiB
/// page faults cost ~55 ms for the 21 MB example plugin on the VMs here, about 3 ms in
/// 2 MiB pages, and every `jobhost run` and `check` reads it once (issue 33, H1). Not a
/// mapping of the file itself: a file rewritten or truncated while it is read must give
/// wrong bytes (caught by the digest or the ELF checks), never SIGBUS. Move-only.
class PluginFileBytes {
 public:
  PluginFileBytes() = default;
  PluginFileBytes(PluginFileBytes&& other) noexcept { *this = std::move(other); }
  PluginFileBytes& operator=(PluginFileBytes&& other) noexcept;
  PluginFileBytes(const PluginFileBytes&) = delete;
  PluginFileBytes& operator=(const PluginFileBytes&) = delete;
  ~PluginFileBytes() { release(); }

  std::string_view view() const { return {data_, size_}; }
  size_t size() const { return size_; }
  /// Frees the buffer; view() is empty afterwards.
  void release();

 private:
  friend bool readPluginFile(const std::string& path, PluginFileBytes* bytes, PluginError* error);
  friend bool mapSealedPluginFd(int fd, const std::string& path, PluginFileBytes* bytes, bool* sealed,
                                PluginError* error);
  void* map_ = nullptr;  // the mapping: a read file's data starts 2 MiB-aligned inside it, a mapped sealed copy's at its start
  size_t mapBytes_ = 0;
  char* data_ = nullptr;
  size_t size_ = 0;
};

/// Opens `path` for reading (O_CLOEXEC) and checks that it is a regular file of at most
/// kMaxPluginFileBytes, whose size it stores in *size. Returns the descriptor, or -1 with
/// *error set as readPluginFile() sets it. Never blocks on a FIFO.
int openPluginFile(const std::string& path, uint64_t* size, PluginError* error);

/// "<path> grew while it was read (...)": a plugin file that got longer than its size
/// when opened, while it was read.
std::string pluginGrewMessage(const std::string& path, uint64_t sizeWhenOpened);

/// Reads a whole regular file of at most kMaxPluginFileBytes into *bytes.
/// Returns true on success. On failure returns false, leaves *bytes empty and
/// sets *error: kNotFound ("no such file: <path>"), kNotSharedLibrary (a directory or
/// another non-regular file) or kLoadFailed (permission denied, I/O error, too large).
/// Never blocks on a FIFO.
bool readPluginFile(const std::string& path, PluginFileBytes* bytes, PluginError* error);

/// The bytes of `fd` in *bytes. If `fd` is sealed against writes, growth and shrinking (a
/// pinned copy, plugin_loader.h "Pinning"), they are mapped read-only, not copied: nothing
/// can change them, and only the pages the metadata lives on are touched; *sealed is then
/// true. Otherwise they are read as readPluginFile() reads a file and *sealed is false.
/// `path` names the plugin in errors. Returns false on failure, as readPluginFile().
bool mapSealedPluginFd(int fd, const std::string& path, PluginFileBytes* bytes, bool* sealed, PluginError* error);

/// readPluginFile() then readPluginMetadata(); error messages start with "<path>: "
/// unless they already name the path. If fileBytes is not null and the file could be
/// read, the file's bytes are left in *fileBytes (the loader hashes them).
PluginMetadataResult readPluginMetadataFile(const std::string& path,
                                            PluginFileBytes* fileBytes = nullptr);

/// Human name of an ELF e_machine value ("x86_64", "aarch64", ...), or "machine <n>".
std::string elfMachineName(uint16_t machine);

/// e_machine of the architecture this host was compiled for.
uint16_t hostElfMachine();

}  // namespace jobhost::host
