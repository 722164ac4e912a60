// The RocksDB backend's entry cache: a bounded write-back cache of point entries (ValueState
// values and MapState entries) in front of the DB (state.backend.rocksdb.entry-cache.size).
//
// Why: every state access of the RocksDB backend was a RocksDB call, and the profiles of
// the Nexmark joins and windows (docs/benchmarks.md) spent most of their time in the
// memtable's skip list: a window's entry was Put when the window opened, read when it
// fired and Deleted right after, all within one checkpoint interval. Kafka Streams puts a
// record cache in front of its RocksDB stores for the same reason. Here a read is served
// from the cache when it knows the entry, a write stays in the cache until the next flush,
// and the flush writes the net change of each key in one WriteBatch. An entry the cache
// read as absent from the DB, then put and removed again before a flush, never reaches
// the DB at all (no Put, no tombstone).
//
// The cache is flushed (its dirty entries written, the cache kept) before anything reads
// the DB in bulk: a snapshot's sync phase, mapForEach, a MapState's clear() and
// forEachEntry. When its entries exceed the configured size, it drops the removed ones it
// need not write, or else is flushed and halved (makeRoom).
// It knows nothing of RocksDB: flush() hands each net change to the caller, which writes
// it (rocksdb_backend.cc). ListState values (Merge) are never cached; a MapState entry
// that gets a merge (mapAppend) is written through and forgotten first.
//
// Keys: the state handle (4 bytes, big-endian) then the DB key, so one table serves every
// column family. Single-threaded: the task thread that owns the backend.
//
// Its size counts what it really holds (measured with mallinfo2 in
// EntryCacheTest.ItsMemoryStaysWithinItsConfiguredSize): the hash table's slot array at its
// current capacity (a slot per entry at 7/16 to 7/8 load, whatever the entries hold), the
// heap parts of keys and values (past the inline key and the string's own buffer) and the
// dirty list. The table is never grown past the size: full() already says so when the next
// new key would double it beyond. While the table grows, its old array lives on for the
// moment of the rehash; that transient is not counted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL  // as flat_table.h: the header-only XXH3, inlined
#endif
#include <xxhash.h>

namespace jobhost::state {

class EntryCache {
 public:
  /// A cache key held inline up to 40 bytes: state handle, key group, key and user key of
  /// the usual int64 key with a window as user key (4 + 2 + 1 + 8 + 16) fit.
  static constexpr size_t kInlineKey = 40;
  using Key = absl::InlinedVector<char, kInlineKey>;

  struct Entry {
    std::string value;
    int state = 0;
    bool known = true;      // false: forgotten (the DB is the truth; find() ignores it)
    bool present = false;   // the entry exists (value valid); false: no entry
    bool dirty = false;     // differs from the DB; in dirty_ until the next flush
    bool dbMayHave = true;  // the DB may hold this key (false: known absent there)
    bool listed = false;    // its key is in dirty_ (at most once)
  };

  /// capacityBytes 0 disables the cache (enabled() false; the backend goes to the DB).
  explicit EntryCache(uint64_t capacityBytes) : capacity_(capacityBytes) {}

  bool enabled() const { return capacity_ > 0; }
  /// The memory the cache holds, as counted against its size: table, heap parts, dirty list.
  uint64_t bytes() const { return tableBytes(map_.capacity()) + heapBytes_ + dirty_.capacity() * sizeof(Key); }
  size_t size() const { return map_.size(); }
  size_t dirtyCount() const { return dirty_.size(); }

  /// Builds the cache key of (state, dbKey) into *out.
  static void makeKey(std::string* out, int state, std::string_view dbKey) {
    out->resize(4 + dbKey.size());
    const auto s = static_cast<uint32_t>(state);
    (*out)[0] = static_cast<char>(s >> 24);
    (*out)[1] = static_cast<char>(s >> 16);
    (*out)[2] = static_cast<char>(s >> 8);
    (*out)[3] = static_cast<char>(s);
    if (!dbKey.empty()) std::memcpy(out->data() + 4, dbKey.data(), dbKey.size());
  }
  static std::string_view dbKeyOf(std::string_view cacheKey) { return cacheKey.substr(4); }

