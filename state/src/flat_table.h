// FlatTable: an open-addressing hash table from byte-string keys to byte-string values, the
// heap backend's Value/List entries of one state and key group (heap_backend.cc).
//
// Why not std::unordered_map<std::string, std::string> or absl::flat_hash_map of the same
// (libabsl-dev is not used here): both keep two std::string objects per entry, 64 bytes even
// when the bytes fit their small-string buffers (absl: 64-byte slots + a control byte, ~108
// bytes per entry at the load of 10M keys in 128 key groups); unordered_map adds a node
// allocation, a next pointer and a bucket array (105 bytes per entry there). Here a slot is
// 32 bytes in all: a key and value whose lengths add up to at most kInlineBytes (25) live
// inside it (an 8-byte key with an 8-byte value, the common case, allocates nothing); longer
// ones move to one heap block per entry holding both, sized exactly on assign() and doubled
// on append() so that a growing list is copied O(log n) times. The waste of a spilled entry
// is the block's malloc header, a growing value's unused capacity (less than half of the
// block) and its slot's unused inline bytes.
//
// Layout: linear probing over a power-of-two array of slots (calloc: zeroed slots are empty),
// grown ×2 above 7/8 load, backward-shift deletion (no tombstones, so probe sequences stay as
// short after erases as after inserts). Each slot keeps 32 bits of the key's hash: they pick
// the home slot and are compared before the key bytes.
//
// Entry pointers (from find() and findOrInsert()) stay valid until the next findOrInsert()
// that inserts or the next erase() (either may move slots); Entry::assign()/append() never
// move an entry. A copy is deep and has its own entries. Not thread-safe; const members may
// run concurrently with each other.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>

namespace jobhost::state {

/// libstdc++'s std::hash of bytes (64-bit Murmur2), folded to 32 bits. Independent of
/// keyGroupFor's hash, which all keys of one table share modulo the key-group count.
struct FlatTableHash {
  uint32_t operator()(std::string_view key) const {
    const uint64_t h = std::hash<std::string_view>()(key);
    return static_cast<uint32_t>(h ^ (h >> 32));
  }
};

/// `Hash` is a parameter only so that tests can force collisions.
template <class Hash = FlatTableHash>
class BasicFlatTable {
 public:
  static constexpr size_t kInlineBytes = 25;

  /// One key and its value, in place in the table's slot array.
  class Entry {
   public:
    std::string_view key() const {
      if (kind_ == kInline) return {inline_, klen_};
      Spilled s = spilled();
      return {s.block, s.klen};
    }
    std::string_view value() const {
      if (kind_ == kInline) return {inline_ + klen_, vlen_};
      Spilled s = spilled();
      return {s.block + s.klen, s.vlen};
    }
    /// Replaces the value (`v` may point into it).
    void assign(std::string_view v) {
      const std::string_view k = key();
      if (k.size() + v.size() <= kInlineBytes) {
        if (kind_ == kInline) {
          copyTo(inline_ + klen_, v);
        } else {  // back inline: the block is freed only after `v` (which may lie in it) is copied
          Spilled s = spilled();
          std::memcpy(inline_, s.block, s.klen);
          copyTo(inline_ + s.klen, v);
          klen_ = static_cast<uint8_t>(s.klen);
          kind_ = kInline;
          std::free(s.block);
        }
        vlen_ = static_cast<uint8_t>(v.size());
        return;
      }
      if (kind_ == kSpilled) {
        Spilled s = spilled();
        if (v.size() <= s.vcap) {
          copyTo(s.block + s.klen, v);
          s.vlen = static_cast<uint32_t>(v.size());
          setSpilled(s);
          return;
        }
      }
      respill(k, {}, v, v.size());
    }
    /// Appends `e` to the value (`e` may point into it).
    void append(std::string_view e) {
      const size_t k = kind_ == kInline ? klen_ : spilled().klen;
      const std::string_view v = value();
      const size_t total = v.size() + e.size();
      if (kind_ == kInline && k + total <= kInlineBytes) {
        copyTo(inline_ + klen_ + vlen_, e);
        vlen_ = static_cast<uint8_t>(total);
        return;
      }
      if (kind_ == kSpilled) {
        Spilled s = spilled();
        if (total <= s.vcap) {
          copyTo(s.block + s.klen + s.vlen, e);
          s.vlen = static_cast<uint32_t>(total);
          setSpilled(s);
          return;
        }
      }
      respill(key(), v, e, std::max(total, 2 * v.size()));
    }

