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
// Layout: linear probing over a power-of-two array of slots (zeroed slots are empty), grown
// ×2 above 7/8 load, backward-shift deletion (no tombstones, so probe sequences stay as short
// after erases as after inserts). Each slot keeps 32 bits of the key's hash: they pick the
// home slot and are compared before the key bytes. The slot array is split into pages of 256
// slots (fewer in a small table) behind a directory, so that a snapshot can share the pages
// and a write copies only the page it changes (freeze(), below).
//
// Entry pointers (from find() and findOrInsert()) stay valid until the next findOrInsert()
// that inserts, the next erase() (either may move slots) or the next change after a freeze()
// (it may copy the page); Entry::assign()/append() never move an entry. A copy is deep and
// has its own entries. Not thread-safe; const members may run concurrently with each other,
// and a View's reads with the owner's writes (see freeze()).
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
#include <vector>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "slot_pages.h"

namespace jobhost::state {

/// XXH3 (libxxhash, inlined) of the bytes, folded to 32 bits: about a dozen instructions for
/// an 8-byte key, where libstdc++'s std::hash (Murmur2, out of line) took three times that.
/// Independent of keyGroupFor's hash, which all keys of one table share modulo the
/// key-group count.
struct FlatTableHash {
  uint32_t operator()(std::string_view key) const {
    const uint64_t h = XXH3_64bits(key.data(), key.size());
    return static_cast<uint32_t>(h ^ (h >> 32));
  }
};

/// `Hash` is a parameter only so that tests can force collisions.
template <class Hash = FlatTableHash>
class BasicFlatTable {
 public:
  static constexpr size_t kInlineBytes = 25;