  /// The entry the cache knows for `cacheKey`, or nullptr (then read the DB and call
  /// loaded()).
  const Entry* find(std::string_view cacheKey) const {
    auto it = map_.find(cacheKey);
    if (it == map_.end() || !it->second.known) return nullptr;
    return &it->second;
  }

  /// What the DB holds for a key find() did not know: `value`, or nullptr for none.
  void loaded(std::string_view cacheKey, int state, const std::string* value) {
    Entry& e = slot(cacheKey, state);
    e.known = true;
    e.dirty = false;  // a forgotten entry is never dirty (forget() clears it)
    e.present = value != nullptr;
    e.dbMayHave = value != nullptr;
    setValue(e, value != nullptr ? std::string_view(*value) : std::string_view());
  }

  void put(std::string_view cacheKey, int state, std::string_view value) {
    Entry& e = slot(cacheKey, state);
    makeKnown(e);
    e.present = true;
    setValue(e, value);
    markDirty(cacheKey, e);
  }

  /// put() of a key the caller knows the DB does not hold (and the cache holds no
  /// change of): removed again before a flush, it costs the DB nothing.
  void putAbsent(std::string_view cacheKey, int state, std::string_view value) {
    Entry& e = slot(cacheKey, state);
    const bool pending = e.known && e.dirty;
    put(cacheKey, state, value);
    if (!pending) e.dbMayHave = false;
  }

  void remove(std::string_view cacheKey, int state) {
    Entry& e = slot(cacheKey, state);
    makeKnown(e);
    e.present = false;
    setValue(e, {});
    if (e.dbMayHave) {
      markDirty(cacheKey, e);
    } else {
      e.dirty = false;  // never written to the DB and gone again: nothing to write (it may
                        // stay listed; flush() skips entries no longer dirty)
    }
  }

  /// The DB now holds no entry under `cacheKey` (a MapState clear() deleted it there).
  void deletedInDb(std::string_view cacheKey) {
    auto it = map_.find(cacheKey);
    if (it == map_.end()) return;
    Entry& e = it->second;
    e.known = true;
    e.present = false;
    e.dirty = false;
    e.dbMayHave = false;
    setValue(e, {});
  }

  /// Drops what the cache knows of `cacheKey`. A dirty entry must have been written first
  /// (dirtyEntry()).
  void forget(std::string_view cacheKey) {
    auto it = map_.find(cacheKey);
    if (it == map_.end()) return;
    it->second.known = false;
    it->second.dirty = false;
    setValue(it->second, {});
  }

  /// The dirty entry of `cacheKey`, or nullptr. A caller that writes it to the DB itself
  /// (`present` ? Put(value) : Delete) calls forget() once that write succeeded.
  const Entry* dirtyEntry(std::string_view cacheKey) const {
    auto it = map_.find(cacheKey);
    if (it == map_.end() || !it->second.known || !it->second.dirty) return nullptr;
    return &it->second;
  }

  /// Hands every dirty entry's net change to write(state, dbKey, value) (value nullptr:
  /// delete), then calls commit(), which makes them durable in the DB (one batch); only
  /// then are the entries marked clean. They stay cached. If write or commit throws,
  /// nothing changes: every entry stays dirty, to be written by a later flush.
  template <class Write, class Commit>
  void flush(Write&& write, Commit&& commit) {
    // In key order (state handle first, then the DB key, bytewise as RocksDB's default
    // comparator): the memtable's skip list then inserts each key next to the one before
    // it (its insertion hint) instead of searching from the top for every key.
    std::sort(dirty_.begin(), dirty_.end(), [](const Key& a, const Key& b) {
      return std::string_view(a.data(), a.size()) < std::string_view(b.data(), b.size());
    });
    for (const Key& key : dirty_) {
      const std::string_view k(key.data(), key.size());
      auto it = map_.find(k);
      if (it == map_.end() || !it->second.dirty) continue;
      const Entry& e = it->second;
      write(e.state, dbKeyOf(k), e.present ? &e.value : nullptr);
    }
    commit();
    for (const Key& key : dirty_) {
      auto it = map_.find(std::string_view(key.data(), key.size()));
      if (it == map_.end()) continue;
      Entry& e = it->second;
      if (e.dirty) e.dbMayHave = e.present;
      e.dirty = false;
      e.listed = false;
    }
    for (const Key& key : dirty_) heapBytes_ -= keyHeap(key.size());
    dirty_.clear();
  }

