// tests/support/fault_injection.cc — see fault_injection.h.
#include "support/fault_injection.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace jobhost::testing {

using state::FileInfo;
using state::FileType;
using state::Status;

namespace {

size_t indexOf(FsOp op) { return static_cast<size_t>(op); }
size_t indexOf(StorageOp op) { return static_cast<size_t>(op); }

// Paths as keys: lexically normal, no trailing '/'.
std::string norm(const std::string& path) {
  std::string p = std::filesystem::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool isUnder(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (dir == "/" || path[dir.size()] == '/');
}

}  // namespace

const char* fsOpName(FsOp op) {
  switch (op) {
    case FsOp::kOpen: return "open";
    case FsOp::kRead: return "read";
    case FsOp::kWrite: return "write";
    case FsOp::kSync: return "fsync";
    case FsOp::kClose: return "close";
    case FsOp::kStat: return "stat";
    case FsOp::kList: return "list";
    case FsOp::kMkdir: return "mkdir";
    case FsOp::kRmdir: return "rmdir";
    case FsOp::kUnlink: return "unlink";
    case FsOp::kRename: return "rename";
    case FsOp::kSyncDir: return "fsync-dir";
  }
  return "unknown";
}

const char* storageOpName(StorageOp op) {
  switch (op) {
    case StorageOp::kPut: return "put";
    case StorageOp::kPutFile: return "putFile";
    case StorageOp::kCreateClose: return "create-close";
    case StorageOp::kGet: return "get";
    case StorageOp::kOpen: return "open";
    case StorageOp::kList: return "list";
    case StorageOp::kRemove: return "remove";
    case StorageOp::kRemoveAll: return "removeAll";
    case StorageOp::kBatchCommit: return "batch-commit";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// FaultInjectionFileSystem

class FaultInjectionFileSystem::WritableFile final : public state::FsWritableFile {
 public:
  WritableFile(FaultInjectionFileSystem* fs, std::unique_ptr<state::FsWritableFile> base,
               std::shared_ptr<FileState> state, uint64_t generation)
      : fs_(fs), base_(std::move(base)), state_(std::move(state)), generation_(generation) {}

  int append(std::string_view data) override {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    if (!fs_->liveLocked(generation_)) return EIO;
    if (int err = fs_->admitLocked(FsOp::kWrite); err != 0) return err;
    int err = base_->append(data);
    if (err == 0) state_->size += data.size();
    return err;
  }

  int appendCopyOf(const state::FsReadableFile&, uint64_t, size_t, size_t*) override {
    return EXDEV;  // copies go through read() and append(), and their faults
  }

  int sync() override {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    if (!fs_->liveLocked(generation_)) return EIO;
    if (int err = fs_->admitLocked(FsOp::kSync); err != 0) return err;
    int err = base_->sync();
    if (err == 0) state_->syncedSize = state_->size;
    return err;
  }

  int close() override {
    std::lock_guard<std::mutex> lock(fs_->mu_);
    if (!fs_->liveLocked(generation_)) return EIO;
    if (int err = fs_->admitLocked(FsOp::kClose); err != 0) return err;
    return base_->close();
  }

 private:
  FaultInjectionFileSystem* const fs_;
  const std::unique_ptr<state::FsWritableFile> base_;  // closes on destruction if still open
  const std::shared_ptr<FileState> state_;
  const uint64_t generation_;
};

class FaultInjectionFileSystem::ReadableFile final : public state::FsReadableFile {
 public:
  ReadableFile(FaultInjectionFileSystem* fs, std::unique_ptr<state::FsReadableFile> base,
               uint64_t generation)
      : fs_(fs), base_(std::move(base)), generation_(generation) {}

  FileInfo info() const override { return base_->info(); }

  int read(uint64_t offset, size_t n, char* buf, size_t* got) const override {
    {
      std::lock_guard<std::mutex> lock(fs_->mu_);
      if (!fs_->liveLocked(generation_)) return EIO;
      if (int err = fs_->admitLocked(FsOp::kRead); err != 0) return err;
    }
    return base_->read(offset, n, buf, got);
  }

 private:
  FaultInjectionFileSystem* const fs_;
  const std::unique_ptr<state::FsReadableFile> base_;
  const uint64_t generation_;
};

FaultInjectionFileSystem::FaultInjectionFileSystem(std::shared_ptr<state::FileSystem> base)
    : base_(base != nullptr ? std::move(base) : state::defaultFileSystem()) {}

FaultInjectionFileSystem::~FaultInjectionFileSystem() = default;

void FaultInjectionFileSystem::failNth(FsOp op, uint64_t n, int err) {
  std::lock_guard<std::mutex> lock(mu_);
  Rule& r = rules_[indexOf(op)];
  r = Rule();
  r.active = n > 0;
  r.failAt = counts_[indexOf(op)] + n;
  r.err = err;
}

void FaultInjectionFileSystem::failRandomly(FsOp op, double probability, int err, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  Rule& r = rules_[indexOf(op)];
  r = Rule();
  r.active = probability > 0;
  r.random = true;
  r.probability = probability;
  r.rng.seed(seed);
  r.err = err;
}

void FaultInjectionFileSystem::failOnPath(FsOp op, const std::string& part, int err) {
  std::lock_guard<std::mutex> lock(mu_);
  Rule& r = rules_[indexOf(op)];
  r = Rule();
  r.active = !part.empty();
  r.pathContains = part;
  r.err = err;
}

void FaultInjectionFileSystem::clearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Rule& r : rules_) r = Rule();
}

uint64_t FaultInjectionFileSystem::count(FsOp op) const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_[indexOf(op)];
}

