// The hashmap (heap) keyed state backend.
//
// State lives in hash tables, one per (state, key group). Snapshots are copy-on-write:
// snapshotSync() pins each table and freezes it (O(states × key groups), no entry is
// copied under the pause); a write while a snapshot still reads the table copies only the
// page of 256 slots it changes (FlatTable, Value/List state) or, for MapState, the one key's
// map it changes (MapEntries). The AsyncSnapshot then serialises what it froze into a
// key-group file on a background thread while records keep flowing.
//
// Incremental checkpoints (state.backend.incremental=true, checkpoints only): every write
// stamps its key group with the current snapshot epoch; a checkpoint writes, into one new
// file in the shared directory, only the key groups stamped after the epoch of the last
// *completed* incremental checkpoint (the base), and references the base's files for the
// others (IncrementalKeyGroupsStateHandle). A checkpoint becomes the base when it
// completes; an aborted one never does, so nothing references what it wrote. After a
// restore there is no base: the first checkpoint writes everything (a restored backend
// depends on no file of the snapshot it came from, as the rocksdb backend). Savepoints are
// always self-contained KeyGroupsStateHandles.
//
// Thread-safety: see keyed_backend.h. What the task thread shares with snapshot threads
// is a table's pin count: snapshotSync() (task thread) pins every table it freezes; a
// snapshot unpins a table with a release decrement once it has written it (or when it is
// dropped); the task thread writes in place into a table's pages (and frees the pages it
// and maps replaced since) only after an acquire load saw it unpinned — so every read of a snapshot
// thread happens before any later in-place write — and otherwise copies what it changes.
// Several snapshots may hold one table (a savepoint during a checkpoint): it stays pinned
// until the last of them is done, and each freeze makes the pages older than it copied on
// their first write. shared_ptr only keeps memory alive; its use count decides nothing.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include "flat_table.h"
#include "map_entries.h"
#include "random_id.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/keyed_backend.h"
#include "jobhost/state/snapshot_file.h"

namespace jobhost::state {
namespace {

using UserKeyMap = MapEntries::UserMap;

/// The entries of one state in one key group.
struct KgTable {
  FlatTable values;  // Value/List: copy-on-write per page (flat_table.h)
  MapEntries maps;   // MapState: copy-on-write per key (map_entries.h)
  /// Snapshots that still read this table (see the file comment).
  std::atomic<uint32_t> pins{0};
  /// Task thread only: frozen by a snapshot since a write last found it unpinned, so the
  /// next write must ask whether a snapshot still reads it (ownTable). False: in place.
  bool frozen = false;

  bool empty() const { return values.empty() && maps.empty(); }
};
using TablePtr = std::shared_ptr<KgTable>;

/// What a snapshot holds of one table: the table (pinned) and its entries as frozen.
struct FrozenTable {
  TablePtr table;
  FlatTable::View values;
  MapEntries::View maps;
};

/// Ends one snapshot's reading of a table: everything it read happens before a write that
/// sees the table unpinned.
void unpin(FrozenTable& f) {
  if (!f.table) return;
  f.values = {};
  f.maps = {};
  f.table->pins.fetch_sub(1, std::memory_order_release);
  f.table.reset();
}

struct HeapState {
  StateDescriptorInfo descriptor;
  std::vector<TablePtr> tables;  // index: key group - range.start
};

/// What an incremental checkpoint writes and references, decided in snapshotSync().
struct IncrementalPlan {
  std::string backendId;
  /// The base's handle (empty parts when there is none).
  IncrementalKeyGroupsStateHandle base;
  /// Per key group of the range: kWrite (changed since the base), kEmpty (changed and
  /// empty now: in no file, so no file is kept alive for it), or kKeep: read it from
  /// base.parts[baseIndex] (-1: the base has it in no file: empty).
  enum : char { kKeep = 0, kWrite = 1, kEmpty = 2 };
  std::vector<char> changed;
  std::vector<int> baseIndex;
  /// Filled by run() once the files are durable; read by notifyCheckpointComplete()
  /// (after run() returned: keyed_backend.h), under the mutex all the same.
  std::mutex mu;
  std::optional<IncrementalKeyGroupsStateHandle> written;
};

/// Appends key group kg to the runs, extending the last run when adjacent.
void addToRuns(std::vector<KeyGroupRange>& runs, int kg) {
  if (!runs.empty() && runs.back().end + 1 == kg) ++runs.back().end;
  else runs.push_back({kg, kg});
}

class HeapSnapshot : public AsyncSnapshot {
 public:
  HeapSnapshot(SnapshotRequest req, KeyGroupRange range, std::vector<StateDescriptorInfo> states,
               std::vector<std::vector<FrozenTable>> frozen, std::shared_ptr<IncrementalPlan> plan)
      : req_(std::move(req)),
        range_(range),
        states_(std::move(states)),
        frozen_(std::move(frozen)),
        plan_(std::move(plan)) {}
  /// A snapshot dropped before (or while) writing unpins what it has not written yet.
  ~HeapSnapshot() override { release(); }