  /// True when the cache holds more than its configured size, or when the next new key
  /// would grow the table past it: makeRoom().
  bool full() const {
    const uint64_t held = bytes();
    if (held > capacity_) return true;
    const size_t cap = map_.capacity();
    if (!mayGrow(cap, map_.size())) return false;
    // The next insertion may double the table (absl: capacity 2^k - 1 -> 2^(k+1) - 1).
    return held - tableBytes(cap) + tableBytes(cap * 2 + 1) > capacity_;
  }

  /// Makes room in a full() cache. First it drops what costs nothing to drop: entries
  /// known to be absent and not waiting to be written (a window's or a timer's entry,
  /// removed again; an absent read), forgotten ones, and the dirty list's keys of entries
  /// no longer dirty. When that leaves room (roomAfterDrop), that is all: nothing is
  /// written. Otherwise writeDirty() writes the dirty entries (it calls flush()) and
  /// evictHalf() drops about half of the rest.
  ///
  /// Why first: an event-time job removes every window and timer it creates. Before, the
  /// removed entries and their keys in the dirty list filled the cache until it was
  /// written and halved, which wrote every live entry to the memtable (and later its
  /// delete): NexmarkQ8's join on RocksDB spent nearly half its time in those writes
  /// (docs/benchmarks.md).
  template <class WriteDirty>
  void makeRoom(WriteDirty&& writeDirty) {
    size_t kept = 0;
    for (Key& key : dirty_) {
      auto it = map_.find(std::string_view(key.data(), key.size()));
      if (it != map_.end() && it->second.dirty) {
        if (&dirty_[kept] != &key) dirty_[kept] = std::move(key);
        ++kept;
        continue;
      }
      if (it != map_.end()) it->second.listed = false;
      heapBytes_ -= keyHeap(key.size());
    }
    dirty_.resize(kept);
    // The list's array is counted at its capacity: what it no longer needs goes back.
    if (dirty_.capacity() > 2 * dirty_.size()) dirty_.shrink_to_fit();
    absl::erase_if(map_, [&](const auto& kv) {
      const Entry& e = kv.second;
      if (e.dirty || (e.known && e.present)) return false;
      heapBytes_ -= keyHeap(kv.first.size()) + valueHeap(e.value);
      return true;
    });
    if (roomAfterDrop()) return;
    writeDirty();
    evictHalf();
  }

  /// Drops the forgotten entries and about half of the others (every other one in the
  /// table's order, which is its hash order: no recency kept, none needed to stay cheap).
  /// Only after flush(): a dirty entry dropped would be a lost write.
  void evictHalf() {
    size_t n = 0;
    absl::erase_if(map_, [&](const auto& kv) {
      const Entry& e = kv.second;
      if (e.known && (n++ & 1) == 0) return false;
      heapBytes_ -= keyHeap(kv.first.size()) + valueHeap(e.value);
      return true;
    });
    // The dirty list, empty after the flush, gives its array back. The table keeps its
    // capacity (erased slots are reused) unless the table alone is past the size (a
    // smaller size set, or a table grown at the one-group sizes): then it shrinks to fit.
    dirty_.shrink_to_fit();
    if (bytes() > capacity_) map_.rehash(0);
  }

  /// Forgets everything. Dirty entries are lost: flush() first unless the state is
  /// being replaced (restore).
  void clear() {
    map_.clear();
    dirty_.clear();
    heapBytes_ = 0;
  }

