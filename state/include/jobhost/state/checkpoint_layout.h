// jobhost/state/checkpoint_layout.h — the names inside a job's checkpoint directory.
//
//   <state.checkpoints.dir>/<jobId>/
//     chk-<n>/_metadata        checkpoint n exists only once this file is published
//     chk-<n>/...              files owned by checkpoint n
//     shared/...               files several checkpoints may reference (rocksdb SSTs)
//     taskowned/               reserved, as Flink
//     .lock                    held (flock) by the job writing the directory
//
// The one parser of `chk-<n>` names: every component that lists checkpoints uses it; and
// the one test of whether a local directory is laid out as a job's checkpoint directory.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace jobhost::state {

inline constexpr char kSharedDirName[] = "shared";
inline constexpr char kTaskOwnedDirName[] = "taskowned";
/// The file whose presence makes a directory a snapshot (written last, durably).
inline constexpr char kMetadataFileName[] = "_metadata";
/// The job-directory lock file (see host/checkpoint/job_directory_lock.h).
inline constexpr char kLockFileName[] = ".lock";

/// "chk-<id>".
inline std::string checkpointDirName(uint64_t id) { return "chk-" + std::to_string(id); }

/// The id of a "chk-<n>" name: n is 1 or more, decimal, without leading zeros or sign, and
/// fits in 64 bits (so the name round-trips through checkpointDirName). nullopt otherwise.
inline std::optional<uint64_t> parseCheckpointDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "chk-";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() > 20 || digits[0] == '0') return std::nullopt;
  uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (n > (UINT64_MAX - d) / 10) return std::nullopt;
    n = n * 10 + d;
  }
  return n;
}

/// Whether the local directory `dir` holds a chk-<n>/ or shared/ (looked at one level
/// deep only: a slip such as `/` or `~` is answered without walking the tree below it).
/// True when it cannot be listed: the caller's own reading then names the error.
inline bool looksLikeJobDirectory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code kind;  // a dangling symlink is not one, and does not end the listing
    if ((name == kSharedDirName || parseCheckpointDirName(name)) && it->is_directory(kind)) return true;
  }
  return static_cast<bool>(ec);
}

/// Whether the local directory `dir` holds a completed checkpoint: a chk-<n>/ with its
/// `_metadata` (one level deep). Stricter than looksLikeJobDirectory, for decisions that
/// must not be taken on a shared/ or an empty chk-<n> alone; false when it cannot be
/// listed.
inline bool holdsCompletedCheckpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code exists;
    if (parseCheckpointDirName(it->path().filename().string()) &&
        std::filesystem::exists(it->path() / kMetadataFileName, exists))
      return true;
  }
  return false;
}

}  // namespace jobhost::state
