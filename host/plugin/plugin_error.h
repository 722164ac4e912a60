// host/plugin/plugin_error.h — why a plugin file could not be read, loaded or used.
//
// A PluginError is a plain value: a Kind for callers that branch (exit codes, tests) and
// a one-line message for the user that says what went wrong, where (the plugin path)
// and, when there is one, how to fix it. It deliberately does not depend on the state
// module's Status type so that the plugin reader can be built and fuzzed on its own.
//
// Thread-safety: a value type; distinct objects may be used from distinct threads.
#pragma once

#include <string>
#include <string_view>

namespace jobhost::host {

struct PluginError {
  enum Kind {
    kNotFound,           // the plugin file does not exist
    kNotSharedLibrary,   // not ELF at all, a directory, an executable, an object file
    kWrongArchitecture,  // ELF for another class, byte order or machine
    kNotPlugin,          // a shared library without jobhost metadata (.jhmeta)
    kCorrupt,            // truncated/malformed ELF or metadata, or metadata and code disagree
    kIncompatible,       // built against another SDK version or ABI
    kLoadFailed,         // unreadable file or dlopen() failed (e.g. a missing dependency)
    kUnknownClass,       // -c names a class the plugin does not export
    kAmbiguousClass,     // no -c and the plugin exports several classes
    kInitialiserFailed,  // a static initialiser of the plugin threw or crashed
  };

  Kind kind;
  std::string message;  // one line for the user, no trailing newline
};

/// Stable lower-case name of `kind` ("not-found", "corrupt", ...), for logs and tests.
inline std::string_view pluginErrorKindName(PluginError::Kind kind) {
  switch (kind) {
    case PluginError::kNotFound: return "not-found";
    case PluginError::kNotSharedLibrary: return "not-shared-library";
    case PluginError::kWrongArchitecture: return "wrong-architecture";
    case PluginError::kNotPlugin: return "not-plugin";
    case PluginError::kCorrupt: return "corrupt";
    case PluginError::kIncompatible: return "incompatible";
    case PluginError::kLoadFailed: return "load-failed";
    case PluginError::kUnknownClass: return "unknown-class";
    case PluginError::kAmbiguousClass: return "ambiguous-class";
    case PluginError::kInitialiserFailed: return "initialiser-failed";
  }
  return "unknown";
}

}  // namespace jobhost::host
