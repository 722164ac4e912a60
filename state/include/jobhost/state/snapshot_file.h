// jobhost/state/snapshot_file.h — the one owner of "is a file that a snapshot's `_metadata`
// references intact, damaged, or only unreadable right now?".
//
// `_metadata` records every file a snapshot references with its size (FileRef). Every
// reader of such a file — a restore (heap and rocksdb backends), the preflight of
// `jobhost run -s` and `jobhost check`, `jobhost state`, `jobhost convert`, the
// dashboard — opens, fetches or checks it through these functions, and asks the
// returned Status's code; nobody else compares a file's size with `_metadata`.
//
// The decision (status.h, "Unavailable and corrupt are different answers"):
//   - The storage did not get a complete answer (Unavailable), or failed otherwise
//     (IOError, PermissionDenied, NoSpace for a local copy): that code, unchanged. The
//     file may be perfectly fine; nothing is concluded about the snapshot.
//   - The storage answered completely that the file does not exist: Corruption — the
//     snapshot is incomplete — naming the file and what to do.
//   - The storage reported, from a complete answer, a size other than the recorded one,
//     or a fetched copy holds another number of bytes: Corruption, "truncated or
//     replaced".
// A storage never reports a size taken from a failed or partial answer
// (checkpoint_storage.h), so every size compared here is one the storage vouches for.
//
// Thread-safety: pure functions; the storage is used as CheckpointStorage allows
// (concurrently from several threads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/state_handle.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

/// Whether the file `ref` names is there with its recorded size, asking the storage for
/// its size (one HEAD on an object store): OK, Corruption (missing, or another size), or
/// the storage's error (Unavailable ...). For checks that read nothing (preflight).
Status checkSnapshotFile(CheckpointStorage& storage, const FileRef& ref);

/// Opens the file `ref` names for reading, checking its size against the record. Errors
/// as checkSnapshotFile().
Result<std::unique_ptr<ReadableFile>> openSnapshotFile(CheckpointStorage& storage, const FileRef& ref);

/// Copies the file `ref` names to the local file localDest (CheckpointStorage::
/// fetchToLocal with `options`; *linked as there) and checks that the copy has the
/// recorded size. Errors as checkSnapshotFile(); a local error (ENOSPC, EACCES on
/// localDest) keeps its code. On a Corruption localDest may stay (the caller's scratch).
Status fetchSnapshotFile(CheckpointStorage& storage, const FileRef& ref, const std::string& localDest,
                         const CheckpointStorage::FetchOptions& options, bool* linked = nullptr);

/// The verdict on a size the storage reported completely (an open file's size()): OK if
/// it is the recorded one, else Corruption naming `where` (storage.describe(ref.path))
/// and both sizes.
Status checkSnapshotFileSize(const std::string& where, const FileRef& ref, uint64_t actualSize);

/// `s` is the error of reading `path` (a file the snapshot references) from `storage`.
/// A NotFound is confirmed with the storage (the NotFound may have been about something
/// else, e.g. a missing local destination): if the file is really not there, Corruption
/// naming it ("the snapshot is incomplete"). Every other code is returned unchanged.
Status snapshotFileError(const Status& s, CheckpointStorage& storage, const std::string& path);

}  // namespace jobhost::state
