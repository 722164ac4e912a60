// host/plugin/plugin_loader.h — opens a plugin shared library and selects a job class.
//
// PluginLibrary::open() does, in this order, and stops at the first problem:
//   1. reads the whole file and its .jhmeta records (elf_metadata.h) — no plugin code
//      runs, so a file that is not a plugin, is for another machine or is corrupt is
//      reported without dlopen();
//   2. checks every record's SDK version and ABI tag against this host's
//      (checkPluginCompatibility()) — still before any plugin code runs;
//   3. dlopen()s it with RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE through Boost.DLL, so a
//      missing dependency or undefined symbol fails here rather than in the middle of
//      a job.
//
// Pinning (PluginOpenOptions::pin, used by the supervisor of `jobhost run`): the kernel
// copies the file once into a sealed memfd (memfd_create, sendfile, F_SEAL_WRITE |
// F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), step 1 checks that copy's mapped bytes, and
// the library is loaded from it through /proc/self/fd/<n>. A copy rather than the plugin file's own descriptor: `cp`
// or `install` over the plugin rewrites the same inode, which an open descriptor would
// see. The digest is of exactly those bytes, and every worker of the job inherits the
// memfd (PluginOpenOptions::fd, with the digest in PluginOpenOptions::sealedDigest: a
// worker maps the sealed bytes rather than reading and hashing them again) and loads the
// same bytes, so a plugin rebuilt on disk affects only jobs started afterwards. (Each
// worker is a fresh process, so dlopen()'s "same path, same handle" rule never hands an
// attempt an older mapping either.)
//
// Static initialisers (PluginOpenOptions::probeInitialisers): they run inside
// dlopen(), where an exception — std::exception or not — always ends in std::terminate.
// The probe dlopen()s the library in a forked child first; if an initialiser throws (the
// child's terminate handler reports what) or crashes, open() fails with
// kInitialiserFailed and the calling process never runs them. Initialisers therefore
// run twice when the probe passes (child, then caller): keep them free of side effects.
// A command that loads the plugin before anything else starts, and so would only report
// such a failure and exit (`jobhost run`, `check`), fences them in its own process
// instead (PluginOpenOptions::exitOnInitialiserFailure): one load. `info` and `state` use
// the probe: `info` goes on to list the declared classes after the error.
// selectClass() then resolves the class named by `-c` through its Boost.DLL alias
// `jhjob_<Class>`, checking the descriptor's magic and ABI tag before any other field.
//
// Lifetime: the host keeps a plugin loaded for the whole process lifetime. The library
// is opened with RTLD_NODELETE, so it stays mapped even after its PluginLibrary is
// destroyed: objects, vtables, function pointers, exceptions, std::functions,
// thread_locals and threads that came from plugin code can never point into unmapped
// memory (unloading such plugins is unsafe in general; boostorg/dll#68). The contract
// is still the narrower one: use descriptors from selectClass() and objects they
// create only while the PluginLibrary lives, so that a future host may unload.
//
// Thread-safety: a PluginLibrary is immutable after open(); its const methods may be
// called concurrently.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/plugin/elf_metadata.h"
#include "host/plugin/plugin_error.h"
#include "jobhost/job.h"
#include "jobhost/version.h"

namespace boost::dll {
class shared_library;
}  // namespace boost::dll

