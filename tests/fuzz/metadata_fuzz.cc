// metadata_fuzz.cc — libFuzzer target for parseMetadata(), the `_metadata` reader.
//
// parseMetadata() reads whatever file a user passes to -s, `jobhost check`, `inspect`,
// `convert` and `checkpoints`, so it must turn any input into a CheckpointMetadata or a
// Status — never a crash, hang, out-of-bounds read or undefined behaviour. Built and run
// by tests/fuzz/run_fuzzers.sh (CMake option JOBHOST_FUZZ, clang only); seeds are real
// `_metadata` files in tests/fuzz/corpus/metadata/ (one per backend and handle type),
// plus regress-* files: inputs that once crashed, hung or broke an invariant.
//
// Beyond "no crash" the target checks what callers rely on:
//  - a refusal carries a message;
//  - every file path of an accepted snapshot is storage-relative, normalised and inside
//    the storage (no "..", not absolute), and key-group handles have one offset per key
//    group and only key groups in [0, max parallelism);
//  - what was accepted survives serializeMetadata() and parses back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>
#include <variant>

#include "jobhost/state/checkpoint_metadata.h"

namespace {

using namespace jobhost::state;

constexpr char kDir[] = "job-1/chk-7";  // where the fuzzed `_metadata` "lives" in the storage

[[noreturn]] void fail(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "metadata_fuzz invariant violated: %s %s\n", what, detail.c_str());
  std::abort();
}

void checkPath(const std::string& p) {
  if (p.empty()) fail("empty file path accepted");
  if (p.front() == '/') fail("absolute path accepted:", p);
  if (normalizePath(p) != p) fail("path not normalised:", p);
  if (p == ".." || p.rfind("../", 0) == 0 || p.find("/../") != std::string::npos) fail("path escapes the storage:", p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<CheckpointMetadata> parsed = parseMetadata(bytes, kDir, "fuzz/_metadata");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) fail("refusal without a message");
    return 0;
  }
  const CheckpointMetadata& m = *parsed;
  if (m.maxParallelism <= 0 || m.maxParallelism > 32768) fail("implausible max parallelism accepted");
  for (const FileRef& f : m.referencedFiles()) checkPath(f.path);
  for (const auto& op : m.operators) {
    for (const auto& st : op.subtasks) {
      if (const auto* kg = std::get_if<KeyGroupsStateHandle>(&st.keyed)) {
        if (static_cast<int>(kg->offsets.size()) != kg->range.size()) fail("offsets do not match the key-group range");
        if (!kg->range.empty() && kg->range.end >= m.maxParallelism) fail("key group beyond max parallelism");
        if (!kg->range.empty() && kg->range.start < 0) fail("negative key group accepted");
      } else if (const auto* inc = std::get_if<IncrementalStateHandle>(&st.keyed)) {
        if (!inc->range.empty() && inc->range.end >= m.maxParallelism) fail("key group beyond max parallelism");
        if (!inc->range.empty() && inc->range.start < 0) fail("negative key group accepted");
        for (const auto& f : inc->sharedFiles)
          if (f.localName.empty() || f.localName.find('/') != std::string::npos) fail("bad local name accepted");
      }
    }
  }
  // Round trip: what we accept we can write, and what we write we read back identically.
  // (Only for snapshots whose body agrees with the header's format version: a body that
  // claims another version is written back under that version.)
  if (m.formatVersion == (m.hasChannelState() ? kMetadataFormatVersion : kMetadataFormatVersionWithoutChannelState)) {
    Result<std::string> again = serializeMetadata(m, kDir);
    if (!again.ok()) fail("cannot re-serialize an accepted snapshot:", again.status().message());
    Result<CheckpointMetadata> reparsed = parseMetadata(*again, kDir, "fuzz/_metadata (rewritten)");
    if (!reparsed.ok()) fail("cannot re-read a re-serialized snapshot:", reparsed.status().message());
    Result<std::string> third = serializeMetadata(*reparsed, kDir);
    if (!third.ok() || *third != *again) fail("serialize/parse round trip is not stable");
  }
  return 0;
}
