// The logical entries of a snapshot: see jobhost/state/snapshot_entries.h.
#include "jobhost/state/snapshot_entries.h"

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "jobhost/state/key_group_format.h"
#include "jobhost/state/snapshot_file.h"
#include "rocksdb_checkpoint_copy.h"

namespace jobhost::state {

namespace fs = std::filesystem;

Status OperatorStateReader::readAll(const std::function<Status(const LogicalEntry&)>& fn) {
  for (int kg = 0; kg < maxParallelism(); ++kg)
    if (Status s = readKeyGroup(kg, fn); !s.ok()) return s;
  return Status::OK();
}

namespace {

/// One subtask's handle with its files opened (pinned).
struct Part {
  int subtask = 0;
  KeyGroupRange range;
  const KeyedStateHandle* handle = nullptr;  // into the reader's copy of the operator
  std::vector<std::unique_ptr<ReadableFile>> files;
  std::vector<std::string> where;  // storage.describe() of each file
  std::vector<std::string> paths;  // each file's path in the storage
};

class Reader final : public OperatorStateReader {
 public:
  Reader(CheckpointStorage& st, OperatorSnapshot op, int maxParallelism, std::string tempRoot)
      : st_(st), op_(std::move(op)), maxP_(maxParallelism), tempRoot_(std::move(tempRoot)) {}
  ~Reader() override {
    rocks_.reset();
    if (!tempDir_.empty()) {
      std::error_code ec;
      fs::remove_all(tempDir_, ec);
    }
  }

  Status init() {
    if (maxP_ < 1 || maxP_ > 0x10000) return Status::Corruption("implausible max parallelism " + std::to_string(maxP_));
    for (size_t i = 0; i < op_.states.size(); ++i) stateIndex_[op_.states[i].name] = static_cast<int>(i);
    partOf_.assign(static_cast<size_t>(maxP_), -1);
    for (const auto& sub : op_.subtasks) {
      if (std::holds_alternative<std::monostate>(sub.keyed)) continue;
      Part p;
      p.subtask = sub.index;
      p.handle = &sub.keyed;
      p.range = handleRange(sub.keyed);
      if (!p.range.empty() && (p.range.start < 0 || p.range.end >= maxP_))
        return Status::Corruption("operator '" + op_.uid + "' subtask " + std::to_string(sub.index) + ": key groups " +
                                  std::to_string(p.range.start) + "-" + std::to_string(p.range.end) +
                                  " outside the max parallelism " + std::to_string(maxP_));
      for (const FileRef& f : referencedFiles(sub.keyed)) {
        std::string where = st_.describe(f.path);
        auto file = openSnapshotFile(st_, f);
        if (!file.ok()) return file.status();
        p.files.push_back(std::move(*file));
        p.where.push_back(std::move(where));
        p.paths.push_back(f.path);
      }
      for (int kg = p.range.start; kg <= p.range.end; ++kg) {
        if (partOf_[static_cast<size_t>(kg)] >= 0)
          return Status::Corruption("operator '" + op_.uid + "': key group " + std::to_string(kg) +
                                    " is in the handles of two subtasks");
        partOf_[static_cast<size_t>(kg)] = static_cast<int>(parts_.size());
      }
      parts_.push_back(std::move(p));
    }
    return Status::OK();
  }

  Status readKeyGroup(int kg, const std::function<Status(const LogicalEntry&)>& fn) override {
    if (kg < 0 || kg >= maxP_) return Status::InvalidArgument("key group " + std::to_string(kg) + " out of range");
    int pi = partOf_[static_cast<size_t>(kg)];
    if (pi < 0) return Status::OK();
    Part& p = parts_[static_cast<size_t>(pi)];
    if (const auto* inc = std::get_if<IncrementalStateHandle>(p.handle))
      return readRocks(static_cast<size_t>(pi), *inc, kg, fn);
    for (const KeyGroupsRead& read : keyGroupReads(*p.handle, {kg, kg})) return readFile(p, *read.file, kg, fn);
    return Status::OK();  // in no file of an incremental key-group handle: empty
  }

  const OperatorSnapshot& operatorSnapshot() const override { return op_; }
  int maxParallelism() const override { return maxP_; }
  int subtaskOf(int kg) const override {
    if (kg < 0 || kg >= maxP_) return -1;
    int pi = partOf_[static_cast<size_t>(kg)];
    return pi < 0 ? -1 : parts_[static_cast<size_t>(pi)].subtask;
  }

 private:
  /// Index in op_.states of a state named in a file; -1 if _metadata does not declare it.
  int stateOf(const std::string& name) const {
    auto it = stateIndex_.find(name);
    return it == stateIndex_.end() ? -1 : it->second;
  }