  Result<KeyedStateHandle> run() override {
    if (!plan_) {
      std::string path = (req_.exclusiveDir.empty() ? "" : req_.exclusiveDir + "/") + req_.filePrefix + ".kg";
      auto h = writeFile(path, nullptr);
      if (!h.ok()) return h.status();
      return KeyedStateHandle(std::move(*h));
    }
    return runIncremental();
  }

 private:
  Result<KeyedStateHandle> runIncremental() {
    IncrementalKeyGroupsStateHandle h;
    h.backendId = plan_->backendId;
    h.checkpointId = req_.checkpointId;
    h.range = range_;
    KeyGroupsFilePart fresh;
    std::vector<KeyGroupsFilePart> kept(plan_->base.parts.size());
    for (int kg = range_.start; kg <= range_.end; ++kg) {
      size_t slot = static_cast<size_t>(kg - range_.start);
      if (plan_->changed[slot] == IncrementalPlan::kWrite) addToRuns(fresh.keyGroups, kg);
      else if (plan_->changed[slot] == IncrementalPlan::kEmpty) continue;
      else if (int b = plan_->baseIndex[slot]; b >= 0) addToRuns(kept[static_cast<size_t>(b)].keyGroups, kg);
    }
    if (!fresh.keyGroups.empty()) {
      auto path = freeSharedName();
      if (!path.ok()) return path.status();
      auto file = writeFile(*path, &plan_->changed);
      if (!file.ok()) return file.status();
      fresh.file = std::move(*file);
      fresh.createdByCheckpoint = req_.checkpointId;
      h.parts.push_back(std::move(fresh));
    }
    release();
    for (size_t b = 0; b < kept.size(); ++b) {
      if (kept[b].keyGroups.empty()) continue;  // every key group it held changed since
      kept[b].file = plan_->base.parts[b].file;
      kept[b].createdByCheckpoint = plan_->base.parts[b].createdByCheckpoint;
      h.parts.push_back(std::move(kept[b]));
    }
    std::lock_guard<std::mutex> lock(plan_->mu);
    plan_->written = h;
    return KeyedStateHandle(std::move(h));
  }

  /// A name in the shared directory no file has: "<prefix>-<checkpoint>.kg", suffixed if
  /// an earlier attempt of this checkpoint id left one (an aborted run's file stays until
  /// the registry collects it).
  Result<std::string> freeSharedName() {
    const std::string base = req_.sharedDir + "/" + req_.filePrefix + "-" + std::to_string(req_.checkpointId);
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string candidate = base + (attempt ? "-" + std::to_string(attempt) : "") + ".kg";
      if (!req_.storage->exists(candidate)) return candidate;
    }
    return Status::IOError("cannot find a free shared file name for " + req_.storage->describe(base));
  }