void FaultInjectionFileSystem::setFilesystemActive(bool active) {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = active;
}

int FaultInjectionFileSystem::admitLocked(FsOp op, std::string_view path) {
  if (!active_) return EIO;
  const uint64_t n = ++counts_[indexOf(op)];
  Rule& r = rules_[indexOf(op)];
  if (!r.active) return 0;
  if (!r.pathContains.empty()) {
    if (path.find(r.pathContains) == std::string_view::npos) return 0;
    r.active = false;
    return r.err;
  }
  if (r.random) {
    return std::uniform_real_distribution<double>(0.0, 1.0)(r.rng) < r.probability ? r.err : 0;
  }
  if (n != r.failAt) return 0;
  r.active = false;
  return r.err;
}

int FaultInjectionFileSystem::admit(FsOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  return admitLocked(op);
}

int FaultInjectionFileSystem::newWritableFile(const std::string& path, CreateMode mode,
                                              std::unique_ptr<state::FsWritableFile>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kOpen); err != 0) return err;
  const std::string key = norm(path);
  FileInfo before;
  const bool existed = base_->lstat(path, &before) == 0;
  std::unique_ptr<state::FsWritableFile> file;
  if (int err = base_->newWritableFile(path, mode, &file); err != 0) return err;
  auto state = std::make_shared<FileState>();  // an emptied file has nothing durable either
  files_[key] = state;
  if (!existed) pending_.push_back({PendingChange::kCreateFile, key, {}, {}});
  *out = std::make_unique<WritableFile>(this, std::move(file), std::move(state), generation_);
  return 0;
}

int FaultInjectionFileSystem::newReadableFile(const std::string& path,
                                              std::unique_ptr<state::FsReadableFile>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kOpen); err != 0) return err;
  std::unique_ptr<state::FsReadableFile> file;
  if (int err = base_->newReadableFile(path, &file); err != 0) return err;
  *out = std::make_unique<ReadableFile>(this, std::move(file), generation_);
  return 0;
}

int FaultInjectionFileSystem::stat(const std::string& path, FileInfo* out) {
  if (int err = admit(FsOp::kStat); err != 0) return err;
  return base_->stat(path, out);
}

