// The one owner of "does a snapshot file match its `_metadata`": see
// jobhost/state/snapshot_file.h.
#include "jobhost/state/snapshot_file.h"

#include <filesystem>
#include <system_error>

namespace jobhost::state {

Status checkSnapshotFileSize(const std::string& where, const FileRef& ref, uint64_t actualSize) {
  if (actualSize == ref.size) return Status::OK();
  return Status::Corruption("file " + where + " has " + std::to_string(actualSize) +
                            " bytes, the snapshot's _metadata records " + std::to_string(ref.size) +
                            " (truncated or replaced)");
}

Status snapshotFileError(const Status& s, CheckpointStorage& storage, const std::string& path) {
  if (s.ok() || !s.isNotFound()) return s;
  auto size = storage.fileSize(path);
  if (size.ok() || !size.status().isNotFound()) return s;  // it is there: the NotFound was about something else
  return Status::Corruption("file " + storage.describe(path) +
                            ", which the snapshot's _metadata references, does not exist (deleted or moved?); "
                            "the snapshot is incomplete: restore from another checkpoint or savepoint");
}

Status checkSnapshotFile(CheckpointStorage& storage, const FileRef& ref) {
  auto size = storage.fileSize(ref.path);
  if (!size.ok()) return snapshotFileError(size.status(), storage, ref.path);
  return checkSnapshotFileSize(storage.describe(ref.path), ref, *size);
}

Result<std::unique_ptr<ReadableFile>> openSnapshotFile(CheckpointStorage& storage, const FileRef& ref) {
  auto file = storage.open(ref.path);
  if (!file.ok()) return snapshotFileError(file.status(), storage, ref.path);
  if (Status s = checkSnapshotFileSize(storage.describe(ref.path), ref, (*file)->size()); !s.ok()) return s;
  return file;
}

Status fetchSnapshotFile(CheckpointStorage& storage, const FileRef& ref, const std::string& localDest,
                         const CheckpointStorage::FetchOptions& options, bool* linked) {
  Status s = storage.fetchToLocal(ref.path, localDest, options, linked);
  if (!s.ok()) return snapshotFileError(s, storage, ref.path);
  // fetchToLocal returned OK: the storage vouches that the copy holds the whole answer.
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(localDest, ec);
  if (ec) return fromErrno("cannot stat the downloaded copy " + localDest, ec.value());
  return checkSnapshotFileSize(storage.describe(ref.path), ref, size);
}

}  // namespace jobhost::state
