// jobhost/state/checkpoint_metadata.h — the `_metadata` of a checkpoint or savepoint.
//
// In memory this is a plain struct; on disk it is a Cap'n Proto message
// (state/schema/checkpoint_metadata.capnp) behind an 8-byte magic and a format version.
// A reader refuses a newer format version with a message naming both versions, and
// treats anything it cannot parse as Corruption — never a crash.
//
// Paths: in the file they are relative to the directory holding `_metadata`; in this
// struct, after parseMetadata(..., baseDir), they are relative to the storage root the
// caller uses (baseDir joined and normalised). serializeMetadata() does the reverse.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jobhost/operator.h"
#include "jobhost/state/checkpoint_layout.h"  // kMetadataFileName
#include "jobhost/state/keyed_backend.h"
#include "jobhost/state/state_handle.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

/// Bump when a change needs readers to refuse older code; old versions stay readable.
/// 2: a subtask may hold in-flight records (InputChannelStateHandle, unaligned
/// checkpoints), which an older reader would drop. A snapshot without them is still
/// written as version 1 (kMetadataFormatVersionWithoutChannelState), so it restores
/// into older jobhost releases as before.
inline constexpr uint32_t kMetadataFormatVersion = 2;
inline constexpr uint32_t kMetadataFormatVersionWithoutChannelState = 1;

enum class SnapshotKind { kCheckpoint, kSavepoint };

/// One buffer of in-flight records of an unaligned checkpoint: sent by producing subtask
/// `fromSubtask` into input `input` of an exchange, not yet processed by the receiving
/// subtask when it took its snapshot (Flink's InputChannelStateHandle). `data` holds
/// records in the exchange's wire format (schema/checkpoint_metadata.capnp).
struct InputChannelBuffer {
  int input = 0;
  int fromSubtask = 0;
  std::string data;
  bool operator==(const InputChannelBuffer&) const = default;
};

struct SubtaskSnapshot {
  int index = 0;
  std::string operatorState;
  KeyedStateHandle keyed;
  /// Unaligned checkpoints, on the exchange receiving them: the in-flight records, in
  /// the order each channel delivered them.
  std::vector<InputChannelBuffer> inputChannels;
  /// With inputChannels: the receiving task's input watermark at its snapshot
  /// (INT64_MIN: none recorded, as in snapshots written before it was).
  int64_t inputWatermark = INT64_MIN;

  /// The bytes of the in-flight records (inputChannels' buffers).
  uint64_t inFlightBytes() const {
    uint64_t bytes = 0;
    for (const auto& b : inputChannels) bytes += b.data.size();
    return bytes;
  }
};

struct OperatorSnapshot {
  std::string uid;
  std::string name;
  int parallelism = 1;
  bool keyed = false;
  std::vector<StateDescriptorInfo> states;
  std::vector<SubtaskSnapshot> subtasks;
};

struct SnapshotStats {
  uint64_t syncMicros = 0;
  uint64_t asyncMicros = 0;
  uint64_t newBytes = 0;
  uint64_t totalBytes = 0;
  /// The longest barrier alignment of any subtask (a task with several input channels
  /// waits from the first barrier to the last; an unaligned checkpoint's: from the first
  /// barrier reaching the task's input to the last, while nothing waits).
  uint64_t alignmentMicros = 0;
};

struct CheckpointMetadata {
  /// As read; serializeMetadata() writes 2 exactly when there are in-flight records.
  uint32_t formatVersion = kMetadataFormatVersionWithoutChannelState;
  std::string jobId;
  uint64_t checkpointId = 0;
  SnapshotKind kind = SnapshotKind::kCheckpoint;
  SnapshotFormat format = SnapshotFormat::kNative;
  int64_t timestampMs = 0;
  std::string jobClass;
  std::string pluginFile;
  std::string pluginDigest;
  std::string sdkVersion;
  int parallelism = 1;
  std::string backend;  // "hashmap" | "rocksdb"
  bool incremental = false;
  int maxParallelism = 128;
  std::vector<OperatorSnapshot> operators;
  SnapshotStats stats;

  /// Every file referenced by any handle.
  std::vector<FileRef> referencedFiles() const;
  /// True if a subtask holds in-flight records (an unaligned checkpoint).
  bool hasChannelState() const;
  const OperatorSnapshot* findOperator(const std::string& uid) const;
};

/// Encodes `m` with paths made relative to `metadataDir` (the storage-relative directory
/// that will hold `_metadata`).
Result<std::string> serializeMetadata(const CheckpointMetadata& m, const std::string& metadataDir);

/// Decodes `_metadata` bytes; `metadataDir` is the storage-relative directory holding the
/// file, joined to every path. `where` names the file in messages.
Result<CheckpointMetadata> parseMetadata(std::string_view bytes, const std::string& metadataDir,
                                         const std::string& where);

/// "a/b/../c" -> "a/c"; returns empty on escaping the root ("../x").
std::string normalizePath(const std::string& path);
/// `to` relative to directory `fromDir` (both normalised, storage-relative).
std::string relativePath(const std::string& fromDir, const std::string& to);

}  // namespace jobhost::state
