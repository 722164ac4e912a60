// host/plugin/plugin_loader.cc — see plugin_loader.h.
#include "host/plugin/plugin_loader.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

#include <boost/dll/shared_library.hpp>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>
#include <spdlog/spdlog.h>

#include "host/plugin/did_you_mean.h"
#include "jobhost/errors.h"

namespace jobhost::host {
namespace {

constexpr std::string_view kAliasPrefix = "jhjob_";

struct Version {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned patch = 0;
};

// Parses "M.m.p" (decimal, each part at most 6 digits). Returns nullopt otherwise.
std::optional<Version> parseVersion(std::string_view s) {
  unsigned parts[3] = {0, 0, 0};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    size_t digits = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && digits < 6) {
      parts[i] = parts[i] * 10 + static_cast<unsigned>(s[pos] - '0');
      ++pos;
      ++digits;
    }
    if (digits == 0) return std::nullopt;
    if (i < 2) {
      if (pos >= s.size() || s[pos] != '.') return std::nullopt;
      ++pos;
    }
  }
  if (pos != s.size()) return std::nullopt;
  return Version{parts[0], parts[1], parts[2]};
}

// dlerror() text usually starts with the path given to dlopen(); our messages already
// name the plugin, so drop that prefix ("./libfoo.so: libbar.so.1: cannot open ...").
std::string withoutPathPrefix(std::string text, const std::string& path) {
  for (const std::string& prefix : {path + ": ", "./" + path + ": "}) {
    if (text.compare(0, prefix.size(), prefix) == 0) return text.substr(prefix.size());
  }
  return text;
}

std::string loadHint(const std::string& reason) {
  if (reason.find("cannot open shared object file") != std::string::npos) {
    return "; install the missing library or add its directory to LD_LIBRARY_PATH";
  }
  if (reason.find("undefined symbol") != std::string::npos) {
    return "; neither the plugin nor its libraries define that symbol: rebuild the plugin "
           "against the installed jobhost SDK and libraries (link it with -Wl,-z,defs to "
           "catch this at build time)";
  }
  if (reason.find("position-independent executable") != std::string::npos) {
    return "; build the job classes as a shared library (CMake: add_library(<name> MODULE))";
  }
  return "";
}

std::string fdPath(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

/// A new memfd for a private copy of a plugin; -1 and *why on failure.
int createPluginMemfd(std::string* why) {
  int fd = ::memfd_create("jobhost-plugin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) *why = std::string("memfd_create: ") + std::strerror(errno);
  return fd;
}

/// Seals a private copy once it is complete.
void sealPluginCopy(int fd, const std::string& path) {
  // Sealing is defence in depth: only this process and its workers hold the copy. The
  // kernel refuses F_SEAL_WRITE with EBUSY while it still sees transient references to
  // the pages (seen under load in CI), so retry briefly, then keep the unsealed copy.
  for (int attempt = 0;; ++attempt) {
    if (::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) == 0) break;
    if (errno != EBUSY || attempt == 50) {
      spdlog::debug("plugin {}: private copy left unsealed: {}", path, std::strerror(errno));
      break;
    }
    ::usleep(2000);
  }
}

/// A sealed in-memory copy of `bytes` (see "Pinning" in the header); -1 and *why on
/// failure.
int makeSealedCopy(const std::string& path, std::string_view bytes, std::string* why) {
  int fd = createPluginMemfd(why);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = std::string("writing the private copy of ") + path + ": " + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  sealPluginCopy(fd, path);
  return fd;
}

enum class PinOutcome { kPinned, kFailed, kKernelCopyUnsupported };

/// The pinned copy made straight from the file (see "Pinning" in the header): the kernel
/// copies the file's pages into a new memfd (sendfile(): one copy, and no buffer of ours
/// to fault in and zero), which is sealed and then mapped into *bytes for the metadata
/// checks and the digest, so the bytes checked and hashed are the bytes loaded. Reading
/// the 17 MB example plugin into a buffer and writing that into the memfd was about a
/// fifth of a short `jobhost run`'s CPU time. kPinned with *pinnedFd set; kFailed with
/// *error set (the file cannot be read, or grew while it was copied);
/// kKernelCopyUnsupported when sendfile() cannot read this file (some file systems
/// cannot splice): the caller reads it and copies as before.
PinOutcome pinPluginFile(const std::string& path, PluginFileBytes* bytes, int* pinnedFd, PluginError* error) {
  uint64_t size = 0;
  const int file = openPluginFile(path, &size, error);
  if (file < 0) return PinOutcome::kFailed;
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{file};
  std::string why;
  const int copy = createPluginMemfd(&why);
  if (copy < 0) {
    *error = PluginError{PluginError::kLoadFailed, "cannot load " + path + ": " + why};
    return PinOutcome::kFailed;
  }
  auto fail = [&](std::string message) {
    ::close(copy);
    *error = PluginError{PluginError::kLoadFailed, std::move(message)};
    return PinOutcome::kFailed;
  };
  // Ask for one byte more than fstat() saw, to see that the file grew meanwhile.
  const uint64_t capacity = size + 1;
  uint64_t copied = 0;
  while (true) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(capacity - copied, uint64_t{1} << 30));
    const ssize_t n = ::sendfile(copy, file, nullptr, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (copied == 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        ::close(copy);
        return PinOutcome::kKernelCopyUnsupported;
      }
      return fail("cannot read " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    copied += static_cast<uint64_t>(n);
    if (copied == capacity) return fail(pluginGrewMessage(path, size));
  }
  sealPluginCopy(copy, path);
  bool sealed = false;  // if sealing failed, the copy is read instead of mapped: same bytes
  if (!mapSealedPluginFd(copy, path, bytes, &sealed, error)) {
    ::close(copy);
    return PinOutcome::kFailed;
  }
  *pinnedFd = copy;
  return PinOutcome::kPinned;
}

// The probe child's report pipe; written by its terminate handler.
int gProbeReportFd = -1;

/// In a terminate handler: what was thrown ("int 42, not a std::exception", a what()).
std::string describeTerminatingException() {
  std::string what = "an exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (...) {
      what = jobhost::describeCurrentException();
    }
  }
  return what;
}

