// host/plugin/plugin_loader.cc — see plugin_loader.h.
#include "host/plugin/plugin_loader.h"

#include <dlfcn.h>

#include <cstring>
#include <exception>
#include <utility>

#include <boost/dll/shared_library.hpp>

#include "host/plugin/did_you_mean.h"

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

std::string fnv1a64Hex(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[hash & 0xf];
    hash >>= 4;
  }
  return out;
}

std::unique_ptr<PluginLibrary> PluginLibrary::open(const std::string& path, PluginError* error) {
  // 1 and 2: static checks, no plugin code runs.
  std::string bytes;
  PluginMetadataResult metadata = readPluginMetadataFile(path, &bytes);
  if (!metadata.ok()) {
    *error = std::move(*metadata.error);
    return nullptr;
  }
  if (auto incompatible = checkPluginCompatibility(path, metadata.classes)) {
    *error = std::move(*incompatible);
    return nullptr;
  }
  std::string digest = fnv1a64Hex(bytes);
  bytes = std::string();  // may be large; not needed any more

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
    library->load(boost::dll::fs::path(path), mode, ec);
    if (ec || !library->is_loaded()) {
      const char* dl = ::dlerror();
      reason = dl != nullptr ? withoutPathPrefix(dl, path) : ec.message();
      if (reason.empty()) reason = "dlopen() failed";
    }
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (!reason.empty()) {
    *error = PluginError{PluginError::kLoadFailed,
                         "cannot load " + path + ": " + reason + loadHint(reason)};
    return nullptr;
  }
  return std::unique_ptr<PluginLibrary>(new PluginLibrary(
      path, std::move(metadata.classes), std::move(digest), std::move(library)));
}

PluginLibrary::PluginLibrary(std::string path, std::vector<JobClassMeta> classes,
                             std::string digest,
                             std::unique_ptr<boost::dll::shared_library> library)
    : path_(std::move(path)),
      classes_(std::move(classes)),
      contentDigest_(std::move(digest)),
      library_(std::move(library)) {}

PluginLibrary::~PluginLibrary() = default;

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