  /// Writes the frozen tables of the key groups `only` marks kWrite (all when null) into
  /// a new key-group file over the whole range (the others empty).
  Result<KeyGroupsStateHandle> writeFile(const std::string& path, const std::vector<char>* only) {
    if (req_.isAborted()) return stop(path);
    auto created = KeyGroupWriter::create(*req_.storage, path, states_, range_);
    if (!created.ok()) return created.status();
    KeyGroupWriter& writer = **created;
    for (int kg = range_.start; kg <= range_.end; ++kg) {
      if (req_.isAborted()) return stop(path);  // the unfinished file is discarded with the writer
      if (Status s = writer.beginKeyGroup(kg); !s.ok()) return s;
      size_t slot = static_cast<size_t>(kg - range_.start);
      if (only && (*only)[slot] != IncrementalPlan::kWrite) continue;
      for (size_t si = 0; si < frozen_.size(); ++si) {
        FrozenTable& t = frozen_[si][slot];
        if (!t.table) continue;
        for (const auto& e : t.values)
          if (Status s = writer.add(static_cast<int>(si), e.key(), {}, e.value()); !s.ok()) return s;
        Status failed;
        t.maps.forEach([&](std::string_view k, const UserKeyMap& m) {
          for (const auto& [uk, v] : m) {
            if (!failed.ok()) return;
            failed = writer.add(static_cast<int>(si), k, uk, v);
          }
        });
        if (!failed.ok()) return failed;
        unpin(t);  // written: the task may now modify this table without copying it
      }
    }
    auto handle = writer.finish();
    release();  // writers stop copying
    return handle;
  }

  /// Gives up an aborted snapshot: releases the frozen tables (writers stop copying).
  Status stop(const std::string& path) {
    release();
    return req_.abortedError(req_.storage->describe(path));
  }
  void release() {
    for (auto& tables : frozen_)
      for (auto& t : tables) unpin(t);
    frozen_.clear();
  }

  SnapshotRequest req_;
  KeyGroupRange range_;
  std::vector<StateDescriptorInfo> states_;
  std::vector<std::vector<FrozenTable>> frozen_;
  std::shared_ptr<IncrementalPlan> plan_;  // null: a full, self-contained snapshot
};

class HeapBackend : public KeyedStateBackend {
 public:
  explicit HeapBackend(const BackendOptions& o)
      : options_(o), modified_(static_cast<size_t>(o.range.size()), 0), backendId_(randomHexId(8)) {}

  int registerState(const StateDescriptorInfo& d) override {
    for (size_t i = 0; i < states_.size(); ++i) {
      if (states_[i].descriptor.name != d.name) continue;
      checkCompatible(states_[i].descriptor, d);
      states_[i].descriptor = d;
      return static_cast<int>(i);
    }
    HeapState s;
    s.descriptor = d;
    s.tables.resize(static_cast<size_t>(options_.range.size()));
    states_.push_back(std::move(s));
    return static_cast<int>(states_.size() - 1);
  }

  void setCurrentKey(int keyGroup, std::string_view key) override {
    slot_ = static_cast<size_t>(keyGroup - options_.range.start);
    key_.resize(key.size());  // same length as the last key (the common case): no-op
    if (!key.empty()) std::memcpy(key_.data(), key.data(), key.size());  // faster than assign()
    keyHash_ = FlatTable::hashOf(key_);  // once for every table the key is looked up in
    hasKey_ = true;
    last_ = {};
  }
  const KeyGroupRange& range() const override { return options_.range; }
  BackendType type() const override { return BackendType::kHashMap; }
  std::vector<StateDescriptorInfo> states() const override {
    std::vector<StateDescriptorInfo> out;
    for (const auto& s : states_) out.push_back(s.descriptor);
    return out;
  }

