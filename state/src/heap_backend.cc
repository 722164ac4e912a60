// The hashmap (heap) keyed state backend.
//
// State lives in hash tables, one per (state, key group). Snapshots are copy-on-write
// at key-group granularity: snapshotSync() only copies the shared pointers to the
// current tables (O(states × key groups), no entry is copied under the pause); the
// first write to a table that a running snapshot still holds copies that one table.
// The AsyncSnapshot then serialises its frozen tables into a key-group file on a
// background thread while records keep flowing.
//
// Thread-safety: see keyed_backend.h. What the task thread shares with snapshot threads
// is a table's pin count: snapshotSync() (task thread) pins every table it freezes; a
// snapshot unpins a table with a release decrement once it has written it (or when it is
// dropped); the task thread writes into a table only after an acquire load saw it
// unpinned — so every read of a snapshot thread happens before any later write — and
// otherwise writes into a copy. Several snapshots may hold one table (a savepoint during
// a checkpoint): it stays pinned until the last of them is done. shared_ptr only keeps
// the memory alive; its use count decides nothing (a relaxed load, with no ordering).
#include <atomic>
#include <unordered_map>

#include "flat_table.h"
#include "jobhost/state/key_group_format.h"
#include "jobhost/state/keyed_backend.h"
#include "restore_status.h"

namespace jobhost::state {
namespace {

/// Hashes std::string and std::string_view alike, so a MapState lookup by a user key view
/// (a 16-byte window, say: beyond the small-string buffer) allocates nothing.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using UserKeyMap = std::unordered_map<std::string, std::string, StringHash, std::equal_to<>>;

struct KgTable {
  FlatTable values;                                  // Value/List
  std::unordered_map<std::string, UserKeyMap> maps;  // MapState
  /// Snapshots that still read this table (see the file comment).
  std::atomic<uint32_t> pins{0};

  KgTable() = default;
  /// The copy a writer makes of a pinned table: the entries, never the pins.
  KgTable(const KgTable& o) : values(o.values), maps(o.maps) {}
  KgTable& operator=(const KgTable&) = delete;
  bool empty() const { return values.empty() && maps.empty(); }
};
using TablePtr = std::shared_ptr<KgTable>;

/// Ends one snapshot's reading of `t`: everything it read happens before a write that
/// sees the table unpinned.
void unpin(TablePtr& t) {
  if (!t) return;
  t->pins.fetch_sub(1, std::memory_order_release);
  t.reset();
}

struct HeapState {
  StateDescriptorInfo descriptor;
  std::vector<TablePtr> tables;  // index: key group - range.start
};

class HeapSnapshot : public AsyncSnapshot {
 public:
  HeapSnapshot(SnapshotRequest req, KeyGroupRange range, std::vector<StateDescriptorInfo> states,
               std::vector<std::vector<TablePtr>> frozen)
      : req_(std::move(req)), range_(range), states_(std::move(states)), frozen_(std::move(frozen)) {}
  /// A snapshot dropped before (or while) writing unpins what it has not written yet.
  ~HeapSnapshot() override { release(); }

  Result<KeyedStateHandle> run() override {
    std::string path = (req_.exclusiveDir.empty() ? "" : req_.exclusiveDir + "/") + req_.filePrefix + ".kg";
    if (req_.isAborted()) return stop(path);
    auto writer = KeyGroupWriter::create(*req_.storage, path, states_, range_);
    if (!writer.ok()) return writer.status();
    for (int kg = range_.start; kg <= range_.end; ++kg) {
      if (req_.isAborted()) return stop(path);  // the unfinished file is discarded with the writer
      if (Status s = (*writer)->beginKeyGroup(kg); !s.ok()) return s;
      size_t slot = static_cast<size_t>(kg - range_.start);
      for (size_t si = 0; si < frozen_.size(); ++si) {
        TablePtr& t = frozen_[si][slot];
        if (!t) continue;
        for (const auto& e : t->values)
          if (Status s = (*writer)->add(static_cast<int>(si), e.key(), {}, e.value()); !s.ok()) return s;
        for (const auto& [k, m] : t->maps)
          for (const auto& [uk, v] : m)
            if (Status s = (*writer)->add(static_cast<int>(si), k, uk, v); !s.ok()) return s;
        unpin(t);  // written: the task may now modify this table without copying it
      }
    }
    auto handle = (*writer)->finish();
    release();  // writers stop copying
    if (!handle.ok()) return handle.status();
    return KeyedStateHandle(std::move(*handle));
  }

 private:
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
  std::vector<std::vector<TablePtr>> frozen_;
};

class HeapBackend : public KeyedStateBackend {
 public:
  explicit HeapBackend(const BackendOptions& o) : options_(o) {}

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
    key_.assign(key);
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

