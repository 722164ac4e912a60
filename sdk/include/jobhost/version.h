// jobhost/version.h — SDK version and the ABI tag recorded in every plugin.
//
// A plugin and the host exchange C++ objects (std::string, std::function, virtual
// interfaces), so they must agree on the compiler family and major version, the C++
// standard library and its ABI flavour, and the SDK major version. The tag below is
// compiled into both sides; the host refuses a plugin whose tag differs before running
// any of its code.
#pragma once

// The SDK is C++20 (std::endian, concepts, designated initialisers). Stop a build with
// another standard here, with one line that says so, instead of deep inside a header;
// the missing include below is a fatal error, so nothing else is reported after it.
#if !defined(__cplusplus) || __cplusplus < 202002L
#error "the jobhost SDK needs C++20: compile with -std=c++20 (CMake: target_compile_features(<target> PRIVATE cxx_std_20))"
#include <jobhost/compilation-stops-here-see-the-error-above>
#endif

#define JOBHOST_SDK_VERSION_MAJOR 1
#define JOBHOST_SDK_VERSION_MINOR 0
#define JOBHOST_SDK_VERSION_PATCH 0

#define JOBHOST_STR_(x) #x
#define JOBHOST_STR(x) JOBHOST_STR_(x)

#define JOBHOST_SDK_VERSION                                                   \
  JOBHOST_STR(JOBHOST_SDK_VERSION_MAJOR) "." JOBHOST_STR(JOBHOST_SDK_VERSION_MINOR) \
  "." JOBHOST_STR(JOBHOST_SDK_VERSION_PATCH)

#if defined(__clang__)
#define JOBHOST_ABI_COMPILER "clang" JOBHOST_STR(__clang_major__)
#elif defined(__GNUC__)
#define JOBHOST_ABI_COMPILER "gcc" JOBHOST_STR(__GNUC__)
#else
#define JOBHOST_ABI_COMPILER "unknown"
#endif

#if defined(_LIBCPP_VERSION)
#define JOBHOST_ABI_STDLIB "libc++" JOBHOST_STR(_LIBCPP_VERSION)
#else
// libstdc++'s ABI is stable across a major GCC version; the dual ABI flag decides
// std::string's layout.
#include <cstddef>
#define JOBHOST_ABI_STDLIB "libstdc++-cxx11abi" JOBHOST_STR(_GLIBCXX_USE_CXX11_ABI)
#endif

// Example: "sdk1.r2;gcc12;libstdc++-cxx11abi1;x86_64"
#if defined(__x86_64__)
#define JOBHOST_ABI_ARCH "x86_64"
#elif defined(__aarch64__)
#define JOBHOST_ABI_ARCH "aarch64"
#else
#define JOBHOST_ABI_ARCH "other"
#endif

// Bump whenever the layout of anything crossing the boundary changes (a virtual added to
// an SDK interface, a field of JobClassInfo, ...), even within one SDK version, so that a
// host refuses plugins built against other headers instead of crashing in them.
#define JOBHOST_ABI_REVISION 11

#define JOBHOST_ABI_TAG                                                                  \
  "sdk" JOBHOST_STR(JOBHOST_SDK_VERSION_MAJOR) ".r" JOBHOST_STR(JOBHOST_ABI_REVISION) ";" \
      JOBHOST_ABI_COMPILER ";" JOBHOST_ABI_STDLIB ";" JOBHOST_ABI_ARCH

// Symbols that cross the plugin boundary by type (exceptions, interfaces) stay visible
// even when a plugin is compiled with -fvisibility=hidden.
#define JOBHOST_API __attribute__((visibility("default")))
