// The MapState entries of one (state, key group) in the heap backend, copied on write per
// key (issue 16, item 2).
//
// Each key's user-key map is its own object; a FlatTable maps the key to the map's address
// and the version it was made at (16 bytes, inline in the slot next to a short key). This
// is Flink's CopyOnWriteStateMap for MapState: there the entry's state is the user's map,
// copied with the serializer on its first write after a snapshot. Here freeze() freezes the
// key table (its pages copied on write: flat_table.h) and bumps the version; the first
// write to a key's map made before the last freeze copies that one map and leaves the
// original to the View, so a write after a barrier copies at most one key's map and one
// page of 256 key slots, whatever the number of keys. Maps replaced (or erased) while a
// View may read them are kept ("retired") until prepareWrite(false) says none is read.
//
// Threads, as FlatTable: the owner calls everything but View's members on its thread; a
// View is read on another, ordered before the owner's next in-place write by the caller
// (heap_backend.cc: the table's pin count).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>

#include "flat_table.h"

namespace jobhost::state {

/// A MapState user key, held inline up to 24 bytes (a TimeWindow, the window operator's
/// user key, is 16: one byte beyond std::string's 15-byte buffer, so every new window's key
/// was a malloc and its erase a free). Converts to std::string_view for hashing, comparing
/// and writing.
class UserKey {
 public:
  explicit UserKey(std::string_view s) : bytes_(s.begin(), s.end()) {}
  operator std::string_view() const { return {bytes_.data(), bytes_.size()}; }

 private:
  absl::InlinedVector<char, 24> bytes_;
};
static_assert(sizeof(UserKey) == 32);

/// Hashes and compares user keys by their bytes, whatever holds them (UserKey, std::string,
/// std::string_view), so a lookup allocates nothing. XXH3, inlined, as the key table's
/// FlatTableHash, but all 64 bits: the Swiss table takes its 7-bit tag from the low bits
/// and its probe start from the rest.
struct UserKeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }
};
struct UserKeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

class MapEntries {
 public:
  /// One key's user-key map: Abseil's Swiss table (open addressing, entries inline in one
  /// array). std::unordered_map, before 2026-12-05, allocated a node per entry and divided
  /// by a prime per lookup: 13.5 % of NexmarkQ5 in its lookup and most of the 20 % spent in
  /// malloc and free. Its keys are UserKeys (inline up to 24 bytes), its values strings.
  /// Entries move on rehash: a view of a value is valid until the next call on the state,
  /// as operator.h promises, and no longer.
  using UserMap = absl::flat_hash_map<UserKey, std::string, UserKeyHash, UserKeyEq>;

  /// The keys and maps as they were at freeze(), for a snapshot to read on another thread.
  class View {
   public:
    View() = default;
    size_t size() const { return keys_.size(); }
    /// fn(key, map) for every key.
    template <typename Fn>
    void forEach(Fn&& fn) const {
      for (const auto& e : keys_) fn(e.key(), *refOf(e).map);
    }

   private:
    friend class MapEntries;
    FlatTable::View keys_;
  };

  MapEntries() = default;
  MapEntries(const MapEntries&) = delete;
  MapEntries& operator=(const MapEntries&) = delete;
  ~MapEntries() {
    for (const auto& e : keys_) delete refOf(e).map;
    freeRetired();
  }

  /// Keys with a map.
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }

  /// The map of `key`, or null.
  const UserMap* find(const FlatTable::Key& key) const {
    const FlatTable::Entry* e = keys_.find(key);
    return e == nullptr ? nullptr : refOf(*e).map;
  }

  /// The map of `key` to change, created empty if there is none; copied first if a View
  /// may read it (see the file comment).
  UserMap& writable(const FlatTable::Key& key) {
    size_t index;
    const FlatTable::Entry* e = keys_.find(key, &index);
    if (e == nullptr) {
      auto fresh = std::make_unique<UserMap>();
      keys_.insertOrAssign(key, bytesOf({fresh.get(), version_}));
      return *fresh.release();
    }
    const Ref r = refOf(*e);
    if (!shared_ || r.version >= version_) return *r.map;  // no View has it: in place
    auto copy = std::make_unique<UserMap>(*r.map);
    retired_.reserve(retired_.size() + 1);  // nothing below throws once the slot names the copy
    keys_.writableAt(index).assign(bytesOf({copy.get(), version_}));
    retired_.push_back(r.map);
    ++copies_;
    return *copy.release();
  }

  /// Removes `key` and its map; false if there was none.
  bool erase(const FlatTable::Key& key) {
    const FlatTable::Entry* e = keys_.find(key);
    if (e == nullptr) return false;
    const Ref r = refOf(*e);
    const bool viewed = shared_ && r.version < version_;
    if (viewed) retired_.reserve(retired_.size() + 1);
    keys_.erase(key);  // may copy pages (and throw): the map is still the table's until it succeeded
    if (viewed) retired_.push_back(r.map);
    else delete r.map;
    return true;
  }

  /// fn(key, map) for every key, on the owner's thread.
  template <typename Fn>
  void forEach(Fn&& fn) const {
    for (const auto& e : keys_) fn(e.key(), *refOf(e).map);
  }

  /// A View of the keys and maps now; later writes copy what they touch.
  View freeze() {
    ++version_;
    shared_ = true;
    View v;
    v.keys_ = keys_.freeze();
    return v;
  }
  /// As FlatTable::prepareWrite: whether a View may still be read; false frees the maps
  /// (and key pages) earlier writes retired, and writes go in place again.
  void prepareWrite(bool viewsRead) {
    shared_ = viewsRead;
    keys_.prepareWrite(viewsRead);
    if (!viewsRead) freeRetired();
  }

  /// Maps copied on write since the table was made, and retired ones not yet freed (tests).
  uint64_t copies() const { return copies_; }
  size_t retiredMaps() const { return retired_.size(); }

 private:
  /// What a key's slot holds: its map and the version (freezes) it was made at.
  struct Ref {
    UserMap* map;
    uint64_t version;
  };
  static_assert(std::is_trivially_copyable_v<Ref> && sizeof(Ref) == 16);
  static Ref refOf(const FlatTable::Entry& e) {
    Ref r;
    std::memcpy(&r, e.value().data(), sizeof r);
    return r;
  }
  struct RefBytes {
    char b[sizeof(Ref)];
    operator std::string_view() const { return {b, sizeof b}; }
  };
  static RefBytes bytesOf(const Ref& r) {
    RefBytes out;
    std::memcpy(out.b, &r, sizeof r);
    return out;
  }
  void freeRetired() {
    for (UserMap* m : retired_) delete m;
    retired_.clear();
  }

  FlatTable keys_;            // key -> Ref
  uint64_t version_ = 0;      // bumped by freeze()
  bool shared_ = false;       // a View may be read (prepareWrite)
  uint64_t copies_ = 0;
  std::vector<UserMap*> retired_;
};

}  // namespace jobhost::state