int FaultInjectionFileSystem::lstat(const std::string& path, FileInfo* out) {
  if (int err = admit(FsOp::kStat); err != 0) return err;
  return base_->lstat(path, out);
}

int FaultInjectionFileSystem::listDir(const std::string& dir, std::vector<std::string>* names) {
  if (int err = admit(FsOp::kList); err != 0) return err;
  return base_->listDir(dir, names);
}

int FaultInjectionFileSystem::mkdir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kMkdir); err != 0) return err;
  if (int err = base_->mkdir(dir); err != 0) return err;
  pending_.push_back({PendingChange::kMkdir, norm(dir), {}, {}});
  return 0;
}

int FaultInjectionFileSystem::rmdir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kRmdir); err != 0) return err;
  if (int err = base_->rmdir(dir); err != 0) return err;
  pending_.push_back({PendingChange::kRmdir, norm(dir), {}, {}});
  return 0;
}

int FaultInjectionFileSystem::unlink(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kUnlink); err != 0) return err;
  const std::string key = norm(path);
  PendingChange change{PendingChange::kUnlink, key, {}, {}};
  FileInfo info;
  if (base_->lstat(path, &info) == 0 && info.type == FileType::kRegular) {
    change.restorable = durableContentLocked(key, &change.content) == 0;
  }
  if (int err = base_->unlink(path); err != 0) return err;
  files_.erase(key);
  pending_.push_back(std::move(change));
  return 0;
}

int FaultInjectionFileSystem::renameNoReplace(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kRename, to); err != 0) return err;
  if (int err = base_->renameNoReplace(from, to); err != 0) return err;
  const std::string src = norm(from), dst = norm(to);
  // The files keep their durability under their new names (a directory's files too).
  std::map<std::string, std::shared_ptr<FileState>> moved;
  for (auto it = files_.begin(); it != files_.end();) {
    if (it->first == src || isUnder(it->first, src)) {
      moved[dst + it->first.substr(src.size())] = std::move(it->second);
      it = files_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [path, state] : moved) files_[path] = std::move(state);
  pending_.push_back({PendingChange::kRename, dst, src, {}});
  return 0;
}

int FaultInjectionFileSystem::syncDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (int err = admitLocked(FsOp::kSyncDir); err != 0) return err;
  if (int err = base_->syncDir(dir); err != 0) return err;
  syncedDirLocked(norm(dir));
  return 0;
}

void FaultInjectionFileSystem::syncedDirLocked(const std::string& dir) {
  std::vector<std::string> removedDirs;  // durably gone: nothing inside can come back
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (parentOf(it->path) == dir) {
      if (it->kind == PendingChange::kRmdir) removedDirs.push_back(it->path);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::string& gone : removedDirs) {
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [&](const PendingChange& c) { return isUnder(c.path, gone); }),
                   pending_.end());
  }
}

int FaultInjectionFileSystem::durableContentLocked(const std::string& path, std::string* out) {
  uint64_t limit = std::numeric_limits<uint64_t>::max();
  if (auto it = files_.find(path); it != files_.end()) limit = it->second->syncedSize;
  std::unique_ptr<state::FsReadableFile> file;
  if (int err = base_->newReadableFile(path, &file); err != 0) return err;
  const uint64_t size = std::min(file->info().size, limit);
  out->assign(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out->size()) {
    size_t got = 0;
    if (int err = file->read(done, out->size() - done, out->data() + done, &got); err != 0) return err;
    if (got == 0) break;
    done += got;
  }
  out->resize(done);
  return 0;
}

int FaultInjectionFileSystem::removeTreeLocked(const std::string& dir) {
  std::vector<std::string> names;
  if (int err = base_->listDir(dir, &names); err != 0) return err == ENOENT ? 0 : err;
  for (const std::string& name : names) {
    const std::string child = dir + "/" + name;
    FileInfo info;
    if (base_->lstat(child, &info) != 0) continue;
    int err = info.type == FileType::kDirectory ? removeTreeLocked(child) : base_->unlink(child);
    if (err != 0 && err != ENOENT) return err;
  }
  int err = base_->rmdir(dir);
  return err == ENOENT ? 0 : err;
}

