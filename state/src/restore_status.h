// state/src/restore_status.h — what an error while reading a snapshot during a restore
// means, for the backends' restore paths.
//
// The host treats only Incompatible and Corruption from a restore as final (no restart
// can fix the snapshot); every other code is a task failure the restart strategy
// retries. So a restore must keep the OS's code for local trouble (ENOSPC, EIO, EACCES
// on the working directory, a storage read error) and report a file that the snapshot's
// `_metadata` references but that is gone as Corruption of the snapshot, naming it.
//
// Thread-safety: pure functions; `storage` is only queried.
#pragma once

#include <string>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

/// `s` is the error of reading `path` (a file the snapshot references) from `storage`
/// during a restore. If that file does not exist, the snapshot is incomplete:
/// Corruption naming the file and what to do. Otherwise `s` unchanged (a missing local
/// destination or any other I/O error keeps its code).
inline Status snapshotFileError(const Status& s, CheckpointStorage& storage, const std::string& path) {
  if (s.ok() || !s.isNotFound()) return s;
  auto size = storage.fileSize(path);
  if (size.ok() || !size.status().isNotFound()) return s;  // it is there: the NotFound was about something else
  return Status::Corruption("file " + storage.describe(path) +
                            ", which the snapshot's _metadata references, does not exist (deleted or moved?); "
                            "the snapshot is incomplete: restore from another checkpoint or savepoint");
}

}  // namespace jobhost::state