[[noreturn]] void reportProbeTermination() {
  std::string what = describeTerminatingException();
  ssize_t n = ::write(gProbeReportFd, what.data(), what.size());
  (void)n;
  ::_exit(1);
}

/// Runs the static initialisers of `loadPath` in a forked child (see "Static
/// initialisers" in the header). nullopt if they completed (or dlopen() failed for
/// another reason, which the real load reports), else what went wrong.
std::optional<std::string> probeInitialisers(const std::string& loadPath) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return std::nullopt;  // cannot probe: load as before
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(report[0]);
    ::close(report[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    ::close(report[0]);
    gProbeReportFd = report[1];
    std::set_terminate(reportProbeTermination);
    void* handle = ::dlopen(loadPath.c_str(), RTLD_NOW | RTLD_LOCAL);
    ::_exit(handle != nullptr ? 0 : 3);
  }
  ::close(report[1]);
  std::string what;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(report[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    what.append(buf, static_cast<size_t>(n));
  }
  ::close(report[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 1 && !what.empty()) return "threw " + what;
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return std::string("crashed with ") + (name != nullptr ? std::string("SIG") + name : "a signal");
  }
  return std::nullopt;
}

// The in-process fence (PluginOpenOptions::exitOnInitialiserFailure): the message's
// parts, set before dlopen() and read by the handlers below, which run inside dlopen()
// (the terminate handler) or in a signal handler (write() and _exit() only).
std::string gFencePrefix;  // "error: plugin … a static initialiser (…) "
std::string gFenceSuffix;  // " while the plugin was loaded; …\n"
int gFenceExitCode = 2;

void writeAll(const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

[[noreturn]] void fenceTermination() {
  std::string message = gFencePrefix + "threw " + describeTerminatingException() + gFenceSuffix;
  writeAll(message.data(), message.size());
  ::_exit(gFenceExitCode);
}

void fenceSignal(int sig) {
  static constexpr char kCrashed[] = "crashed with SIG";
  writeAll(gFencePrefix.data(), gFencePrefix.size());
  writeAll(kCrashed, sizeof kCrashed - 1);
  const char* name = sigabbrev_np(sig);
  writeAll(name != nullptr ? name : "NAL", name != nullptr ? std::strlen(name) : 3);
  writeAll(gFenceSuffix.data(), gFenceSuffix.size());
  ::_exit(gFenceExitCode);
}

/// Installs the fence for the lifetime of this object (one dlopen()).
class InitialiserFence {
 public:
  static constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

  InitialiserFence(std::string prefix, std::string suffix, int exitCode) {
    gFencePrefix = std::move(prefix);
    gFenceSuffix = std::move(suffix);
    gFenceExitCode = exitCode;
    // The handlers run on a stack of their own: an initialiser that overflows the
    // thread's stack (endless recursion) is reported too, not a bare SIGSEGV.
    const long minimum = ::sysconf(_SC_SIGSTKSZ);
    const size_t altStackSize = std::max<size_t>(64 * 1024, minimum > 0 ? static_cast<size_t>(minimum) : 0);
    altStack_ = std::make_unique<char[]>(altStackSize);
    stack_t ss{};
    ss.ss_sp = altStack_.get();
    ss.ss_size = altStackSize;
    ownStack_ = ::sigaltstack(&ss, &oldStack_) == 0;
    struct sigaction sa {};
    sa.sa_handler = fenceSignal;
    sa.sa_flags = ownStack_ ? SA_ONSTACK : 0;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
    oldTerminate_ = std::set_terminate(fenceTermination);
  }
  /// Puts back what was there before, where the fence is still in place: a handler the
  /// plugin or its libraries installed while they loaded stays.
  ~InitialiserFence() {
    if (std::get_terminate() == fenceTermination) std::set_terminate(oldTerminate_);
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      struct sigaction now {};
      if (::sigaction(kSignals[i], nullptr, &now) == 0 && now.sa_handler == fenceSignal)
        ::sigaction(kSignals[i], &old_[i], nullptr);
    }
    // The thread's alternate stack as it was, if ours is still the one in place (the
    // memory is freed with this object).
    stack_t now{};
    if (ownStack_ && ::sigaltstack(nullptr, &now) == 0 && now.ss_sp == altStack_.get()) {
      if ((oldStack_.ss_flags & SS_DISABLE) != 0) {
        stack_t off{};
        off.ss_flags = SS_DISABLE;
        ::sigaltstack(&off, nullptr);
      } else {
        ::sigaltstack(&oldStack_, nullptr);
      }
    }
  }
  InitialiserFence(const InitialiserFence&) = delete;
  InitialiserFence& operator=(const InitialiserFence&) = delete;

 private:
  struct sigaction old_[std::size(kSignals)] {};
  std::terminate_handler oldTerminate_ = nullptr;
  std::unique_ptr<char[]> altStack_;
  stack_t oldStack_{};
  bool ownStack_ = false;
};

}  // namespace