int FaultInjectionFileSystem::writeWholeFileLocked(const std::string& path, const std::string& content,
                                                   bool exclusive) {
  std::unique_ptr<state::FsWritableFile> file;
  int err = base_->newWritableFile(path, exclusive ? CreateMode::kExclusive : CreateMode::kTruncate, &file);
  if (err == 0) err = file->append(content);
  if (err == 0) err = file->sync();
  if (err == 0) err = file->close();
  return err;
}

Status FaultInjectionFileSystem::dropUnsyncedData() {
  std::lock_guard<std::mutex> lock(mu_);
  Status result;
  auto failed = [&](const std::string& what, const std::string& path, int err) {
    if (result.ok()) {
      result = Status::IOError("power loss simulation: cannot " + what + " " + path + ": " +
                               std::strerror(err));
    }
  };
  auto exists = [&](const std::string& path, FileType* type = nullptr) {
    FileInfo info;
    if (base_->lstat(path, &info) != 0) return false;
    if (type != nullptr) *type = info.type;
    return true;
  };
  auto isDir = [&](const std::string& path) {
    FileType t;
    return exists(path, &t) && t == FileType::kDirectory;
  };

  // 1. Every file written through us keeps only its synced bytes.
  for (const auto& [path, state] : files_) {
    FileType type;
    if (!exists(path, &type) || type != FileType::kRegular) continue;
    std::string content;
    int err = durableContentLocked(path, &content);
    if (err == 0) err = writeWholeFileLocked(path, content, /*exclusive=*/false);
    if (err != 0) failed("truncate", path, err);
  }
  // 2. Directory changes never made durable are undone, newest first.
  for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) {
    const PendingChange& c = *it;
    int err = 0;
    switch (c.kind) {
      case PendingChange::kCreateFile: {
        FileType type;
        if (exists(c.path, &type) && type != FileType::kDirectory) err = base_->unlink(c.path);
        if (err != 0) failed("remove", c.path, err);
        break;
      }
      case PendingChange::kMkdir:
        if (isDir(c.path)) err = removeTreeLocked(c.path);
        if (err != 0) failed("remove directory", c.path, err);
        break;
      case PendingChange::kRename:
        if (exists(c.path) && !exists(c.from) && isDir(parentOf(c.from))) {
          err = base_->renameNoReplace(c.path, c.from);
        }
        if (err != 0) failed("move back", c.path, err);
        break;
      case PendingChange::kUnlink:
        if (c.restorable && !exists(c.path) && isDir(parentOf(c.path))) {
          err = writeWholeFileLocked(c.path, c.content, /*exclusive=*/true);
        }
        if (err != 0) failed("restore", c.path, err);
        break;
      case PendingChange::kRmdir:
        if (!exists(c.path) && isDir(parentOf(c.path))) err = base_->mkdir(c.path);
        if (err != 0) failed("re-create directory", c.path, err);
        break;
    }
  }
  // 3. After the "reboot" everything on disk is durable; open files are dead.
  pending_.clear();
  files_.clear();
  ++generation_;
  active_ = true;
  return result;
}

// ---------------------------------------------------------------------------------------
// FaultInjectionStorage

struct FaultInjectionStorage::Faults {
  std::mutex mu;
  std::array<uint64_t, kStorageOpCount> counts{};  // GUARDED_BY(mu)
  std::array<uint64_t, kStorageOpCount> failAt{};  // GUARDED_BY(mu); 0: no rule
  std::array<int, kStorageOpCount> err{};          // GUARDED_BY(mu)
  std::array<std::string, kStorageOpCount> onlyAt;  // GUARDED_BY(mu); non-empty: failOn's location