   private:
    friend class BasicFlatTable;
    enum Kind : uint8_t { kEmpty = 0, kInline = 1, kSpilled = 2 };
    /// A spilled entry's block: key bytes, then value bytes, then vcap - vlen spare bytes.
    struct Spilled {
      char* block;
      uint32_t klen, vlen, vcap;
    };
    static_assert(sizeof(Spilled) <= kInlineBytes - 1, "a Spilled fills the slot from offset 8");

    /// memmove/memcmp, also for a default string_view (whose null data() they must not get).
    static void copyTo(char* to, std::string_view from) {
      if (!from.empty()) std::memmove(to, from.data(), from.size());
    }
    static bool startsWith(const char* bytes, std::string_view k) {
      return k.empty() || std::memcmp(bytes, k.data(), k.size()) == 0;
    }
    Spilled spilled() const {
      Spilled s;
      std::memcpy(&s, inline_ + 1, sizeof s);  // at offset 8, aligned
      return s;
    }
    void setSpilled(const Spilled& s) { std::memcpy(inline_ + 1, &s, sizeof s); }
    bool hasKey(uint32_t h, std::string_view k) const {
      if (hash_ != h) return false;
      if (kind_ == kInline) return klen_ == k.size() && startsWith(inline_, k);
      Spilled s = spilled();
      return s.klen == k.size() && startsWith(s.block, k);
    }
    /// A block of value capacity `cap` holding `k`, then `head`, then `tail` (the value).
    static Spilled newBlock(std::string_view k, std::string_view head, std::string_view tail, size_t cap) {
      if (k.size() > UINT32_MAX || cap > UINT32_MAX) throw std::length_error("state entry over 4 GiB");
      char* block = static_cast<char*>(std::malloc(k.size() + cap));
      if (block == nullptr) throw std::bad_alloc();
      copyTo(block, k);
      copyTo(block + k.size(), head);
      copyTo(block + k.size() + head.size(), tail);
      return {block, static_cast<uint32_t>(k.size()), static_cast<uint32_t>(head.size() + tail.size()),
              static_cast<uint32_t>(cap)};
    }
    /// Moves the entry to a new block (see newBlock); the old one is freed after the copy, as
    /// `k`, `head` and `tail` may lie in it.
    void respill(std::string_view k, std::string_view head, std::string_view tail, size_t cap) {
      Spilled s = newBlock(k, head, tail, cap);
      if (kind_ == kSpilled) std::free(spilled().block);
      kind_ = kSpilled;
      setSpilled(s);
    }

    uint32_t hash_;
    Kind kind_;
    uint8_t klen_, vlen_;      // inline lengths
    char inline_[kInlineBytes];  // inline: key bytes then value bytes; spilled: a Spilled at offset 8
  };
  static_assert(sizeof(Entry) == 32 && std::is_trivially_copyable_v<Entry>);

  class const_iterator {
   public:
    const Entry& operator*() const { return *p_; }
    const Entry* operator->() const { return p_; }
    const_iterator& operator++() {
      ++p_;
      skip();
      return *this;
    }
    bool operator==(const const_iterator& o) const { return p_ == o.p_; }

   private:
    friend class BasicFlatTable;
    const_iterator(const Entry* p, const Entry* end) : p_(p), end_(end) { skip(); }
    void skip() {
      while (p_ != end_ && p_->kind_ == Entry::kEmpty) ++p_;
    }
    const Entry* p_;
    const Entry* end_;
  };

  BasicFlatTable() = default;
  /// One memcpy of the slot array (the copy-on-write copy of a key group's table), then a
  /// block of its own for each spilled entry.
  BasicFlatTable(const BasicFlatTable& o) : mask_(o.mask_), size_(o.size_) {
    if (o.slots_ == nullptr) return;
    slots_ = static_cast<Entry*>(std::malloc(o.capacity() * sizeof(Entry)));
    if (slots_ == nullptr) throw std::bad_alloc();
    std::memcpy(static_cast<void*>(slots_), o.slots_, o.capacity() * sizeof(Entry));
    size_t i = 0;
    try {
      for (; i < capacity(); ++i) {
        Entry& e = slots_[i];
        if (e.kind_ == Entry::kSpilled) e.setSpilled(Entry::newBlock(e.key(), e.value(), {}, e.value().size()));
      }
    } catch (...) {
      // Slots from i on still name the original's blocks: destroy() must not free those.
      for (; i < capacity(); ++i)
        if (slots_[i].kind_ == Entry::kSpilled) slots_[i].kind_ = Entry::kEmpty;
      destroy();
      throw;
    }
  }
  BasicFlatTable& operator=(const BasicFlatTable&) = delete;
  ~BasicFlatTable() { destroy(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return slots_ == nullptr ? 0 : mask_ + 1; }

  const Entry* find(std::string_view key) const {
    if (slots_ == nullptr) return nullptr;
    const uint32_t h = hashOf(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.kind_ == Entry::kEmpty) return nullptr;
      if (e.hasKey(h, key)) return &e;
    }
  }
  Entry* find(std::string_view key) { return const_cast<Entry*>(std::as_const(*this).find(key)); }

