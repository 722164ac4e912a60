// The registry of snapshot files: see jobhost/state/snapshot_registry.h.
#include "jobhost/state/snapshot_registry.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "jobhost/state/checkpoint_layout.h"

namespace jobhost::state {

namespace {

std::string topComponent(const std::string& path) {
  auto slash = path.find('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

std::string metadataPath(const std::string& dir) { return dir + "/" + kMetadataFileName; }

bool isRetryable(const Status& s) { return s.isIOError() || s.isNoSpace() || s.isPermissionDenied(); }

/// Keeps the first error; later ones only add to the count in the message.
void keepFirst(Status* first, const Status& s) {
  if (!s.ok() && first->ok()) *first = s;
}

}  // namespace

Result<SnapshotRegistry> SnapshotRegistry::load(std::shared_ptr<CheckpointStorage> storage) {
  // A `_metadata` the listing names but that is gone when read was removed meanwhile: by
  // a discard racing this load, or — on an object store — by a DELETE the server carries
  // out after its client died, while the listing (Ceph RGW's bucket index) still lags
  // behind a newer checkpoint's completed PUT. Listing again a moment later shows what
  // is there; after the last try such a checkpoint counts as removed, never as
  // unreadable (which would stop a restore of its successor).
  constexpr int kTries = 5;
  for (int attempt = 1;; ++attempt) {
    bool vanished = false;
    auto r = loadOnce(storage, &vanished);
    if (!r.ok() || !vanished || attempt == kTries) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
  }
}

Result<SnapshotRegistry> SnapshotRegistry::loadOnce(std::shared_ptr<CheckpointStorage> storage, bool* vanished) {
  SnapshotRegistry r(std::move(storage));
  std::vector<FileEntry> files, temporary;
  if (Status s = r.storage_->list("", &files); !s.ok()) return s;
  if (Status s = r.storage_->listTemporary("", &temporary); !s.ok()) return s;
  for (const auto* list : {&files, &temporary})
    for (const auto& f : *list)
      if (auto id = parseCheckpointDirName(topComponent(f.path))) r.highestSeen_ = std::max(r.highestSeen_, *id);
  for (const auto& f : files) {
    std::string dir = topComponent(f.path);
    if (dir.empty() || f.path != metadataPath(dir)) continue;
    std::string bytes;
    Status s = r.storage_->get(f.path, &bytes);
    if (!s.ok() && isRetryable(s)) return s;
    if (s.isNotFound()) {
      *vanished = true;
      continue;
    }
    if (!s.ok()) {
      r.unreadable_[dir] = s.message();
      continue;
    }
    auto m = parseMetadata(bytes, dir, r.storage_->describe(f.path));
    if (!m.ok()) {
      r.unreadable_[dir] = m.status().message();
      continue;
    }
    r.add(dir, std::move(*m));
  }
  return r;
}

Result<SnapshotRegistry> SnapshotRegistry::loadOne(std::shared_ptr<CheckpointStorage> storage, const std::string& dir) {
  SnapshotRegistry r(std::move(storage));
  r.partial_ = true;
  std::string bytes;
  if (Status s = r.storage_->get(metadataPath(dir), &bytes); !s.ok()) return s;
  auto m = parseMetadata(bytes, dir, r.storage_->describe(metadataPath(dir)));
  if (!m.ok()) return m.status();
  r.add(dir, std::move(*m));
  return r;
}

bool SnapshotRegistry::referencesUnder(const std::string& dir) const {
  auto it = referencedBy_.lower_bound(dir + "/");
  return it != referencedBy_.end() && it->first.rfind(dir + "/", 0) == 0;
}

void SnapshotRegistry::add(const std::string& dir, CheckpointMetadata m) {
  for (const auto& f : m.referencedFiles()) referencedBy_[f.path].insert(dir);
  snapshots_[dir] = std::move(m);
}

std::vector<uint64_t> SnapshotRegistry::checkpointIds() const {
  std::vector<uint64_t> ids;
  for (const auto& [dir, m] : snapshots_)
    if (auto id = parseCheckpointDirName(dir)) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

const CheckpointMetadata* SnapshotRegistry::checkpoint(uint64_t id) const {
  auto it = snapshots_.find(checkpointDirName(id));
  return it == snapshots_.end() ? nullptr : &it->second;
}

std::vector<std::string> SnapshotRegistry::referencesOf(const std::string& path) const {
  auto it = referencedBy_.find(path);
  if (it == referencedBy_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

Status SnapshotRegistry::publish(const std::string& dir, const CheckpointMetadata& metadata) {
  {
    std::lock_guard lock(*mu_);
    if (snapshots_.count(dir) || discarding_.count(dir))
      return Status::InvalidArgument("snapshot " + storage_->describe(dir) + " already exists");
  }
  auto bytes = serializeMetadata(metadata, dir);
  if (!bytes.ok()) return bytes.status();
  if (Status s = storage_->put(metadataPath(dir), *bytes); !s.ok()) {
    // A failure after the file became visible (e.g. the directory fsync) must not leave a
    // snapshot behind that nobody reported complete; but another writer's `_metadata`
    // ("already exists") is not ours to remove.
    if (!s.isInvalidArgument() && storage_->exists(metadataPath(dir))) (void)storage_->remove(metadataPath(dir));
    return s;
  }
  std::lock_guard lock(*mu_);
  add(dir, metadata);
  return Status::OK();
}

bool SnapshotRegistry::isReferenced(const std::string& path) const {
  std::lock_guard lock(*mu_);
  return referencedBy_.count(path) > 0;
}

Status SnapshotRegistry::removeIfUnreferenced(const FileRef& f, const std::string& reason,
                                              std::vector<RemovedFile>* removed) {
  if (isReferenced(f.path)) return Status::OK();
  Status s = storage_->remove(f.path);
  if (s.isNotFound()) return Status::OK();
  if (!s.ok()) return s;
  if (removed) removed->push_back({f.path, f.size, reason});
  return Status::OK();
}

Status SnapshotRegistry::discard(const std::string& dir, std::vector<RemovedFile>* removed) {
  {
    std::lock_guard lock(*mu_);
    if (!snapshots_.count(dir) || discarding_.count(dir))
      return Status::NotFound("no complete snapshot " + storage_->describe(dir));
    discarding_.insert(dir);  // registered (its files referenced) until its _metadata is gone
  }
  // 1. _metadata: from here on the snapshot does not exist.
  std::string meta = metadataPath(dir);
  auto metaSize = storage_->fileSize(meta);
  if (Status s = storage_->remove(meta); !s.ok() && !s.isNotFound()) {
    std::lock_guard lock(*mu_);
    discarding_.erase(dir);
    return s;
  }
  if (removed) removed->push_back({meta, metaSize.ok() ? *metaSize : 0, "metadata of " + dir});
  CheckpointMetadata m;
  bool knowsAll;
  {
    std::lock_guard lock(*mu_);
    discarding_.erase(dir);
    auto it = snapshots_.find(dir);
    m = std::move(it->second);
    snapshots_.erase(it);
    for (const auto& f : m.referencedFiles()) {
      auto r = referencedBy_.find(f.path);
      if (r == referencedBy_.end()) continue;
      r->second.erase(dir);
      if (r->second.empty()) referencedBy_.erase(r);
    }
    knowsAll = knowsAllReferences();
  }
  // 2. Files it referenced that nothing else does. Outside its own directory only if every
  // other snapshot's references are known (no unreadable `_metadata`).
  Status first;
  for (const auto& f : m.referencedFiles()) {
    if (!knowsAll && f.path.rfind(dir + "/", 0) != 0) continue;
    keepFirst(&first, removeIfUnreferenced(f, "only " + dir + " used it", removed));
  }
  // 3. Whatever else is under its directory (files a crash left, temporary files), unless
  // another snapshot still references it.
  std::vector<FileEntry> rest, temporary;
  keepFirst(&first, storage_->list(dir + "/", &rest));
  keepFirst(&first, storage_->listTemporary(dir + "/", &temporary));
  bool anyStillReferenced = false;
  for (const auto& f : rest) {
    if (isReferenced(f.path)) {
      anyStillReferenced = true;
      continue;
    }
    keepFirst(&first, removeIfUnreferenced({f.path, f.size}, "left in " + dir, removed));
  }
  for (const auto& f : temporary) {
    Status s = storage_->removeTemporary(f.path);
    if (s.ok() && removed) removed->push_back({f.path, f.size, "unfinished upload", true});
    if (!s.isNotFound()) keepFirst(&first, s);
  }
  if (!anyStillReferenced && first.ok()) keepFirst(&first, storage_->removeAll(dir));
  return first;
}

Status SnapshotRegistry::discardIncomplete(const std::string& dir, const std::vector<FileRef>& uploadedElsewhere,
                                           std::vector<RemovedFile>* removed) {
  bool registered;
  {
    std::lock_guard lock(*mu_);
    registered = snapshots_.count(dir) > 0;
  }
  if (registered || storage_->exists(metadataPath(dir)))
    return Status::InvalidArgument("refusing to discard " + storage_->describe(dir) + " as unfinished: it is complete");
  Status first;
  std::vector<FileEntry> files, temporary;
  keepFirst(&first, storage_->list(dir + "/", &files));
  keepFirst(&first, storage_->listTemporary(dir + "/", &temporary));
  bool anyReferenced = false;
  for (const auto& f : files) anyReferenced |= isReferenced(f.path);
  if (anyReferenced) {
    // Cannot happen with the layout the product writes; be safe rather than fast.
    for (const auto& f : files) keepFirst(&first, removeIfUnreferenced({f.path, f.size}, "never completed", removed));
    for (const auto& f : temporary) keepFirst(&first, storage_->removeTemporary(f.path));
  } else {
    Status s = storage_->removeAll(dir);
    keepFirst(&first, s);
    if (s.ok() && removed) {
      for (const auto& f : files) removed->push_back({f.path, f.size, "never completed"});
      for (const auto& f : temporary) removed->push_back({f.path, f.size, "unfinished upload", true});
    }
  }
  for (const auto& f : uploadedElsewhere)
    keepFirst(&first, removeIfUnreferenced(f, "uploaded by " + dir + ", which never completed", removed));
  return first;
}

Result<std::vector<RemovedFile>> SnapshotRegistry::findGarbage(std::vector<std::string>* kept) const {
  if (partial_) return std::vector<RemovedFile>{};  // only the owner of a whole directory finds garbage
  std::vector<FileEntry> files, temporary;
  if (Status s = storage_->list("", &files); !s.ok()) return s;
  if (Status s = storage_->listTemporary("", &temporary); !s.ok()) return s;
  std::vector<RemovedFile> out;
  std::set<std::string> keptDirs;
  auto keep = [&](const std::string& line) {
    if (kept) kept->push_back(line);
  };
  // Checkpoints complete on the store that this registry does not know: published after
  // it was loaded, or — on an object store whose listing lags (Ceph RGW's bucket index)
  // — published before but not listed then. Nothing of them is garbage, and since what
  // they reference is unknown, no shared file is either. A checkpoint directory without
  // a listed `_metadata` is asked for it directly (a HEAD is consistent where a listing
  // may not be) before it counts as never completed.
  std::set<std::string> unknownComplete;
  {
    std::set<std::string> withoutMetadata;
    for (const auto& f : files) {
      std::string top = topComponent(f.path);
      if (!parseCheckpointDirName(top) || snapshots_.count(top) || unreadable_.count(top)) continue;
      if (f.path == metadataPath(top)) unknownComplete.insert(top);
      else withoutMetadata.insert(top);
    }
    for (const auto& dir : withoutMetadata)
      if (!unknownComplete.count(dir) && storage_->exists(metadataPath(dir))) unknownComplete.insert(dir);
  }
  for (const auto& f : files) {
    std::string top = topComponent(f.path);
    if (top.empty()) continue;  // the lock file and anything else at the root
    if (parseCheckpointDirName(top)) {
      if (snapshots_.count(top)) continue;  // part of a complete checkpoint
      if (unknownComplete.count(top)) {
        if (keptDirs.insert(top).second)
          keep(storage_->describe(top) + ": complete, but not yet known when the checkpoints were read; kept (run "
               "jobhost gc again to collect what it does not need)");
        continue;
      }
      if (unreadable_.count(top)) {
        if (keptDirs.insert(top).second)
          keep(storage_->describe(top) + ": its _metadata cannot be read (" + unreadable_.at(top) +
               "); if it is damaged, delete that directory by hand (rm -r), then run jobhost gc again");
        continue;
      }
      if (referencedBy_.count(f.path)) continue;  // another snapshot still uses it
      out.push_back({f.path, f.size, "checkpoint " + top + " never completed"});
    } else if (top == kSharedDirName) {
      if (referencedBy_.count(f.path)) continue;
      if (!unreadable_.empty() || !unknownComplete.empty()) {
        if (keptDirs.insert(top).second)
          keep("unreferenced files in " + storage_->describe(top) + ": a checkpoint's _metadata cannot be read "
               "(or was not yet known), so what it references is unknown");
        continue;
      }
      out.push_back({f.path, f.size, "referenced by no complete checkpoint"});
    }
  }
  for (const auto& f : temporary) {
    std::string top = topComponent(f.path);
    if (parseCheckpointDirName(top) || top == kSharedDirName)
      out.push_back({f.path, f.size, "unfinished upload (temporary file)", true});
  }
  std::sort(out.begin(), out.end(), [](const RemovedFile& a, const RemovedFile& b) { return a.path < b.path; });
  return out;
}

Status SnapshotRegistry::collect(const std::vector<RemovedFile>& garbage, std::vector<RemovedFile>* removed) {
  Status first;
  std::set<std::string> incompleteDirs;
  for (const auto& g : garbage) {
    if (isReferenced(g.path)) continue;  // registered meanwhile: never delete it
    std::string top = topComponent(g.path);
    Status s = g.temporary ? storage_->removeTemporary(g.path) : storage_->remove(g.path);
    if (s.ok() && removed) removed->push_back(g);
    if (!s.isNotFound()) keepFirst(&first, s);
    if (parseCheckpointDirName(top) && !snapshots_.count(top)) incompleteDirs.insert(top);
  }
  // Directories of checkpoints that never completed, now empty.
  for (const auto& dir : incompleteDirs)
    if (!storage_->exists(metadataPath(dir)) && !referencesUnder(dir)) keepFirst(&first, storage_->removeAll(dir));
  return first;
}

}  // namespace jobhost::state