  // Counts a call of kind op on location; OK, or the injected error.
  Status admit(StorageOp op, const std::string& location) {
    std::lock_guard<std::mutex> lock(mu);
    const size_t i = indexOf(op);
    ++counts[i];
    if (!onlyAt[i].empty()) {
      if (location != onlyAt[i]) return Status::OK();
      onlyAt[i].clear();
    } else {
      if (counts[i] != failAt[i]) return Status::OK();
      failAt[i] = 0;
    }
    return state::fromErrno(std::string("cannot ") + storageOpName(op) + " " + location + " (injected fault)",
                            err[i]);
  }
};

class FaultInjectionStorage::WritableFile final : public state::WritableFile {
 public:
  WritableFile(std::unique_ptr<state::WritableFile> base, std::shared_ptr<Faults> faults,
               std::string location)
      : base_(std::move(base)), faults_(std::move(faults)), location_(std::move(location)) {}

  Status append(std::string_view data) override {
    if (base_ == nullptr) return Status::InvalidArgument("cannot write " + location_ + ": already closed");
    return base_->append(data);
  }

  uint64_t size() const override { return base_ == nullptr ? 0 : base_->size(); }

  Status close() override {
    if (base_ == nullptr) return Status::InvalidArgument("cannot close " + location_ + ": already closed");
    Status s = faults_->admit(StorageOp::kCreateClose, location_);
    if (!s.ok()) {
      base_.reset();  // discarded: nothing becomes visible
      return s;
    }
    return base_->close();
  }

 private:
  std::unique_ptr<state::WritableFile> base_;  // null after a failed close
  const std::shared_ptr<Faults> faults_;
  const std::string location_;
};

class FaultInjectionStorage::Batch final : public state::FileBatch {
 public:
  Batch(std::unique_ptr<state::FileBatch> base, std::shared_ptr<Faults> faults, const state::CheckpointStorage& storage)
      : base_(std::move(base)), faults_(std::move(faults)), storage_(storage) {}

  Status putFile(const std::string& path, const std::string& localSourcePath) override {
    if (base_ == nullptr) return Status::InvalidArgument("cannot add " + path + " to a batch already committed");
    if (Status s = faults_->admit(StorageOp::kPutFile, storage_.describe(path)); !s.ok()) return s;
    return base_->putFile(path, localSourcePath);
  }

  Status commit() override {
    if (base_ == nullptr) return Status::InvalidArgument("cannot commit a batch of files twice");
    Status s = faults_->admit(StorageOp::kBatchCommit, storage_.describe(""));
    if (!s.ok()) {
      base_.reset();  // discarded: none of its files stays
      return s;
    }
    return base_->commit();
  }

 private:
  std::unique_ptr<state::FileBatch> base_;  // null after a failed commit
  const std::shared_ptr<Faults> faults_;
  const state::CheckpointStorage& storage_;  // the wrapped one, for describe()
};

FaultInjectionStorage::FaultInjectionStorage(std::shared_ptr<state::CheckpointStorage> base)
    : base_(std::move(base)), faults_(std::make_shared<Faults>()) {}

void FaultInjectionStorage::failNth(StorageOp op, uint64_t n, int err) {
  std::lock_guard<std::mutex> lock(faults_->mu);
  const size_t i = indexOf(op);
  faults_->failAt[i] = n == 0 ? 0 : faults_->counts[i] + n;
  faults_->onlyAt[i].clear();
  faults_->err[i] = err;
}

void FaultInjectionStorage::failOn(StorageOp op, const std::string& path, int err) {
  std::lock_guard<std::mutex> lock(faults_->mu);
  const size_t i = indexOf(op);
  faults_->onlyAt[i] = base_->describe(path);
  faults_->failAt[i] = 0;
  faults_->err[i] = err;
}

void FaultInjectionStorage::clearFaults() {
  std::lock_guard<std::mutex> lock(faults_->mu);
  faults_->failAt.fill(0);
  for (auto& a : faults_->onlyAt) a.clear();
}