  /// A key and its hash. Made from the bytes alone, it hashes them; a caller that looks up
  /// one key in several tables (the heap backend: every state of the current key) hashes
  /// once and passes the hash along.
  struct Key {
    Key(std::string_view b) : bytes(b), hash(Hash()(b)) {}  // NOLINT: implicit by design
    Key(std::string_view b, uint32_t h) : bytes(b), hash(h) {}
    Key(const std::string& b) : Key(std::string_view(b)) {}  // NOLINT
    Key(const char* b) : Key(std::string_view(b)) {}         // NOLINT
    std::string_view bytes;
    uint32_t hash;
  };
  static uint32_t hashOf(std::string_view key) { return Hash()(key); }

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
      if (kind_ == kInline && klen_ + v.size() <= kInlineBytes) [[likely]] {  // stays inline
        copyTo(inline_ + klen_, v);
        vlen_ = static_cast<uint8_t>(v.size());
        return;
      }
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
    /// Values of 4 to 16 bytes (the common case) are moved as two possibly overlapping words,
    /// both loaded before either is stored, so `from` may overlap `to` as for memmove.
    static void copyTo(char* to, std::string_view from) {
      const size_t n = from.size();
      if (n >= 8 && n <= 16) return moveWords<uint64_t>(to, from.data(), n);
      if (n >= 4 && n < 8) return moveWords<uint32_t>(to, from.data(), n);
      if (n != 0) std::memmove(to, from.data(), n);
    }
    template <class W>
    static void moveWords(char* to, const char* from, size_t n) {
      W head, tail;
      std::memcpy(&head, from, sizeof(W));
      std::memcpy(&tail, from + n - sizeof(W), sizeof(W));
      std::memcpy(to, &head, sizeof(W));
      std::memcpy(to + n - sizeof(W), &tail, sizeof(W));
    }
    /// Whether `bytes` begins with `k`. Keys of 4 to 16 bytes (int64 keys, most words) are
    /// compared as two possibly overlapping words, without a call.
    static bool startsWith(const char* bytes, std::string_view k) {
      const size_t n = k.size();
      if (n >= 8 && n <= 16) return sameWords<uint64_t>(bytes, k.data(), n);
      if (n >= 4 && n < 8) return sameWords<uint32_t>(bytes, k.data(), n);
      return n == 0 || std::memcmp(bytes, k.data(), n) == 0;
    }
    /// The first and the last sizeof(W) of n bytes (sizeof(W) <= n <= 2 * sizeof(W)) are equal.
    template <class W>
    static bool sameWords(const char* a, const char* b, size_t n) {
      W a0, a1, b0, b1;
      std::memcpy(&a0, a, sizeof(W));
      std::memcpy(&b0, b, sizeof(W));
      std::memcpy(&a1, a + n - sizeof(W), sizeof(W));
      std::memcpy(&b1, b + n - sizeof(W), sizeof(W));
      return ((a0 ^ b0) | (a1 ^ b1)) == 0;
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

  /// Slots are stored in pages of at most kPageSlots (the unit of copy-on-write, below).
  static constexpr size_t kPageShift = 8;
  static constexpr size_t kPageSlots = size_t{1} << kPageShift;  // 8 KiB of slots

 private:
  /// One page of slots and the table version it was made (or last copied) at.
  struct Page {
    Entry* slots;
    uint64_t version;
  };

 public:
  /// Visits the occupied slots in slot order. Occupancy is read 64 slots at a time into a
  /// bit mask, so the scan does not branch on every slot (one slot in three or more is
  /// empty, at random: a per-slot test was a branch mispredicted at that rate, which made
  /// it the larger part of a heap snapshot's encoding time).
  class const_iterator {
   public:
    const_iterator() = default;  // the end
    const Entry& operator*() const { return *p_; }
    const Entry* operator->() const { return p_; }
    const_iterator& operator++() {
      bits_ &= bits_ - 1;
      settle();
      return *this;
    }
    bool operator==(const const_iterator& o) const { return p_ == o.p_; }
    bool operator!=(const const_iterator& o) const { return p_ != o.p_; }

   private:
    friend class BasicFlatTable;
    static constexpr size_t kGroup = 64;
    const_iterator(const Page* dir, size_t pages, size_t pageSlots) : dir_(dir), pages_(pages), pageSlots_(pageSlots) {
      if (pages_ == 0) return;
      load(dir_[0].slots);
      settle();
    }
    void load(const Entry* group) {
      group_ = group;
      const size_t n = std::min(kGroup, pageSlots_);
      uint64_t bits = 0;
      for (size_t j = 0; j < n; ++j) bits |= static_cast<uint64_t>(group[j].kind_ != Entry::kEmpty) << j;
      bits_ = bits;
    }
    /// Moves to the slot of the lowest bit left, loading groups and pages as needed.
    void settle() {
      while (bits_ == 0) {
        const size_t next = offset_ + kGroup;
        if (next < pageSlots_) {
          offset_ = next;
          load(group_ + kGroup);
          continue;
        }
        if (++page_ == pages_) {
          p_ = nullptr;
          return;
        }
        offset_ = 0;
        load(dir_[page_].slots);
      }
      p_ = group_ + __builtin_ctzll(bits_);
    }
    const Page* dir_ = nullptr;
    size_t pages_ = 0, pageSlots_ = 0, page_ = 0;
    size_t offset_ = 0;              // of group_ in its page
    const Entry* group_ = nullptr;   // the first of the 64 (or pageSlots_) slots bits_ covers
    uint64_t bits_ = 0;              // occupied slots of the group not yet visited
    const Entry* p_ = nullptr;
  };

  /// The entries as they were at freeze(), for a snapshot to read on another thread while
  /// the table's owner keeps writing (see freeze()).
  class View {
   public:
    View() = default;
    size_t size() const { return size_; }
    const_iterator begin() const { return {dir_, pages_, pageSlots_}; }
    const_iterator end() const { return {}; }

   private:
    friend class BasicFlatTable;
    const Page* dir_ = nullptr;
    size_t pages_ = 0, pageSlots_ = 0, size_ = 0;
  };

  BasicFlatTable() = default;
  /// A deep copy: pages and spilled blocks of its own.
  BasicFlatTable(const BasicFlatTable& o)
      : mask_(o.mask_), size_(o.size_), pageShift_(o.pageShift_), homeShift_(o.homeShift_), homeFactor_(o.homeFactor_) {
    if (o.dir_ == nullptr) return;
    const size_t n = o.pages();
    dir_ = allocateDir(n);
    size_t p = 0;
    try {
      for (; p < n; ++p) dir_[p] = {clonePage(o.dir_[p].slots, o.pageSlots()), 0};
    } catch (...) {
      for (size_t q = 0; q < p; ++q) freePage(dir_[q].slots, pageSlots());
      std::free(dir_);
      dir_ = nullptr;
      throw;
    }
  }
  BasicFlatTable& operator=(const BasicFlatTable&) = delete;
  ~BasicFlatTable() { destroy(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return dir_ == nullptr ? 0 : mask_ + 1; }

  // Copy-on-write per page, for snapshots that read while the owner writes (heap_backend.cc).
  // freeze() returns a View of the current entries and bumps the table's version: from then
  // on, while the owner has not said otherwise with prepareWrite(false), the first change to
  // a page made before the freeze copies that page (8 KiB of slots and the page's spilled
  // blocks) and leaves the original to the View; the page directory is copied the same way
  // (8 bytes per page), and growth builds new pages without touching the old ones. So a
  // write after a barrier costs at most one page copy, whatever the table's size. Replaced
  // pages are kept ("retired") until prepareWrite(false) says no View is read any longer.
  // Several Views (a savepoint during a checkpoint) may be alive at once: each freeze()
  // bumps the version, and a page is copied once per freeze it was made before.
  // The owner calls freeze() and prepareWrite() on its thread; Views are read on others.
  // The ordering between a View's last read and the owner's next in-place write is the
  // caller's (heap_backend.cc: a pin count, released by the reader, acquired by the writer).

  /// A View of the entries now; later changes copy what they touch (see above).
  View freeze() {
    ++version_;
    shared_ = true;
    View v;
    v.dir_ = dir_;
    v.pages_ = pages();
    v.pageSlots_ = pageSlots();
    v.size_ = size_;
    return v;
  }
  /// Says whether a View of this table may still be read (every write after a freeze() must
  /// be preceded by one). false frees what earlier writes retired and writes in place again.
  void prepareWrite(bool viewsRead) {
    shared_ = viewsRead;
    if (!viewsRead && (!retiredPages_.empty() || !retiredDirs_.empty())) freeRetired();
  }
  /// Bytes of pages and directories retired and not yet freed (for tests and statistics).
  size_t retiredBytes() const {
    size_t n = 0;
    for (const auto& r : retiredPages_) n += r.second * sizeof(Entry);
    for (const auto& r : retiredDirs_) n += r.second * sizeof(Page);
    return n;
  }

  /// Slots findOrInsert() probed past the home slots of the keys it was given, summed over
  /// the table's life (for tests and statistics).
  uint64_t probed() const { return probed_; }
  /// The entries' distances from their home slots, summed: find() reads 1 + this / size()
  /// slots on average for a key present (for tests and statistics; walks the whole table).
  size_t displacement() const {
    size_t sum = 0;
    for (size_t i = 0; i < capacity(); ++i)
      if (slotAt(i).kind_ != Entry::kEmpty) sum += (i - home(slotAt(i).hash_)) & mask_;
    return sum;
  }

  const Entry* find(const Key& key) const {
    size_t i;
    return find(key, &i);
  }
  /// As find(), and the entry's slot index for writableAt().
  const Entry* find(const Key& key, size_t* index) const {
    if (dir_ == nullptr) return nullptr;
    const uint32_t h = key.hash;
    const size_t pageMask = this->pageMask();
    size_t i = home(h);
    const Entry* page = dir_[i >> pageShift_].slots;  // the probe walks a page, then the next
    for (;;) {
      const Entry& e = page[i & pageMask];
      if (e.kind_ == Entry::kEmpty) return nullptr;
      if (e.hasKey(h, key.bytes)) {
        *index = i;
        return &e;
      }
      i = (i + 1) & mask_;
      if ((i & pageMask) == 0) page = dir_[i >> pageShift_].slots;
    }
  }
  /// The entry of `key` to change (its page copied first if a View may read it), or null.
  Entry* find(const Key& key) {
    size_t i;
    return std::as_const(*this).find(key, &i) ? &writableAt(i) : nullptr;
  }
  /// The entry in slot `index` (from find(key, &index), with no insert or erase since), to
  /// change: its page is copied first if a View may read it.
  Entry& writableAt(size_t index) {
    const size_t p = index >> pageShift_;
    if (shared_ && dir_[p].version < version_) copyPage(p);
    return dir_[p].slots[index & pageMask()];
  }

  /// The entry of `key`, inserted with an empty value if there is none; its slot index in
  /// `*index` when given (for writableAt()).
  Entry& findOrInsert(const Key& k, size_t* index = nullptr) {
    const std::string_view key = k.bytes;
    if (key.size() > UINT32_MAX) throw std::length_error("state key over 4 GiB");
    const uint32_t h = k.hash;
    if (dir_ != nullptr) {
      const size_t start = home(h);
      for (size_t i = start;; i = (i + 1) & mask_) {
        const Entry& e = slotAt(i);
        if (e.kind_ == Entry::kEmpty) {
          probed_ += (i - start) & mask_;
          if ((size_ + 1) * 8 > capacity() * 7) break;  // grow first
          if (index) *index = i;
          return place(writableAt(i), h, key);
        }
        if (e.hasKey(h, key)) {
          probed_ += (i - start) & mask_;
          if (index) *index = i;
          return writableAt(i);
        }
      }
    }
    grow();
    const size_t start = home(h);
    size_t i = start;
    while (slotAt(i).kind_ != Entry::kEmpty) i = (i + 1) & mask_;
    probed_ += (i - start) & mask_;
    if (index) *index = i;
    return place(writableAt(i), h, key);
  }
  Entry& insertOrAssign(const Key& key, std::string_view value, size_t* index = nullptr) {
    Entry& e = findOrInsert(key, index);
    e.assign(value);
    return e;
  }

  /// Removes `key`'s entry; false if there was none.
  bool erase(const Key& key) {
    size_t hole;
    if (std::as_const(*this).find(key, &hole) == nullptr) return false;
    Entry& found = writableAt(hole);
    if (found.kind_ == Entry::kSpilled) std::free(found.spilled().block);
    // Backward shift: pull each later entry of the run into the hole unless its home slot
    // lies cyclically in (hole, its slot], where it would no longer be found. The hole's
    // page is always writable already (it held the erased entry or one moved from it).
    for (size_t j = (hole + 1) & mask_; slotAt(j).kind_ != Entry::kEmpty; j = (j + 1) & mask_) {
      const size_t from = home(slotAt(j).hash_);
      if (((j - from) & mask_) >= ((j - hole) & mask_)) {
        const Entry& moved = writableAt(j);  // its spilled block, if any, is the live table's own
        writableAt(hole) = moved;
        hole = j;
      }
    }
    std::memset(static_cast<void*>(&writableAt(hole)), 0, sizeof(Entry));
    --size_;
    return true;
  }

  /// All entries, in slot order (a sequential scan).
  const_iterator begin() const { return {dir_, pages(), pageSlots()}; }
  const_iterator end() const { return {}; }

 private:
  static constexpr size_t kMinCapacity = 8;

  /// The slot a hash probes first: the top log2(capacity) bits of the hash times an odd
  /// factor that differs with the capacity. A table iterates in the order of its homes, and
  /// a restore inserts a snapshot's entries in that order into a table that grows from
  /// empty: had the smaller tables it passes through ordered homes the same way (the hash's
  /// low bits, or its top bits, alone), each would receive its entries sorted by home, all
  /// packed into one stretch of the slots — primary clustering that made a 10M-key restore
  /// 35x slower than its reads (D1-10M, 39 s). With another factor per capacity the order
  /// of one capacity is a scatter at every other; at the snapshot's own capacity, entries
  /// arriving sorted by home are linear probing's best case.
  size_t home(uint32_t h) const { return static_cast<uint32_t>(h * homeFactor_) >> homeShift_; }
  /// The odd factor of home() at a capacity of 2^bits: a different one at every capacity
  /// (SplitMix64's finaliser of `bits`), deterministic so that snapshots of the same state
  /// are the same bytes in every process.
  static constexpr uint32_t homeFactorFor(uint32_t bits) {
    uint64_t z = (bits + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<uint32_t>(z ^ (z >> 31)) | 1u;
  }
  size_t pageSlots() const { return size_t{1} << pageShift_; }
  size_t pageMask() const { return pageSlots() - 1; }
  size_t pages() const { return capacity() >> pageShift_; }
  const Entry& slotAt(size_t i) const { return dir_[i >> pageShift_].slots[i & pageMask()]; }

  /// Zeroed (empty) slots, 64-byte aligned so that no slot straddles two cache lines. A
  /// whole page comes from the huge-page chunks of slot_pages.h; the smaller arrays of a
  /// small table from malloc.
  static Entry* allocatePage(size_t n) {
    static_assert(kPageSlots * sizeof(Entry) == slot_pages::kPageBytes);
    void* p = n == kPageSlots ? slot_pages::allocate() : std::aligned_alloc(64, std::max<size_t>(n * sizeof(Entry), 64));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, n * sizeof(Entry));
    return static_cast<Entry*>(p);
  }
  /// Gives back what allocatePage(n) returned (its entries' blocks are not freed).
  static void releasePage(Entry* slots, size_t n) {
    if (n == kPageSlots) slot_pages::release(slots);
    else std::free(slots);
  }
  static Page* allocateDir(size_t n) {
    auto* d = static_cast<Page*>(std::malloc(n * sizeof(Page)));
    if (d == nullptr) throw std::bad_alloc();
    return d;
  }
  /// Frees a page and the spilled blocks its entries own.
  static void freePage(Entry* slots, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (slots[i].kind_ == Entry::kSpilled) std::free(slots[i].spilled().block);
    releasePage(slots, n);
  }
  /// A copy of `n` slots whose spilled entries have blocks of their own.
  static Entry* clonePage(const Entry* from, size_t n) {
    Entry* slots = allocatePage(n);
    std::memcpy(static_cast<void*>(slots), from, n * sizeof(Entry));
    size_t i = 0;
    try {
      for (; i < n; ++i) {
        Entry& e = slots[i];
        if (e.kind_ == Entry::kSpilled) e.setSpilled(Entry::newBlock(e.key(), e.value(), {}, e.value().size()));
      }
    } catch (...) {
      // Slots from i on still name the original's blocks: freePage() must not free those.
      for (; i < n; ++i)
        if (slots[i].kind_ == Entry::kSpilled) slots[i].kind_ = Entry::kEmpty;
      freePage(slots, n);
      throw;
    }
    return slots;
  }
  /// Makes the directory the table's own (a View may hold the current one).
  void ownDir() {
    if (!shared_ || dirVersion_ >= version_) return;
    Page* d = allocateDir(pages());
    std::memcpy(d, dir_, pages() * sizeof(Page));
    try {
      retiredDirs_.emplace_back(dir_, pages());
    } catch (...) {
      std::free(d);
      throw;
    }
    dir_ = d;
    dirVersion_ = version_;
  }
  /// Replaces page p, which a View may read, by a copy of its own; retires the original.
  void copyPage(size_t p) {
    ownDir();
    Entry* copy = clonePage(dir_[p].slots, pageSlots());
    try {
      retiredPages_.emplace_back(dir_[p].slots, pageSlots());
    } catch (...) {
      freePage(copy, pageSlots());
      throw;
    }
    dir_[p] = {copy, version_};
  }
  void freeRetired() {
    for (const auto& r : retiredPages_) freePage(r.first, r.second);
    for (const auto& r : retiredDirs_) std::free(r.first);
    retiredPages_.clear();
    retiredDirs_.clear();
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
  /// Doubles the capacity into new pages. Pages a View may read are first copied (so their
  /// spilled blocks stay theirs) and retired; the table's own pages hand their entries over.
  void grow() {
    const size_t cap = dir_ == nullptr ? kMinCapacity : 2 * capacity();
    if (cap - 1 > UINT32_MAX) throw std::length_error("key-group table over 2^32 slots");
    if (shared_)
      for (size_t p = 0; p < pages(); ++p)
        if (dir_[p].version < version_) copyPage(p);
    size_t shift = 0;
    while ((size_t{1} << shift) < std::min(cap, kPageSlots)) ++shift;
    const size_t n = cap >> shift, slotsPerPage = size_t{1} << shift, mask = cap - 1;
    uint32_t homeShift = 32;
    while ((size_t{1} << (32 - homeShift)) < cap) --homeShift;
    const uint32_t homeFactor = homeFactorFor(32 - homeShift);
    Page* fresh = allocateDir(n);
    size_t made = 0;
    try {
      for (; made < n; ++made) fresh[made] = {allocatePage(slotsPerPage), version_};
      if (dir_ != nullptr && shared_ && dirVersion_ < version_) retiredDirs_.reserve(retiredDirs_.size() + 1);
    } catch (...) {
      for (size_t q = 0; q < made; ++q) releasePage(fresh[q].slots, slotsPerPage);
      std::free(fresh);
      throw;
    }
    for (size_t p = 0; p < pages(); ++p) {
      for (size_t k = 0; k < pageSlots(); ++k) {
        const Entry& e = dir_[p].slots[k];
        if (e.kind_ == Entry::kEmpty) continue;
        size_t j = static_cast<uint32_t>(e.hash_ * homeFactor) >> homeShift;
        while (fresh[j >> shift].slots[j & (slotsPerPage - 1)].kind_ != Entry::kEmpty) j = (j + 1) & mask;
        fresh[j >> shift].slots[j & (slotsPerPage - 1)] = e;
      }
      releasePage(dir_[p].slots, pageSlots());  // its entries (and their blocks) moved
    }
    if (dir_ != nullptr && shared_ && dirVersion_ < version_) retiredDirs_.emplace_back(dir_, pages());  // reserved
    else std::free(dir_);
    dir_ = fresh;
    dirVersion_ = version_;
    mask_ = mask;
    pageShift_ = static_cast<uint32_t>(shift);
    homeShift_ = homeShift;
    homeFactor_ = homeFactor;
  }
  void destroy() {
    for (size_t p = 0; p < pages(); ++p) freePage(dir_[p].slots, pageSlots());
    std::free(dir_);
    dir_ = nullptr;
    freeRetired();
  }

  Page* dir_ = nullptr;  // pages() pages of pageSlots() slots: slot i is in page i >> pageShift_
  size_t mask_ = 0;      // capacity - 1
  size_t size_ = 0;
  uint32_t pageShift_ = 0;
  uint32_t homeShift_ = 32;  // 32 - log2(capacity): see home()
  uint32_t homeFactor_ = 1;  // homeFactorFor(log2(capacity))
  uint64_t probed_ = 0;      // see probed()
  uint64_t version_ = 0;     // bumped by freeze()
  uint64_t dirVersion_ = 0;  // the version dir_ was made at
  bool shared_ = false;      // a View may be read (prepareWrite)
  std::vector<std::pair<Entry*, size_t>> retiredPages_;  // slots, count
  std::vector<std::pair<Page*, size_t>> retiredDirs_;    // pages, count
};

using FlatTable = BasicFlatTable<>;

}  // namespace jobhost::state