namespace jobhost::host {

/// Checks that plugin records were built for this host: each record's abiTag must equal
/// hostAbiTag exactly, and its sdkVersion must have the same major and minor version as
/// hostSdkVersion (the patch level may differ). Returns nullopt if all records pass,
/// else kIncompatible naming both sides and the fix, for the first record that fails.
/// `path` is only used in the message.
std::optional<PluginError> checkPluginCompatibility(
    const std::string& path, const std::vector<JobClassMeta>& classes,
    std::string_view hostSdkVersion = JOBHOST_SDK_VERSION,
    std::string_view hostAbiTag = JOBHOST_ABI_TAG);

/// XXH3-64 (libxxhash) of `bytes` as 16 lower-case hex digits. Identifies a plugin build in
/// logs and checkpoints; it is not a cryptographic hash. (Was FNV-1a, a byte at a time:
/// 30 ms of every start for a 21 MB plugin with debug info; XXH3 takes about 2. Snapshots
/// written before the change hold the FNV-1a digest of a plugin built for an older ABI,
/// which this host does not load, so the two never need comparing.)
std::string pluginDigestHex(std::string_view bytes);

struct PluginOpenOptions {
  /// Load a private sealed copy of the file's bytes (see "Pinning" above).
  bool pin = false;
  /// Load the bytes of this descriptor (a pinned copy inherited from the supervisor)
  /// instead of reading `path`; `path` then only names the plugin in messages.
  int fd = -1;
  /// With fd: the digest of its bytes, as the process that pinned them computed it
  /// (contentDigest()). If fd is sealed against writes, growth and shrinking (a pinned
  /// copy is), its bytes are mapped rather than read and not hashed again: about 8 ms of
  /// every worker's start with the 16 MB example plugin. An fd without those seals is read
  /// and hashed as ever, and this is ignored.
  std::string sealedDigest;
  /// Run the static initialisers in a child process first (see "Static initialisers").
  /// On by default: every command that loads a plugin (run, check, info, state) then
  /// reports a throwing initialiser instead of dying in std::terminate. A worker turns it
  /// off: the supervisor ran the same bytes' initialisers, and a worker's crash is a task
  /// failure.
  bool probeInitialisers = true;
  /// With probeInitialisers: instead of a probe child, run the initialisers in this
  /// process, fenced: if one throws or crashes (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
  /// SIGABRT; the handlers run on an alternate signal stack, so a stack overflow too),
  /// print "error: <the kInitialiserFailed message>" on stderr and _exit() with this
  /// code. For a command that would do exactly that with the error (`jobhost run`,
  /// `check`, `run --dry-run`): it saves loading the plugin and its dependencies twice,
  /// about a third of a check with the example plugin (issue 33, H1), and runs the
  /// initialisers once. 0 (default): the probe child, and open() returns the error.
  int exitOnInitialiserFailure = 0;
};

class PluginLibrary {
 public:
  /// Opens the plugin at `path` (absolute, or relative to the working directory; a bare
  /// file name means ./name, never a library search path). On success returns the
  /// loaded library. On failure returns nullptr and sets *error to one of kNotFound,
  /// kNotSharedLibrary, kWrongArchitecture, kNotPlugin, kCorrupt, kIncompatible (all
  /// without running plugin code) or kLoadFailed (unreadable file, dlopen() failed).
  /// Running a plugin's static constructors is part of a successful open.
  /// kInitialiserFailed: a static initialiser threw or crashed (options.probeInitialisers).
  static std::unique_ptr<PluginLibrary> open(const std::string& path, PluginError* error,
                                             const PluginOpenOptions& options = {});

  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  /// Releases the handle; the code stays mapped until exit (see "Lifetime" above).
  ~PluginLibrary();

  /// The path as given to open().
  const std::string& path() const { return path_; }

  /// The classes declared in the plugin's metadata, sorted by name; never empty.
  const std::vector<JobClassMeta>& classes() const { return classes_; }

  /// pluginDigestHex() of the plugin file's bytes as read by open(), computed once.
  const std::string& contentDigest() const { return contentDigest_; }

  /// The sealed copy the library was loaded from (pin or fd), else -1. Close-on-exec;
  /// a worker that should load the same bytes gets a dup of it without FD_CLOEXEC.
  int pinnedFd() const { return pinnedFd_; }

  /// Resolves the job class to run. With a name, that class (exact, case-sensitive
  /// match); without one, the plugin's only class. Returns a descriptor owned by the
  /// library (valid while *this lives) whose magic and abiTag have been checked and
  /// whose name and create are non-null. On failure returns nullptr and sets *error:
  /// kUnknownClass (with a "did you mean" suggestion and the available classes),
  /// kAmbiguousClass (no name, several classes), kIncompatible or kCorrupt (the
  /// exported descriptor disagrees with the metadata).
  const jobhost::JobClassInfo* selectClass(const std::optional<std::string>& name,
                                           PluginError* error) const;

 private:
  PluginLibrary(std::string path, std::vector<JobClassMeta> classes, std::string digest,
                std::unique_ptr<boost::dll::shared_library> library, int pinnedFd);

  const jobhost::JobClassInfo* resolve(const std::string& name, PluginError* error) const;

  const std::string path_;
  const std::vector<JobClassMeta> classes_;
  const std::string contentDigest_;
  const std::unique_ptr<boost::dll::shared_library> library_;  // never null
  const int pinnedFd_;                                          // owned; -1 if none
};

}  // namespace jobhost::host