uint64_t FaultInjectionStorage::count(StorageOp op) const {
  std::lock_guard<std::mutex> lock(faults_->mu);
  return faults_->counts[indexOf(op)];
}

state::Result<std::unique_ptr<state::WritableFile>> FaultInjectionStorage::create(const std::string& path) {
  auto file = base_->create(path);
  if (!file.ok()) return file.status();
  return std::unique_ptr<state::WritableFile>(
      new WritableFile(std::move(file).value(), faults_, base_->describe(path)));
}

Status FaultInjectionStorage::putFile(const std::string& path, const std::string& localSourcePath) {
  if (Status s = faults_->admit(StorageOp::kPutFile, base_->describe(path)); !s.ok()) return s;
  return base_->putFile(path, localSourcePath);
}

std::unique_ptr<state::FileBatch> FaultInjectionStorage::createBatch() {
  return std::make_unique<Batch>(base_->createBatch(), faults_, *base_);
}

Status FaultInjectionStorage::put(const std::string& path, std::string_view bytes) {
  if (Status s = faults_->admit(StorageOp::kPut, base_->describe(path)); !s.ok()) return s;
  return base_->put(path, bytes);
}

state::Result<std::unique_ptr<state::ReadableFile>> FaultInjectionStorage::open(const std::string& path) {
  if (Status s = faults_->admit(StorageOp::kOpen, base_->describe(path)); !s.ok()) return s;
  return base_->open(path);
}

Status FaultInjectionStorage::get(const std::string& path, std::string* out) {
  if (Status s = faults_->admit(StorageOp::kGet, base_->describe(path)); !s.ok()) return s;
  return base_->get(path, out);
}

Status FaultInjectionStorage::getToLocalFile(const std::string& path, const std::string& localDest) {
  if (Status s = faults_->admit(StorageOp::kGet, base_->describe(path)); !s.ok()) return s;
  return base_->getToLocalFile(path, localDest);
}

Status FaultInjectionStorage::fetchToLocal(const std::string& path, const std::string& localDest,
                                           const FetchOptions& options, bool* linked) {
  if (linked != nullptr) *linked = false;
  if (Status s = faults_->admit(StorageOp::kGet, base_->describe(path)); !s.ok()) return s;
  return base_->fetchToLocal(path, localDest, options, linked);
}

state::Result<uint64_t> FaultInjectionStorage::fileSize(const std::string& path) {
  return base_->fileSize(path);
}

bool FaultInjectionStorage::exists(const std::string& path) { return base_->exists(path); }

Status FaultInjectionStorage::list(const std::string& dirPrefix, std::vector<state::FileEntry>* out) {
  if (Status s = faults_->admit(StorageOp::kList, base_->describe(dirPrefix)); !s.ok()) return s;
  return base_->list(dirPrefix, out);
}

Status FaultInjectionStorage::listTemporary(const std::string& dirPrefix,
                                            std::vector<state::FileEntry>* out) {
  if (Status s = faults_->admit(StorageOp::kList, base_->describe(dirPrefix)); !s.ok()) return s;
  return base_->listTemporary(dirPrefix, out);
}

Status FaultInjectionStorage::remove(const std::string& path) {
  if (Status s = faults_->admit(StorageOp::kRemove, base_->describe(path)); !s.ok()) return s;
  return base_->remove(path);
}

Status FaultInjectionStorage::removeTemporary(const std::string& path) {
  if (Status s = faults_->admit(StorageOp::kRemove, base_->describe(path)); !s.ok()) return s;
  return base_->removeTemporary(path);
}

Status FaultInjectionStorage::removeAll(const std::string& dirPrefix) {
  if (Status s = faults_->admit(StorageOp::kRemoveAll, base_->describe(dirPrefix)); !s.ok()) return s;
  return base_->removeAll(dirPrefix);
}

std::string FaultInjectionStorage::describe(const std::string& path) const { return base_->describe(path); }

std::string FaultInjectionStorage::rootUri() const { return base_->rootUri(); }

}  // namespace jobhost::testing