std::optional<PluginError> checkPluginCompatibility(const std::string& path,
                                                    const std::vector<JobClassMeta>& classes,
                                                    std::string_view hostSdkVersion,
                                                    std::string_view hostAbiTag) {
  const std::optional<Version> host = parseVersion(hostSdkVersion);
  for (const JobClassMeta& meta : classes) {
    const std::optional<Version> plugin = parseVersion(meta.sdkVersion);
    const bool compatible = meta.abiTag == hostAbiTag && plugin && host &&
                            plugin->major == host->major && plugin->minor == host->minor;
    if (compatible) continue;
    return PluginError{
        PluginError::kIncompatible,
        "plugin " + path + " was built with SDK " + meta.sdkVersion + " (ABI " + meta.abiTag +
            "), this jobhost has SDK " + std::string(hostSdkVersion) + " (ABI " +
            std::string(hostAbiTag) +
            "): rebuild the plugin against the installed jobhost SDK"};
  }
  return std::nullopt;
}

std::string pluginDigestHex(std::string_view bytes) {
  uint64_t hash = XXH3_64bits(bytes.data(), bytes.size());
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[hash & 0xf];
    hash >>= 4;
  }
  return out;
}

std::unique_ptr<PluginLibrary> PluginLibrary::open(const std::string& path, PluginError* error,
                                                   const PluginOpenOptions& options) {
  // 1 and 2: static checks, no plugin code runs.
  PluginFileBytes bytes;
  PluginMetadataResult metadata;
  bool sealed = false;  // options.fd is a sealed copy whose digest options.sealedDigest is
  int pinnedFd = -1;    // our own pinned copy, made from the file (pinPluginFile)
  auto closePinned = [&] {
    if (pinnedFd >= 0) ::close(pinnedFd);
    pinnedFd = -1;
  };
  if (options.fd >= 0) {
    if (!options.sealedDigest.empty()) {
      if (!mapSealedPluginFd(options.fd, path, &bytes, &sealed, error)) return nullptr;
    } else if (!readPluginFile(fdPath(options.fd), &bytes, error)) {
      return nullptr;
    }
    metadata = readPluginMetadata(bytes.view());
    if (metadata.error) metadata.error->message = path + ": " + metadata.error->message;
  } else if (options.pin) {
    switch (pinPluginFile(path, &bytes, &pinnedFd, error)) {
      case PinOutcome::kFailed:
        return nullptr;
      case PinOutcome::kPinned:
        metadata = readPluginMetadata(bytes.view());
        if (metadata.error) metadata.error->message = path + ": " + metadata.error->message;
        break;
      case PinOutcome::kKernelCopyUnsupported:
        metadata = readPluginMetadataFile(path, &bytes);  // copied below
        break;
    }
  } else {
    metadata = readPluginMetadataFile(path, &bytes);
  }
  if (!metadata.ok()) {
    closePinned();
    *error = std::move(*metadata.error);
    return nullptr;
  }
  if (auto incompatible = checkPluginCompatibility(path, metadata.classes)) {
    closePinned();
    *error = std::move(*incompatible);
    return nullptr;
  }
  std::string digest = sealed ? options.sealedDigest : pluginDigestHex(bytes.view());
  if (options.fd >= 0) {
    pinnedFd = options.fd;
    ::fcntl(pinnedFd, F_SETFD, FD_CLOEXEC);  // ours now; a later worker gets its own dup
  } else if (options.pin && pinnedFd < 0) {
    std::string why;
    pinnedFd = makeSealedCopy(path, bytes.view(), &why);
    if (pinnedFd < 0) {
      *error = PluginError{PluginError::kLoadFailed, "cannot load " + path + ": " + why};
      return nullptr;
    }
  }
  bytes.release();  // may be large; not needed any more
  const std::string loadPath = pinnedFd >= 0 ? fdPath(pinnedFd) : path;
  auto fail = [&](PluginError e) {
    if (pinnedFd >= 0) ::close(pinnedFd);
    *error = std::move(e);
    return nullptr;
  };

  std::vector<std::string> classNames;
  for (const JobClassMeta& meta : metadata.classes) classNames.push_back(meta.name);
  const std::string initialiserFailed = "plugin " + path + " (classes " + joinNames(classNames) +
                                        "): a static initialiser (a global or static object's constructor) ";
  const std::string initialiserFailedEnd =
      " while the plugin was loaded; no job ran — fix the plugin's global objects";
  std::optional<InitialiserFence> fence;
  if (options.probeInitialisers && options.exitOnInitialiserFailure != 0) {
    fence.emplace("error: " + initialiserFailed, initialiserFailedEnd + "\n", options.exitOnInitialiserFailure);
  } else if (options.probeInitialisers) {
    if (std::optional<std::string> failed = probeInitialisers(loadPath)) {
      return fail(PluginError{PluginError::kInitialiserFailed, initialiserFailed + *failed + initialiserFailedEnd});
    }
  }

  // 3: dlopen. The error_code overload leaves dlerror() set for us; the try block only
  // guards against allocation and filesystem exceptions from Boost's path handling.
  auto library = std::make_unique<boost::dll::shared_library>();
  std::string reason;
  try {
    boost::dll::fs::error_code ec;
    // RTLD_NODELETE (passed through Boost, which hands the mode to dlopen() as is):
    // dlclose() never unmaps the plugin; see "Lifetime" in the header.
    const auto mode = boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local |
                      static_cast<boost::dll::load_mode::type>(RTLD_NODELETE);
    library->load(boost::dll::fs::path(loadPath), mode, ec);
    if (ec || !library->is_loaded()) {
      const char* dl = ::dlerror();
      reason = dl != nullptr ? withoutPathPrefix(dl, loadPath) : ec.message();
      if (reason.empty()) reason = "dlopen() failed";
    }
  } catch (...) {
    // An exception thrown by a static initialiser can unwind out of dlopen() when a
    // handler waits above it (it does here): with the fence, it is the initialiser's and
    // reported as such (Boost's path handling throws nothing else but bad_alloc). Without,
    // the probe child ran the same initialisers without one.
    if (fence) fenceTermination();
    reason = jobhost::describeCurrentException();
  }
  fence.reset();  // the initialisers have run: from here on a crash is not theirs
  if (!reason.empty())
    return fail(PluginError{PluginError::kLoadFailed, "cannot load " + path + ": " + reason + loadHint(reason)});
  return std::unique_ptr<PluginLibrary>(new PluginLibrary(
      path, std::move(metadata.classes), std::move(digest), std::move(library), pinnedFd));
}