  Status readFile(Part& p, const KeyGroupsStateHandle& h, int kg, const std::function<Status(const LogicalEntry&)>& fn) {
    size_t fi = 0;  // the open file of h (an incremental key-group handle has several)
    while (fi + 1 < p.paths.size() && p.paths[fi] != h.file.path) ++fi;
    std::vector<KeyGroupFileState> fileStates;
    std::vector<int> target;
    return readKeyGroups(*p.files[fi], p.where[fi], h, {kg, kg}, &fileStates, [&](const KeyGroupEntry& e) -> Status {
      if (target.empty()) {
        for (const auto& fst : fileStates) {
          int id = stateOf(fst.name);
          if (id < 0 || op_.states[static_cast<size_t>(id)].kind != fst.kind)
            return Status::Corruption("key-group file " + p.where[fi] + " holds state '" + fst.name +
                                      "', which the snapshot's _metadata does not declare as a " +
                                      stateKindName(fst.kind));
          target.push_back(id);
        }
      }
      LogicalEntry le{target[static_cast<size_t>(e.stateIndex)], kg, e.key, e.userKey, e.value};
      return fn(le);
    });
  }

  Status readRocks(size_t pi, const IncrementalStateHandle& h, int kg,
                   const std::function<Status(const LogicalEntry&)>& fn) {
    if (rocksPart_ != pi) {
      rocks_.reset();  // one copy at a time: disk use is bounded by the largest handle
      rocksPart_ = SIZE_MAX;
      if (tempDir_.empty()) {
        std::string root = tempRoot_;
        if (root.empty()) {
          std::error_code ec;  // the throwing overload ended the process (TMPDIR missing, a file, ...)
          root = fs::temp_directory_path(ec).string();
          if (ec)
            return fromErrno(std::string("cannot use the temporary directory") +
                                 (std::getenv("TMPDIR") ? std::string(" TMPDIR=") + std::getenv("TMPDIR") : "") +
                                 " for a copy of the rocksdb state (set TMPDIR to a writable directory)",
                             ec.value());
        }
        std::string pattern = root + "/jobhost-state-XXXXXX";
        if (::mkdtemp(pattern.data()) == nullptr) return fromErrno("cannot create a temporary directory in " + root, errno);
        tempDir_ = pattern;
      }
      Part& p = parts_[pi];
      std::vector<const ReadableFile*> files;
      for (const auto& f : p.files) files.push_back(f.get());
      for (const auto& name : h.columnFamilies)
        if (stateOf(name) < 0)
          return Status::Corruption("rocksdb checkpoint " + std::to_string(h.checkpointId) + " of operator '" + op_.uid +
                                    "' has column family '" + name + "' with no state descriptor in the metadata");
      auto copy = RocksCheckpointCopy::open(st_, h, files, tempDir_ + "/subtask-" + std::to_string(p.subtask) + "-" +
                                                               std::to_string(++copies_));
      if (!copy.ok()) return copy.status();
      rocks_ = std::move(*copy);
      rocksPart_ = pi;
    }
    for (size_t cf = 0; cf < h.columnFamilies.size(); ++cf) {
      int id = stateOf(h.columnFamilies[cf]);
      bool isMap = op_.states[static_cast<size_t>(id)].kind == StateKind::kMap;
      Status s = rocks_->scan(cf, kg, isMap, [&](std::string_view key, std::string_view userKey, std::string_view value) {
        return fn(LogicalEntry{id, kg, key, userKey, value});
      });
      if (!s.ok()) return s;
    }
    return Status::OK();
  }

  CheckpointStorage& st_;
  const OperatorSnapshot op_;
  const int maxP_;
  const std::string tempRoot_;
  std::string tempDir_;  // private (0700, mkdtemp), created on the first rocksdb handle
  std::vector<Part> parts_;
  std::vector<int> partOf_;  // key group -> index into parts_, -1: no handle
  std::map<std::string, int> stateIndex_;
  size_t rocksPart_ = SIZE_MAX;
  std::unique_ptr<RocksCheckpointCopy> rocks_;
  int copies_ = 0;
};

}  // namespace

Result<std::unique_ptr<OperatorStateReader>> OperatorStateReader::open(CheckpointStorage& storage,
                                                                       const OperatorSnapshot& op, int maxParallelism,
                                                                       const std::string& tempRoot) {
  auto r = std::make_unique<Reader>(storage, op, maxParallelism, tempRoot);
  if (Status s = r->init(); !s.ok()) return s;
  return std::unique_ptr<OperatorStateReader>(std::move(r));
}

}  // namespace jobhost::state