 private:
  /// Whether makeRoom's drop left enough room to skip writing: a table at most half full
  /// (a quarter of its slots free before it is full again) and at most three quarters of
  /// what the size leaves beyond the table in use. Each makeRoom scans the table, so the
  /// next one must be that many operations away, not the next operation.
  bool roomAfterDrop() const {
    const size_t cap = map_.capacity();
    if (map_.size() > cap / 2 || full()) return false;
    const uint64_t table = tableBytes(cap);
    const uint64_t beyondTable = capacity_ > table ? capacity_ - table : 0;
    return bytes() + beyondTable / 4 <= capacity_;
  }

  /// The slot array of a table of `capacity` slots: a slot and a control byte each.
  static uint64_t tableBytes(size_t capacity) {
    return capacity == 0 ? 0 : capacity * (sizeof(typename Table::value_type) + 1) + 16;
  }
  /// Whether inserting one more key may grow a table of `capacity` holding `size`. Erased
  /// slots stay tombstones until a rehash, so absl grows a table whose free slots ran out
  /// whenever more than 25/32 of it is live (below that it rehashes in place), and a
  /// table of up to one group (16 slots) at any size.
  static bool mayGrow(size_t capacity, size_t size) { return capacity <= 16 || size * 32 >= capacity * 25; }
  /// What malloc hands out for n bytes: its chunk header, rounded to 16.
  static uint64_t chunk(uint64_t n) { return std::max<uint64_t>(32, (n + 8 + 15) & ~uint64_t{15}); }
  /// A key's heap part: none inline; past it InlinedVector allocates at least twice the
  /// inline capacity.
  static uint64_t keyHeap(size_t size) {
    return size <= kInlineKey ? 0 : chunk(std::max<size_t>(size, 2 * kInlineKey));
  }
  /// A value's heap part: none within the string's own buffer.
  static uint64_t valueHeap(const std::string& v) {
    return v.capacity() <= std::string().capacity() ? 0 : chunk(v.capacity() + 1);
  }

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }
    size_t operator()(const Key& k) const { return XXH3_64bits(k.data(), k.size()); }
  };
  struct Eq {
    using is_transparent = void;
    static std::string_view view(std::string_view s) { return s; }
    static std::string_view view(const Key& k) { return {k.data(), k.size()}; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return view(a) == view(b);
    }
  };
  using Table = absl::flat_hash_map<Key, Entry, Hash, Eq>;

  /// A forgotten entry becomes known again as "not read from the DB": absent here, the
  /// DB may hold it.
  void makeKnown(Entry& e) {
    if (e.known) return;
    e.known = true;
    e.present = false;
    e.dirty = false;
    e.dbMayHave = true;
    setValue(e, {});
  }

  Entry& slot(std::string_view cacheKey, int state) {
    auto it = map_.find(cacheKey);
    if (it != map_.end()) return it->second;
    Entry& e = map_.emplace(Key(cacheKey.begin(), cacheKey.end()), Entry{}).first->second;
    e.state = state;
    heapBytes_ += keyHeap(cacheKey.size());
    return e;
  }

  void setValue(Entry& e, std::string_view v) {
    heapBytes_ -= valueHeap(e.value);
    if (v.empty() && e.value.capacity() > 64) {
      std::string().swap(e.value);  // a removed entry gives a large buffer back
    } else {
      e.value.assign(v.data(), v.size());
    }
    heapBytes_ += valueHeap(e.value);
  }

  void markDirty(std::string_view cacheKey, Entry& e) {
    e.dirty = true;
    if (e.listed) return;
    e.listed = true;
    dirty_.emplace_back(cacheKey.begin(), cacheKey.end());
    heapBytes_ += keyHeap(cacheKey.size());
  }

  uint64_t capacity_;
  uint64_t heapBytes_ = 0;  // heap parts of the table's keys and values and the dirty list's keys
  Table map_;
  std::vector<Key> dirty_;  // the listed entries' keys (some may be clean again)
};

}  // namespace jobhost::state