  using KeyedStateAccess::get;
  using KeyedStateAccess::mapGet;
  bool get(int state, std::string_view* out) override {
    const KgTable* t = readTable(state);
    if (!t) return false;
    size_t index;
    const FlatTable::Entry* e = t->values.find(current(), &index);
    if (e == nullptr) return false;
    *out = e->value();  // in the slot (or its block) until the table changes
    // A read-modify-write (ValueState::value() then update()) finds the entry again
    // without hashing: nothing moves it before the put() (see LastEntry).
    last_ = {state, t, index};
    return true;
  }
  void put(int state, std::string_view value) override {
    KgTable& t = writeTable(state);
    if (last_.table != nullptr && last_.state == state && last_.table == &t) {
      t.values.writableAt(last_.index).assign(value);  // copies the page first if a snapshot reads it
      return;
    }
    size_t index;
    t.values.insertOrAssign(current(), value, &index);
    last_ = {state, &t, index};
  }
  void append(int state, std::string_view element) override {
    last_ = {};
    writeTable(state).values.findOrInsert(current()).append(element);
  }
  void clear(int state) override {
    last_ = {};
    const KgTable* r = readTable(state);
    if (!r || (!r->values.find(current()) && !r->maps.find(current()))) return;
    KgTable& t = writeTable(state);
    t.values.erase(current());
    t.maps.erase(current());
  }
  bool mapGet(int state, std::string_view userKey, std::string_view* out) override {
    const KgTable* t = readTable(state);
    const UserKeyMap* m = t ? t->maps.find(current()) : nullptr;
    if (!m) return false;
    auto jt = m->find(userKey);
    if (jt == m->end()) return false;
    *out = jt->second;
    return true;
  }
  void mapPut(int state, std::string_view userKey, std::string_view value) override {
    UserKeyMap& m = writeTable(state).maps.writable(current());
    if (auto it = m.find(userKey); it != m.end()) it->second.assign(value);
    else m.emplace(userKey, value);
  }
  void mapRemove(int state, std::string_view userKey) override {
    const KgTable* r = readTable(state);
    const UserKeyMap* has = r ? r->maps.find(current()) : nullptr;
    if (!has || has->find(userKey) == has->end()) return;
    MapEntries& maps = writeTable(state).maps;
    if (has->size() == 1) {  // its last entry: the key goes (no copy of a map about to be dropped)
      maps.erase(current());
      return;
    }
    UserKeyMap& m = maps.writable(current());
    m.erase(m.find(userKey));
  }
  void mapForEach(int state, const std::function<bool(std::string_view, std::string_view)>& fn) override {
    const KgTable* t = readTable(state);
    const UserKeyMap* m = t ? t->maps.find(current()) : nullptr;
    if (!m) return;
    for (const auto& [k, v] : *m)
      if (!fn(k, v)) return;
  }

  void mapAppend(int state, std::string_view userKey, std::string_view element) override {
    UserKeyMap& m = writeTable(state).maps.writable(current());
    if (auto it = m.find(userKey); it != m.end()) it->second.append(element);
    else m.emplace(userKey, element);
  }

  void forEachEntry(int state, const std::function<void(int, std::string_view, std::string_view, std::string_view)>&
                                   fn) override {
    if (state < 0 || static_cast<size_t>(state) >= states_.size()) throw StateError("unknown state handle");
    const auto& tables = states_[static_cast<size_t>(state)].tables;
    for (size_t slot = 0; slot < tables.size(); ++slot) {
      if (!tables[slot]) continue;
      const int kg = options_.range.start + static_cast<int>(slot);
      for (const auto& e : tables[slot]->values) fn(kg, e.key(), {}, e.value());
      tables[slot]->maps.forEach([&](std::string_view k, const UserKeyMap& m) {
        for (const auto& [uk, v] : m) fn(kg, k, uk, v);
      });
    }
  }