PluginLibrary::PluginLibrary(std::string path, std::vector<JobClassMeta> classes,
                             std::string digest,
                             std::unique_ptr<boost::dll::shared_library> library, int pinnedFd)
    : path_(std::move(path)),
      classes_(std::move(classes)),
      contentDigest_(std::move(digest)),
      library_(std::move(library)),
      pinnedFd_(pinnedFd) {}

PluginLibrary::~PluginLibrary() {
  if (pinnedFd_ >= 0) ::close(pinnedFd_);
}

const jobhost::JobClassInfo* PluginLibrary::selectClass(const std::optional<std::string>& name,
                                                        PluginError* error) const {
  std::vector<std::string> names;
  names.reserve(classes_.size());
  for (const JobClassMeta& meta : classes_) names.push_back(meta.name);

  if (!name) {
    if (classes_.size() == 1) return resolve(classes_.front().name, error);
    *error = PluginError{PluginError::kAmbiguousClass,
                         path_ + " contains " + std::to_string(classes_.size()) +
                             " job classes (" + joinNames(names) +
                             "); choose one with -c <Class>"};
    return nullptr;
  }
  for (const JobClassMeta& meta : classes_) {
    if (meta.name == *name) return resolve(meta.name, error);
  }
  std::string message = "job class '" + *name + "' not found in " + path_;
  if (std::optional<std::string> guess = closestCandidate(*name, names)) {
    message += "; did you mean '" + *guess + "'? Available: ";
  } else {
    message += "; available: ";
  }
  message += joinNames(names);
  *error = PluginError{PluginError::kUnknownClass, std::move(message)};
  return nullptr;
}

