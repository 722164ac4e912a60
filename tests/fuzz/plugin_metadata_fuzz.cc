// plugin_metadata_fuzz.cc — libFuzzer target for readPluginMetadata().
//
// readPluginMetadata() parses untrusted plugin files (any path a user passes to
// `jobhost info` or `jobhost run`), so it must not crash, hang or read out of bounds on
// any input. Build and run (clang):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. -Isdk/include
//       host/plugin/elf_metadata.cc tests/fuzz/plugin_metadata_fuzz.cc -o plugin_metadata_fuzz
//   mkdir -p /tmp/pm_corpus   # libFuzzer adds new inputs to the FIRST directory
//   ./plugin_metadata_fuzz -max_total_time=60 /tmp/pm_corpus tests/fuzz/corpus/plugin_metadata
// The seeds are minimal crafted ELF64 files with a .jhmeta section (one class; two
// classes with padding and a .dynamic section; extended section numbering). A real
// plugin (e.g. the test fixture libjhtest_jobs.so) makes a good extra seed directory;
// pass -max_len=200000 for it. Beyond "no crash", the target checks the result's
// invariants.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "host/plugin/elf_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using jobhost::host::PluginMetadataResult;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const PluginMetadataResult result = jobhost::host::readPluginMetadata(bytes);
  if (result.ok()) {
    // Success means at least one class, unique non-empty names.
    if (result.classes.empty()) std::abort();
    std::set<std::string_view> names;
    for (const auto& c : result.classes) {
      if (c.name.empty() || !names.insert(c.name).second) std::abort();
    }
  } else {
    // Failure means a message and no classes.
    if (result.error->message.empty() || !result.classes.empty()) std::abort();
  }
  return 0;
}