  Status restore(const RestoreInput& input) override {
    last_ = {};
    for (const auto& d : input.states) registerState(d);
    // A restored backend is a new lineage: its first incremental checkpoint writes
    // everything, and no later one references the restored files.
    base_.reset();
    pending_.clear();
    backendId_ = randomHexId(8);
    for (const auto& h : input.handles) {
      if (std::holds_alternative<IncrementalStateHandle>(h)) {
        return Status::Incompatible(std::string("the hashmap backend cannot restore a ") + handleTypeName(h) +
                                    "; restore with state.backend.type=rocksdb, or convert the snapshot "
                                    "with `jobhost convert`");
      }
      for (const KeyGroupsRead& read : keyGroupReads(h, options_.range)) {
        const KeyGroupsStateHandle* kgh = read.file;
        std::vector<KeyGroupFileState> fileStates;
        std::vector<int> map;  // file state index -> our state index
        // Every state of the file gets a slot, with the kind the file records: one without
        // a descriptor in the metadata (older metadata) is registered by name and kind, is
        // written by every later snapshot, and a job declaring it again reads it.
        auto mapFileStates = [&]() -> Status {
          map.clear();
          for (const auto& fst : fileStates) {
            int idx = -1;
            for (size_t i = 0; i < states_.size(); ++i)
              if (states_[i].descriptor.name == fst.name) idx = static_cast<int>(i);
            if (idx < 0) {
              StateDescriptorInfo d;
              d.name = fst.name;
              d.kind = fst.kind;
              idx = registerState(d);
            } else if (states_[static_cast<size_t>(idx)].descriptor.kind != fst.kind) {
              return Status::Corruption("key-group file " + input.storage->describe(kgh->file.path) +
                                        " holds state '" + fst.name + "' as a " + stateKindName(fst.kind) +
                                        ", but the snapshot's metadata declares a " +
                                        stateKindName(states_[static_cast<size_t>(idx)].descriptor.kind) +
                                        "; the snapshot is inconsistent: restore from another checkpoint or "
                                        "savepoint");
            }
            map.push_back(idx);
          }
          return Status::OK();
        };
        Status s = readKeyGroups(*input.storage, *kgh, read.keyGroups, &fileStates, [&](const KeyGroupEntry& e) {
          if (map.size() != fileStates.size()) {
            if (Status m = mapFileStates(); !m.ok()) return m;
          }
          HeapState& st = states_[static_cast<size_t>(map[static_cast<size_t>(e.stateIndex)])];
          KgTable& t = ownTable(st.tables[static_cast<size_t>(e.keyGroup - options_.range.start)]);
          if (st.descriptor.kind == StateKind::kMap) t.maps.writable(e.key)[e.userKey] = e.value;
          else t.values.insertOrAssign(e.key, e.value);
          return Status::OK();
        });
        // States without entries in this range are kept too.
        if (s.ok() && map.size() != fileStates.size()) s = mapFileStates();
        if (!s.ok()) return snapshotFileError(s, *input.storage, kgh->file.path);
      }
    }
    return Status::OK();
  }

  Result<std::unique_ptr<AsyncSnapshot>> snapshotSync(const SnapshotRequest& request) override {
    const uint64_t epoch = epoch_++;  // writes from now on are stamped after this snapshot
    std::shared_ptr<IncrementalPlan> plan;
    if (options_.incremental && request.format == SnapshotFormat::kNative && !request.sharedDir.empty()) {
      plan = std::make_shared<IncrementalPlan>();
      plan->backendId = backendId_;
      plan->changed.assign(modified_.size(), IncrementalPlan::kWrite);
      plan->baseIndex.assign(modified_.size(), -1);
      if (base_) {
        plan->base = base_->handle;
        for (size_t slot = 0; slot < modified_.size(); ++slot) {
          if (modified_[slot] <= base_->epoch) plan->changed[slot] = IncrementalPlan::kKeep;
          plan->baseIndex[slot] = base_->partOf[slot];
        }
      }
      if (base_) rewriteMostlyDeadFiles(*plan);
      for (size_t slot = 0; slot < modified_.size(); ++slot) {
        if (plan->changed[slot] != IncrementalPlan::kWrite) continue;
        bool empty = true;
        for (const auto& s : states_)
          if (s.tables[slot] && !s.tables[slot]->empty()) empty = false;
        if (empty) plan->changed[slot] = IncrementalPlan::kEmpty;
      }
      pending_[request.checkpointId] = {epoch, plan};
    }
    // O(states × key groups), no entry copied: each table is pinned and frozen (its page
    // directory and map pointer taken); the writes after this copy what they change.
    std::vector<std::vector<FrozenTable>> frozen;
    std::vector<StateDescriptorInfo> descriptors;
    frozen.reserve(states_.size());
    for (const auto& s : states_) {
      auto& mine = frozen.emplace_back(s.tables.size());
      for (size_t slot = 0; slot < mine.size(); ++slot) {
        const TablePtr& t = s.tables[slot];
        // A table this snapshot does not write (unchanged since the base) is neither read nor pinned.
        if (!t || (plan && plan->changed[slot] != IncrementalPlan::kWrite)) continue;
        if (t->pins.load(std::memory_order_acquire) == 0) {  // frees retired pages and maps
          t->values.prepareWrite(false);
          t->maps.prepareWrite(false);
        }
        t->pins.fetch_add(1, std::memory_order_relaxed);  // published to the snapshot thread by its start
        t->frozen = true;
        mine[slot] = {t, t->values.freeze(), t->maps.freeze()};
      }
      descriptors.push_back(s.descriptor);
    }
    return std::unique_ptr<AsyncSnapshot>(
        new HeapSnapshot(request, options_.range, std::move(descriptors), std::move(frozen), std::move(plan)));
  }