  bool get(int state, std::string& out) override {
    const KgTable* t = readTable(state);
    if (!t) return false;
    const FlatTable::Entry* e = t->values.find(key_);
    if (e == nullptr) return false;
    out.assign(e->value());
    // A read-modify-write (ValueState::value() then update()) finds the entry again
    // without hashing: nothing moves it before the put() (see LastEntry).
    last_ = {state, t, const_cast<FlatTable::Entry*>(e)};
    return true;
  }
  void put(int state, std::string_view value) override {
    KgTable& t = writeTable(state);
    // Valid only for the table get() looked in: a copy-on-write copy made just now (a
    // snapshot holds the table) has its own entries.
    if (last_.entry != nullptr && last_.state == state && last_.table == &t) {
      last_.entry->assign(value);
      return;
    }
    last_ = {state, &t, &t.values.insertOrAssign(key_, value)};
  }
  void append(int state, std::string_view element) override {
    last_ = {};
    writeTable(state).values.findOrInsert(key_).append(element);
  }
  void clear(int state) override {
    last_ = {};
    const KgTable* r = readTable(state);
    if (!r || (!r->values.find(key_) && !r->maps.count(key_))) return;
    KgTable& t = writeTable(state);
    t.values.erase(key_);
    t.maps.erase(key_);
  }
  bool mapGet(int state, std::string_view userKey, std::string& out) override {
    const KgTable* t = readTable(state);
    if (!t) return false;
    auto it = t->maps.find(key_);
    if (it == t->maps.end()) return false;
    auto jt = it->second.find(userKey);
    if (jt == it->second.end()) return false;
    out = jt->second;
    return true;
  }
  void mapPut(int state, std::string_view userKey, std::string_view value) override {
    UserKeyMap& m = writeTable(state).maps[key_];
    if (auto it = m.find(userKey); it != m.end()) it->second.assign(value);
    else m.emplace(userKey, value);
  }
  void mapRemove(int state, std::string_view userKey) override {
    const KgTable* r = readTable(state);
    if (!r) return;
    auto it = r->maps.find(key_);
    if (it == r->maps.end() || it->second.find(userKey) == it->second.end()) return;
    KgTable& t = writeTable(state);
    auto& m = t.maps[key_];
    m.erase(m.find(userKey));
    if (m.empty()) t.maps.erase(key_);
  }
  void mapForEach(int state, const std::function<bool(std::string_view, std::string_view)>& fn) override {
    const KgTable* t = readTable(state);
    if (!t) return;
    auto it = t->maps.find(key_);
    if (it == t->maps.end()) return;
    for (const auto& [k, v] : it->second)
      if (!fn(k, v)) return;
  }

  void mapAppend(int state, std::string_view userKey, std::string_view element) override {
    UserKeyMap& m = writeTable(state).maps[key_];
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
      for (const auto& [k, m] : tables[slot]->maps)
        for (const auto& [uk, v] : m) fn(kg, k, uk, v);
    }
  }

  Status restore(const RestoreInput& input) override {
    last_ = {};
    for (const auto& d : input.states) registerState(d);
    for (const auto& h : input.handles) {
      const auto* kgh = std::get_if<KeyGroupsStateHandle>(&h);
      if (!kgh) {
        return Status::Incompatible(std::string("the hashmap backend cannot restore a ") + handleTypeName(h) +
                                    "; restore with state.backend.type=rocksdb, or convert the snapshot "
                                    "with `jobhost convert`");
      }
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
      Status s = readKeyGroups(*input.storage, *kgh, options_.range, &fileStates, [&](const KeyGroupEntry& e) {
        if (map.size() != fileStates.size()) {
          if (Status m = mapFileStates(); !m.ok()) return m;
        }
        HeapState& st = states_[static_cast<size_t>(map[static_cast<size_t>(e.stateIndex)])];
        TablePtr& t = st.tables[static_cast<size_t>(e.keyGroup - options_.range.start)];
        if (!t) t = std::make_shared<KgTable>();
        if (st.descriptor.kind == StateKind::kMap) t->maps[std::string(e.key)][std::string(e.userKey)] = e.value;
        else t->values.insertOrAssign(e.key, e.value);
        return Status::OK();
      });
      // States without entries in this range are kept too.
      if (s.ok() && map.size() != fileStates.size()) s = mapFileStates();
      if (!s.ok()) return snapshotFileError(s, *input.storage, kgh->file.path);
    }
    return Status::OK();
  }

  Result<std::unique_ptr<AsyncSnapshot>> snapshotSync(const SnapshotRequest& request) override {
    std::vector<std::vector<TablePtr>> frozen;
    std::vector<StateDescriptorInfo> descriptors;
    frozen.reserve(states_.size());
    for (const auto& s : states_) {
      frozen.push_back(s.tables);  // copies pointers only
      for (const auto& t : s.tables)
        if (t) t->pins.fetch_add(1, std::memory_order_relaxed);  // published to the snapshot thread by its start
      descriptors.push_back(s.descriptor);
    }
    return std::unique_ptr<AsyncSnapshot>(
        new HeapSnapshot(request, options_.range, std::move(descriptors), std::move(frozen)));
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
    TablePtr& t = states_[static_cast<size_t>(state)].tables[slot_];
    if (!t) t = std::make_shared<KgTable>();
    else if (t->pins.load(std::memory_order_acquire) > 0) t = std::make_shared<KgTable>(*t);  // copy-on-write
    return *t;
  }

  BackendOptions options_;
  std::vector<HeapState> states_;
  size_t slot_ = 0;
  std::string key_;
  bool hasKey_ = false;
  /// The current key's Value/List entry found last (get or put) in state `state`'s
  /// table `table`; reset by everything that may erase or move it (another key, clear,
  /// append, restore). Between it and the put() that uses it, no entry is inserted into or
  /// erased from that table (those take another key or reset it), so the FlatTable entry
  /// stays where it is; a copy-on-write copy is another table.
  struct LastEntry {
    int state = -1;
    const KgTable* table = nullptr;
    FlatTable::Entry* entry = nullptr;
  } last_;
};

}  // namespace

Result<std::unique_ptr<KeyedStateBackend>> createHeapBackend(const BackendOptions& options) {
  if (options.range.empty() && options.maxParallelism > 0 && options.range.start != 0)
    return Status::InvalidArgument("empty key-group range");
  return std::unique_ptr<KeyedStateBackend>(new HeapBackend(options));
}

}  // namespace jobhost::state