const jobhost::JobClassInfo* PluginLibrary::resolve(const std::string& name,
                                                    PluginError* error) const {
  const std::string alias = std::string(kAliasPrefix) + name;
  auto corrupt = [&](const std::string& what) {
    *error = PluginError{PluginError::kCorrupt,
                         "plugin " + path_ + ": job class '" + name + "' " + what +
                             "; rebuild the plugin"};
    return nullptr;
  };
  if (!library_->has(alias)) {
    return corrupt("is listed in the .jhmeta metadata but the library does not export " +
                   alias);
  }
  // get<const T*>(alias) is what get_alias<const T>() dereferences unchecked; taking the
  // pointer lets us reject a null alias instead of forming a null reference.
  const jobhost::JobClassInfo* info = nullptr;
  try {
    info = library_->get<const jobhost::JobClassInfo*>(alias);
  } catch (const std::exception& e) {
    return corrupt("cannot be resolved (" + alias + "): " + e.what());
  }
  if (info == nullptr) return corrupt("has a null descriptor (" + alias + ")");

  // Magic first, then the ABI tag; only then may the other fields be trusted.
  if (info->magic != jobhost::kJobClassInfoMagic) {
    *error = PluginError{PluginError::kIncompatible,
                         "plugin " + path_ + ": the descriptor of job class '" + name +
                             "' has an unknown format (bad magic number): it was built with "
                             "an incompatible jobhost SDK; rebuild the plugin against the "
                             "installed jobhost SDK"};
    return nullptr;
  }
  if (info->abiTag == nullptr || std::strcmp(info->abiTag, JOBHOST_ABI_TAG) != 0) {
    *error = PluginError{
        PluginError::kIncompatible,
        "plugin " + path_ + ": job class '" + name + "' was built with ABI " +
            (info->abiTag != nullptr ? std::string(info->abiTag) : std::string("(none)")) +
            ", this jobhost has ABI " JOBHOST_ABI_TAG
            ": rebuild the plugin against the installed jobhost SDK"};
    return nullptr;
  }
  if (info->name == nullptr || name != info->name) {
    return corrupt("exports a descriptor named '" +
                   std::string(info->name != nullptr ? info->name : "(null)") + "'");
  }
  if (info->create == nullptr) return corrupt("has no factory function");
  return info;
}

}  // namespace jobhost::host