  void notifyCheckpointComplete(uint64_t checkpointId) override {
    auto it = pending_.find(checkpointId);
    if (it == pending_.end()) return;
    std::optional<IncrementalKeyGroupsStateHandle> written;
    {
      std::lock_guard<std::mutex> lock(it->second.plan->mu);
      written = std::move(it->second.plan->written);
    }
    if (written) {
      Base b;
      b.epoch = it->second.epoch;
      b.partOf.assign(modified_.size(), -1);
      for (size_t p = 0; p < written->parts.size(); ++p)
        for (const auto& run : written->parts[p].keyGroups)
          for (int kg = run.start; kg <= run.end; ++kg)
            b.partOf[static_cast<size_t>(kg - options_.range.start)] = static_cast<int>(p);
      b.handle = std::move(*written);
      base_ = std::move(b);
    }
    // Older pending checkpoints can no longer become the base.
    pending_.erase(pending_.begin(), std::next(it));
  }

  void notifyCheckpointAborted(uint64_t checkpointId) override { pending_.erase(checkpointId); }

  /// Bounds the space a chain of incremental checkpoints keeps alive: a file stays
  /// referenced only while at least half of its entries' bytes (not counting the header
  /// and the end of each key group, kKeyGroupEndBytes) are key groups still read from it;
  /// otherwise this checkpoint writes those key groups again and drops the file. Without
  /// it, a job whose updates move across the key groups could keep one mostly-dead file
  /// per checkpoint alive. (RocksDB's compactions bound its SST set the same way.)
  void rewriteMostlyDeadFiles(IncrementalPlan& plan) const {
    const auto& parts = plan.base.parts;
    std::vector<uint64_t> live(parts.size(), 0);
    for (size_t slot = 0; slot < plan.changed.size(); ++slot) {
      int b = plan.baseIndex[slot];
      if (plan.changed[slot] != IncrementalPlan::kKeep || b < 0) continue;
      const KeyGroupsStateHandle& f = parts[static_cast<size_t>(b)].file;
      const size_t i = static_cast<size_t>(options_.range.start + static_cast<int>(slot) - f.range.start);
      const uint64_t end = i + 1 < f.offsets.size() ? f.offsets[i + 1] : f.file.size;
      const uint64_t groupBytes = end - f.offsets[i];
      live[static_cast<size_t>(b)] += groupBytes > kKeyGroupEndBytes ? groupBytes - kKeyGroupEndBytes : 0;
    }
    auto entryBytes = [](const KeyGroupsStateHandle& f) {
      const uint64_t fixed =
          (f.offsets.empty() ? f.file.size : f.offsets.front()) + f.offsets.size() * kKeyGroupEndBytes;
      return f.file.size > fixed ? f.file.size - fixed : 0;
    };
    for (size_t slot = 0; slot < plan.changed.size(); ++slot) {
      int b = plan.baseIndex[slot];
      if (plan.changed[slot] == IncrementalPlan::kKeep && b >= 0 &&
          2 * live[static_cast<size_t>(b)] < entryBytes(parts[static_cast<size_t>(b)].file))
        plan.changed[slot] = IncrementalPlan::kWrite;
    }
  }

  uint64_t approximateEntries() const override {
    uint64_t n = 0;
    for (const auto& s : states_)
      for (const auto& t : s.tables)
        if (t) n += t->values.size() + t->maps.size();
    return n;
  }