  /// The entry of `key`, inserted with an empty value if there is none.
  Entry& findOrInsert(std::string_view key) {
    if (key.size() > UINT32_MAX) throw std::length_error("state key over 4 GiB");
    const uint32_t h = hashOf(key);
    if (slots_ != nullptr) {
      for (size_t i = h & mask_;; i = (i + 1) & mask_) {
        Entry& e = slots_[i];
        if (e.kind_ == Entry::kEmpty) {
          if ((size_ + 1) * 8 > capacity() * 7) break;  // grow first
          return place(e, h, key);
        }
        if (e.hasKey(h, key)) return e;
      }
    }
    grow();
    size_t i = h & mask_;
    while (slots_[i].kind_ != Entry::kEmpty) i = (i + 1) & mask_;
    return place(slots_[i], h, key);
  }
  Entry& insertOrAssign(std::string_view key, std::string_view value) {
    Entry& e = findOrInsert(key);
    e.assign(value);
    return e;
  }

  /// Removes `key`'s entry; false if there was none.
  bool erase(std::string_view key) {
    Entry* found = find(key);
    if (found == nullptr) return false;
    if (found->kind_ == Entry::kSpilled) std::free(found->spilled().block);
    // Backward shift: pull each later entry of the run into the hole unless its home slot
    // lies cyclically in (hole, its slot], where it would no longer be found.
    size_t hole = static_cast<size_t>(found - slots_);
    for (size_t j = (hole + 1) & mask_; slots_[j].kind_ != Entry::kEmpty; j = (j + 1) & mask_) {
      const size_t home = slots_[j].hash_ & mask_;
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    std::memset(static_cast<void*>(&slots_[hole]), 0, sizeof(Entry));
    --size_;
    return true;
  }

  /// All entries, in slot order (a sequential scan).
  const_iterator begin() const { return {slots_, slots_ + capacity()}; }
  const_iterator end() const { return {slots_ + capacity(), slots_ + capacity()}; }

 private:
  static constexpr size_t kMinCapacity = 8;

  static uint32_t hashOf(std::string_view key) { return Hash()(key); }
  static Entry* allocate(size_t n) {
    auto* p = static_cast<Entry*>(std::calloc(n, sizeof(Entry)));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  Entry& place(Entry& e, uint32_t h, std::string_view key) {
    if (key.size() <= kInlineBytes) {
      e.hash_ = h;
      e.kind_ = Entry::kInline;
      e.klen_ = static_cast<uint8_t>(key.size());
      e.vlen_ = 0;
      Entry::copyTo(e.inline_, key);
    } else {
      auto s = Entry::newBlock(key, {}, {}, 0);  // may throw: `e` stays empty
      e.hash_ = h;
      e.kind_ = Entry::kSpilled;
      e.setSpilled(s);
    }
    ++size_;
    return e;
  }
  void grow() {
    const size_t cap = slots_ == nullptr ? kMinCapacity : 2 * capacity();
    if (cap - 1 > UINT32_MAX) throw std::length_error("key-group table over 2^32 slots");
    Entry* fresh = allocate(cap);
    const size_t mask = cap - 1;
    for (size_t i = 0; i < capacity(); ++i) {
      const Entry& e = slots_[i];
      if (e.kind_ == Entry::kEmpty) continue;
      size_t j = e.hash_ & mask;
      while (fresh[j].kind_ != Entry::kEmpty) j = (j + 1) & mask;
      fresh[j] = e;
    }
    std::free(slots_);
    slots_ = fresh;
    mask_ = mask;
  }
  void destroy() {
    for (size_t i = 0; i < capacity(); ++i)
      if (slots_[i].kind_ == Entry::kSpilled) std::free(slots_[i].spilled().block);
    std::free(slots_);
    slots_ = nullptr;
  }

  Entry* slots_ = nullptr;
  size_t mask_ = 0;  // capacity - 1
  size_t size_ = 0;
};

using FlatTable = BasicFlatTable<>;

}  // namespace jobhost::state