 private:
  static void checkCompatible(const StateDescriptorInfo& have, const StateDescriptorInfo& want) {
    if (have.kind != want.kind)
      throw StateError("state '" + want.name + "' is a " + stateKindName(have.kind) + " in the snapshot, but the job declares a " +
                       stateKindName(want.kind));
    // A state restored from a key-group file alone (no descriptor in older metadata)
    // carries only its name and kind; the job's declaration supplies the serializers.
    if (have.valueSerializer.empty()) return;
    if (have.valueSerializer != want.valueSerializer || have.valueSerializerVersion != want.valueSerializerVersion)
      throw StateError("state '" + want.name + "' was written with value serializer " + have.valueSerializer + " v" +
                       std::to_string(have.valueSerializerVersion) + ", the job declares " + want.valueSerializer +
                       " v" + std::to_string(want.valueSerializerVersion));
  }
  FlatTable::Key current() const { return {key_, keyHash_}; }
  void requireKey(int state) const {
    if (!hasKey_) throw StateError("keyed state accessed outside a keyed context");
    if (state < 0 || static_cast<size_t>(state) >= states_.size()) throw StateError("unknown state handle");
  }
  const KgTable* readTable(int state) const {
    requireKey(state);
    return states_[static_cast<size_t>(state)].tables[slot_].get();
  }
  KgTable& writeTable(int state) {
    requireKey(state);
    modified_[slot_] = epoch_;
    return ownTable(states_[static_cast<size_t>(state)].tables[slot_]);
  }
  /// The table to write into: created if there is none; otherwise told whether a snapshot
  /// still reads it (its pages and maps are then copied on write, not written in place).
  static KgTable& ownTable(TablePtr& t) {
    if (t && !t->frozen) [[likely]]
      return *t;  // no snapshot froze it since it was last found unpinned
    return ownTableSlow(t);
  }
  [[gnu::noinline]] static KgTable& ownTableSlow(TablePtr& t) {
    if (!t) {
      t = std::make_shared<KgTable>();
      return *t;
    }
    const bool shared = t->pins.load(std::memory_order_acquire) > 0;
    t->values.prepareWrite(shared);
    t->maps.prepareWrite(shared);
    t->frozen = shared;
    return *t;
  }

  BackendOptions options_;
  std::vector<HeapState> states_;
  /// Incremental checkpoints (see the file comment): per key group, the epoch of its last
  /// write; the epoch the next snapshot takes; the last completed incremental checkpoint
  /// and the ones not yet completed (by checkpoint id).
  std::vector<uint64_t> modified_;
  uint64_t epoch_ = 1;
  struct Base {
    uint64_t epoch = 0;
    std::vector<int> partOf;  // per key group: index into handle.parts, -1: in none (empty)
    IncrementalKeyGroupsStateHandle handle;
  };
  std::optional<Base> base_;
  struct Pending {
    uint64_t epoch = 0;
    std::shared_ptr<IncrementalPlan> plan;
  };
  std::map<uint64_t, Pending> pending_;
  std::string backendId_;
  size_t slot_ = 0;
  std::string key_;
  uint32_t keyHash_ = 0;  // FlatTable's hash of key_
  bool hasKey_ = false;
  /// The slot of the current key's Value/List entry found last (get or put) in state
  /// `state`'s table `table`; reset by everything that may erase or move it (another key,
  /// clear, append, restore). Between it and the put() that uses it, no entry is inserted
  /// into or erased from that table (those take another key or reset it), so the entry
  /// stays in its slot (a page copied on write keeps its slots' indexes).
  struct LastEntry {
    int state = -1;
    const KgTable* table = nullptr;
    size_t index = 0;
  } last_;
};

}  // namespace

Result<std::unique_ptr<KeyedStateBackend>> createHeapBackend(const BackendOptions& options) {
  if (options.range.empty() && options.maxParallelism > 0 && options.range.start != 0)
    return Status::InvalidArgument("empty key-group range");
  return std::unique_ptr<KeyedStateBackend>(new HeapBackend(options));
}

}  // namespace jobhost::state
