// Unit tests for FlatTable (state/src/flat_table.h), the heap backend's Value/List table:
// probing and growth, backward-shift erase, entries that spill out of their slot, deep
// copies, iteration, copy-on-write per page under frozen Views, and randomized comparisons
// with std::unordered_map (with and without Views being taken and dropped).
#include "flat_table.h"

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

namespace jobhost::state {
// Named, not anonymous: this binary is compiled as one unit per batch of sources
// (JOBHOST_UNITY_BUILD), where the helpers of two test files would collide.
namespace flat_table_test {

std::string keyOf(uint64_t i) { return "k" + std::to_string(i); }

std::map<std::string, std::string> contents(const FlatTable& t) {
  std::map<std::string, std::string> out;
  for (const auto& e : t) EXPECT_TRUE(out.emplace(e.key(), e.value()).second) << "visited twice: " << e.key();
  return out;
}

template <class View>
std::map<std::string, std::string> viewContents(const View& v) {
  std::map<std::string, std::string> out;
  size_t n = 0;
  for (const auto& e : v) {
    EXPECT_TRUE(out.emplace(e.key(), e.value()).second) << "visited twice: " << e.key();
    ++n;
  }
  EXPECT_EQ(n, v.size());
  return out;
}

std::string valueOf(const FlatTable& t, std::string_view key) {
  const FlatTable::Entry* e = t.find(key);
  EXPECT_NE(e, nullptr) << key;
  return e == nullptr ? "" : std::string(e->value());
}

TEST(FlatTableTest, AnEmptyTableFindsNothingAndAllocatesNothing) {
  FlatTable t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.capacity(), 0u);
  EXPECT_EQ(t.find("a"), nullptr);
  EXPECT_FALSE(t.erase("a"));
  EXPECT_EQ(t.begin(), t.end());
}

TEST(FlatTableTest, InsertFindOverwriteAndTheEmptyKeyAndValue) {
  FlatTable t;
  t.insertOrAssign("a", "1");
  t.insertOrAssign("", "empty key");
  t.insertOrAssign("b", "");
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(valueOf(t, "a"), "1");
  EXPECT_EQ(valueOf(t, ""), "empty key");
  EXPECT_EQ(valueOf(t, "b"), "");
  t.insertOrAssign("a", "22");
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(valueOf(t, "a"), "22");
  EXPECT_EQ(t.find("c"), nullptr);
  EXPECT_EQ(&t.findOrInsert("a"), t.find("a"));
  EXPECT_EQ(t.findOrInsert("new").value(), "");
  EXPECT_EQ(t.size(), 4u);
}

TEST(FlatTableTest, KeysDifferingOnlyInLengthOrTheLastByteAreDistinct) {
  FlatTable t;
  const std::string zeros(8, '\0');
  t.insertOrAssign(zeros, "8");
  t.insertOrAssign(zeros.substr(0, 7), "7");
  t.insertOrAssign(zeros.substr(0, 7) + '\1', "8'");
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(valueOf(t, zeros), "8");
  EXPECT_EQ(valueOf(t, zeros.substr(0, 7)), "7");
  EXPECT_EQ(valueOf(t, zeros.substr(0, 7) + '\1'), "8'");
}

TEST(FlatTableTest, GrowthKeepsEveryEntryAndTheLoadAtMostSevenEighths) {
  FlatTable t;
  for (uint64_t i = 0; i < 100000; ++i) {
    t.insertOrAssign(keyOf(i), std::to_string(i * 3));
    ASSERT_LE(t.size() * 8, t.capacity() * 7);
  }
  EXPECT_EQ(t.size(), 100000u);
  EXPECT_EQ(t.capacity(), 131072u);  // power of two: 100000 > 7/8 of 65536
  for (uint64_t i = 0; i < 100000; ++i) ASSERT_EQ(valueOf(t, keyOf(i)), std::to_string(i * 3));
  EXPECT_EQ(t.find(keyOf(100000)), nullptr);
}

// Every key hashes alike: one run of equal stored hashes, told apart by the key bytes alone.
struct SameHash {
  uint32_t operator()(std::string_view) const { return 7; }
};
// A few hash values for many keys: runs of mixed homes, wrapping around the array's end.
struct LengthHash {
  uint32_t operator()(std::string_view k) const { return static_cast<uint32_t>(k.size() * 0x9e3779b9u); }
};

template <class Table>
void fillEraseAndCheck(Table& t, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) t.insertOrAssign(keyOf(i), std::to_string(i));
  ASSERT_EQ(t.size(), n);
  for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(std::string(t.find(keyOf(i))->value()), std::to_string(i));
  for (uint64_t i = 0; i < n; i += 3) ASSERT_TRUE(t.erase(keyOf(i)));
  for (uint64_t i = 0; i < n; ++i) {
    const auto* e = t.find(keyOf(i));
    if (i % 3 == 0) {
      ASSERT_EQ(e, nullptr) << i;
    } else {
      ASSERT_NE(e, nullptr) << i;
      ASSERT_EQ(std::string(e->value()), std::to_string(i));
    }
  }
  for (uint64_t i = 0; i < n; i += 3) t.insertOrAssign(keyOf(i), "back");
  ASSERT_EQ(t.size(), n);
  for (uint64_t i = 0; i < n; i += 3) ASSERT_EQ(t.find(keyOf(i))->value(), "back");
}

TEST(FlatTableTest, KeysOfEqualHashAndLengthDifferingInAnyOneByteAreDistinct) {
  // The key comparison reads 4-16-byte keys as two overlapping words: a key that differs
  // from another of its length in any single byte, at every length up to 40, is another key.
  BasicFlatTable<SameHash> t;
  std::vector<std::string> keys;
  for (size_t len = 0; len <= 40; ++len) {
    std::string base(len, '\0');
    for (size_t i = 0; i < len; ++i) base[i] = static_cast<char>('a' + i % 26);
    keys.push_back(base);
    for (size_t at = 0; at < len; ++at) {
      std::string k = base;
      k[at] = static_cast<char>(k[at] ^ 0x40);
      keys.push_back(k);
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) t.insertOrAssign(keys[i], std::to_string(i));
  ASSERT_EQ(t.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto* e = t.find(keys[i]);
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(e->value(), std::to_string(i)) << "key " << i << " of length " << keys[i].size();
  }
}

TEST(FlatTableTest, KeysWithEqualHashesAreToldApartByTheirBytes) {
  BasicFlatTable<SameHash> same;
  fillEraseAndCheck(same, 500);
  BasicFlatTable<LengthHash> byLength;
  fillEraseAndCheck(byLength, 5000);
}

// Long runs of occupied slots (collisions and wrap-around at the end of the array): a tiny
// table filled to its limit, then every erase order of a run.
TEST(FlatTableTest, ErasingInsideLongProbeRunsKeepsTheRestFindable) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    FlatTable t;
    std::vector<std::string> keys;
    for (uint64_t i = 0; i < 7; ++i) keys.push_back(keyOf(seed * 100 + i));  // 7 of 8 slots
    for (const auto& k : keys) t.insertOrAssign(k, k + "v");
    ASSERT_EQ(t.capacity(), 8u);
    std::mt19937_64 rng(seed);
    std::shuffle(keys.begin(), keys.end(), rng);
    for (size_t n = 0; n < keys.size(); ++n) {
      ASSERT_TRUE(t.erase(keys[n]));
      ASSERT_FALSE(t.erase(keys[n]));
      ASSERT_EQ(t.size(), keys.size() - n - 1);
      for (size_t m = n + 1; m < keys.size(); ++m) ASSERT_EQ(valueOf(t, keys[m]), keys[m] + "v") << "seed " << seed;
    }
    EXPECT_TRUE(t.empty());
  }
}

TEST(FlatTableTest, DeletesThenReinsertsFindTheNewValues) {
  FlatTable t;
  for (uint64_t i = 0; i < 5000; ++i) t.insertOrAssign(keyOf(i), "old");
  const size_t cap = t.capacity();
  for (int round = 0; round < 20; ++round) {
    for (uint64_t i = 0; i < 5000; i += 2) ASSERT_TRUE(t.erase(keyOf(i)));
    EXPECT_EQ(t.size(), 2500u);
    for (uint64_t i = 0; i < 5000; i += 2) t.insertOrAssign(keyOf(i), "new" + std::to_string(round));
    EXPECT_EQ(t.size(), 5000u);
  }
  EXPECT_EQ(t.capacity(), cap);  // no tombstones piling up
  for (uint64_t i = 0; i < 5000; ++i) ASSERT_EQ(valueOf(t, keyOf(i)), i % 2 ? "old" : "new19");
}

TEST(FlatTableTest, LongKeysAndValuesSpillAndComeBackWhole) {
  FlatTable t;
  const std::string longKey(100, 'K'), longValue(1000, 'V');
  t.insertOrAssign(longKey, "short");
  t.insertOrAssign("short", longValue);
  t.insertOrAssign(longKey + "2", longValue + "2");
  const std::string fits(FlatTable::kInlineBytes - 5, 'x');
  t.insertOrAssign("fiveb", fits);                  // exactly inline
  t.insertOrAssign("sixby", fits + "y");            // one byte too many
  EXPECT_EQ(valueOf(t, longKey), "short");
  EXPECT_EQ(valueOf(t, "short"), longValue);
  EXPECT_EQ(valueOf(t, longKey + "2"), longValue + "2");
  EXPECT_EQ(valueOf(t, "fiveb"), fits);
  EXPECT_EQ(valueOf(t, "sixby"), fits + "y");
  EXPECT_EQ(t.find(longKey)->key(), longKey);
  for (uint64_t i = 0; i < 1000; ++i) t.insertOrAssign(longKey + keyOf(i), longValue);  // growth moves spilled entries
  EXPECT_EQ(valueOf(t, longKey), "short");
  EXPECT_EQ(valueOf(t, longKey + keyOf(999)), longValue);
  EXPECT_TRUE(t.erase(longKey));
  EXPECT_TRUE(t.erase("short"));
  EXPECT_EQ(t.find(longKey), nullptr);
  EXPECT_EQ(t.size(), 1003u);
}

TEST(FlatTableTest, OverwritesBetweenInlineAndSpilledKeepKeyAndValue) {
  FlatTable t;
  const std::string longValue(300, 'L');
  FlatTable::Entry& e = t.insertOrAssign("key", "short");
  e.assign(longValue);  // short -> long
  EXPECT_EQ(e.key(), "key");
  EXPECT_EQ(e.value(), longValue);
  e.assign(std::string(200, 'M'));  // long -> shorter long: in place
  EXPECT_EQ(e.value(), std::string(200, 'M'));
  e.assign("s");  // long -> short: back inline
  EXPECT_EQ(e.key(), "key");
  EXPECT_EQ(e.value(), "s");
  e.assign(longValue);
  e.assign(e.value().substr(10));  // a value taken from the entry itself
  EXPECT_EQ(e.value(), longValue.substr(10));
  e.assign(e.value().substr(0, 3));
  EXPECT_EQ(e.value(), "LLL");
  EXPECT_EQ(valueOf(t, "key"), "LLL");

  const std::string longKey(40, 'k');  // a spilled key stays spilled whatever the value
  FlatTable::Entry& f = t.insertOrAssign(longKey, longValue);
  f.assign("");
  EXPECT_EQ(f.key(), longKey);
  EXPECT_EQ(f.value(), "");
  f.assign(longValue);
  EXPECT_EQ(valueOf(t, longKey), longValue);
}

TEST(FlatTableTest, AppendsGrowAcrossTheInlineLimit) {
  FlatTable t;
  std::string expect;
  for (int i = 0; i < 500; ++i) {
    const std::string element = std::to_string(i) + ",";
    t.findOrInsert("list").append(element);
    expect += element;
    ASSERT_EQ(valueOf(t, "list"), expect) << i;
  }
  FlatTable::Entry& e = *t.find("list");
  e.append(e.value().substr(0, 4));  // an element taken from the entry itself
  EXPECT_EQ(e.value(), expect + expect.substr(0, 4));
  e.assign("x");
  e.append("y");
  EXPECT_EQ(valueOf(t, "list"), "xy");
  // An inline value whose element itself comes from the value, right at the limit.
  FlatTable::Entry& g = t.insertOrAssign("g", std::string(FlatTable::kInlineBytes - 2, 'a'));
  g.append(g.value().substr(0, 1));
  EXPECT_EQ(g.value(), std::string(FlatTable::kInlineBytes - 1, 'a'));
  g.append(g.value().substr(0, 2));
  EXPECT_EQ(g.value(), std::string(FlatTable::kInlineBytes + 1, 'a'));
}

TEST(FlatTableTest, ACopyIsIndependentOfItsOriginal) {
  FlatTable a;
  const std::string longValue(100, 'v');
  for (uint64_t i = 0; i < 1000; ++i) a.insertOrAssign(keyOf(i), i % 3 ? std::to_string(i) : longValue + keyOf(i));
  a.insertOrAssign(std::string(50, 'K'), longValue);
  FlatTable b(a);
  EXPECT_EQ(contents(a), contents(b));
  const auto before = contents(a);
  for (uint64_t i = 0; i < 1000; i += 2) b.insertOrAssign(keyOf(i), "changed");
  for (uint64_t i = 1; i < 1000; i += 4) b.erase(keyOf(i));
  b.find(keyOf(3))->append(longValue);
  b.find(std::string(50, 'K'))->assign("short");
  for (uint64_t i = 1000; i < 3000; ++i) b.insertOrAssign(keyOf(i), "more");  // b grows, a does not
  EXPECT_EQ(contents(a), before);
  a.find(keyOf(11))->assign("a only");
  EXPECT_EQ(valueOf(b, keyOf(11)), "11");
  EXPECT_EQ(valueOf(b, keyOf(3)), longValue + keyOf(3) + longValue);
  FlatTable empty;
  FlatTable c(empty);
  EXPECT_TRUE(c.empty());
  c.insertOrAssign("x", "y");
  EXPECT_TRUE(empty.empty());
}

TEST(FlatTableTest, IterationVisitsEveryEntryOnce) {
  FlatTable t;
  std::map<std::string, std::string> expect;
  for (uint64_t i = 0; i < 3000; ++i) {
    std::string v = i % 7 ? std::to_string(i) : std::string(60, 'x');
    t.insertOrAssign(keyOf(i), v);
    expect[keyOf(i)] = v;
  }
  for (uint64_t i = 0; i < 3000; i += 5) {
    t.erase(keyOf(i));
    expect.erase(keyOf(i));
  }
  EXPECT_EQ(contents(t), expect);
  size_t n = 0;
  for (auto it = t.begin(); it != t.end(); ++it) ++n;
  EXPECT_EQ(n, t.size());
}

// A restore inserts a snapshot's entries in the order the snapshot's table iterated them,
// into a table that grows from empty. That must probe about as much as inserting the same
// keys in their own order: when every capacity ordered homes alike (the hash's low bits),
// each smaller table the restore passed through received its entries sorted by home, packed
// into one stretch of slots, and the probes piled up (a 10M-key restore took 39 s instead
// of ~1 s). Each copy is made from the previous one, so a chain of restores is covered too.
TEST(FlatTableTest, InsertingInAnotherTablesIterationOrderProbesAsLittleAsAnyOrder) {
  constexpr uint64_t kKeys = 150000;  // capacity 2^18: load 0.57
  FlatTable source;
  for (uint64_t i = 0; i < kKeys; ++i) source.insertOrAssign(keyOf(i), std::to_string(i));
  const double own = static_cast<double>(source.probed()) / kKeys;
  EXPECT_LT(own, 8.0);  // linear probing at a load of at most 7/8
  const FlatTable* from = &source;
  std::vector<std::unique_ptr<FlatTable>> copies;
  for (int generation = 0; generation < 3; ++generation) {
    copies.push_back(std::make_unique<FlatTable>());
    FlatTable& to = *copies.back();
    for (auto it = from->begin(); it != from->end(); ++it) to.insertOrAssign(it->key(), it->value());
    ASSERT_EQ(to.size(), kKeys);
    ASSERT_EQ(to.capacity(), source.capacity());
    const double probed = static_cast<double>(to.probed()) / kKeys;
    EXPECT_LT(probed, 2 * own + 1) << "generation " << generation << ", the keys' own order probed " << own;
    EXPECT_LT(static_cast<double>(to.displacement()) / kKeys, 4.0) << "generation " << generation;
    for (uint64_t i = 0; i < kKeys; i += 997) ASSERT_EQ(valueOf(to, keyOf(i)), std::to_string(i));
    from = &to;
  }
}

// 100k random operations against std::unordered_map, over few enough keys (and values of
// every length, inline and spilled) that inserts, overwrites, appends and erases of present
// and absent keys all happen often; the whole contents are compared every 10k operations.
TEST(FlatTableTest, RandomOperationsMatchUnorderedMap) {
  std::mt19937_64 rng(20261216);
  FlatTable t;
  std::unordered_map<std::string, std::string> ref;
  auto randomBytes = [&](size_t maxLen) {
    std::string s(rng() % (maxLen + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4);  // small alphabet: near-equal keys
    return s;
  };
  auto randomKey = [&] { return rng() % 10 == 0 ? randomBytes(40) : "k" + std::to_string(rng() % 3000); };
  auto randomValue = [&] { return rng() % 4 == 0 ? randomBytes(80) : randomBytes(12); };
  for (int op = 1; op <= 100000; ++op) {
    const std::string k = randomKey();
    switch (rng() % 5) {
      case 0:
      case 1: {
        const std::string v = randomValue();
        t.insertOrAssign(k, v);
        ref[k] = v;
        break;
      }
      case 2: {
        const std::string v = randomValue();
        t.findOrInsert(k).append(v);
        ref[k] += v;
        break;
      }
      case 3:
        ASSERT_EQ(t.erase(k), ref.erase(k) == 1) << "op " << op;
        break;
      case 4: {
        const FlatTable::Entry* e = t.find(k);
        auto it = ref.find(k);
        ASSERT_EQ(e != nullptr, it != ref.end()) << "op " << op;
        if (e != nullptr) {
          ASSERT_EQ(e->value(), it->second) << "op " << op;
        }
        break;
      }
    }
    ASSERT_EQ(t.size(), ref.size()) << "op " << op;
    if (op % 10000 == 0) {
      const std::map<std::string, std::string> sorted(ref.begin(), ref.end());
      ASSERT_EQ(contents(t), sorted) << "op " << op;
      FlatTable copy(t);
      ASSERT_EQ(contents(copy), contents(t));
    }
  }
}

// ---- Copy-on-write per page (FlatTable::freeze, the heap backend's snapshots) ----

TEST(FlatTableTest, AFrozenViewKeepsItsMomentThroughOverwritesAppendsErasesAndGrowth) {
  FlatTable t;
  const std::string longValue(70, 'L');
  for (uint64_t i = 0; i < 5000; ++i) t.insertOrAssign(keyOf(i), i % 4 ? std::to_string(i) : longValue + keyOf(i));
  t.insertOrAssign(std::string(40, 'K'), "long key");
  const auto before = contents(t);
  const size_t capacityBefore = t.capacity();
  FlatTable::View v = t.freeze();
  ASSERT_EQ(viewContents(v), before);

  std::map<std::string, std::string> expect = before;
  for (uint64_t i = 0; i < 5000; i += 3) {
    t.insertOrAssign(keyOf(i), "new" + std::to_string(i));
    expect[keyOf(i)] = "new" + std::to_string(i);
  }
  for (uint64_t i = 0; i < 5000; i += 8) {  // spilled values grow in their blocks (or move to new ones)
    t.findOrInsert(keyOf(i)).append(longValue);
    expect[keyOf(i)] += longValue;
  }
  for (uint64_t i = 1; i < 5000; i += 5) {
    ASSERT_TRUE(t.erase(keyOf(i)));
    expect.erase(keyOf(i));
  }
  t.find(std::string(40, 'K'))->assign(longValue);
  expect[std::string(40, 'K')] = longValue;
  for (uint64_t i = 5000; i < 20000; ++i) {  // grows twice while the View is alive
    t.insertOrAssign(keyOf(i), std::to_string(i));
    expect[keyOf(i)] = std::to_string(i);
  }
  ASSERT_GT(t.capacity(), capacityBefore);
  EXPECT_EQ(viewContents(v), before);  // the View: the moment of freeze()
  EXPECT_EQ(contents(t), expect);      // the table: every change
  EXPECT_GT(t.retiredBytes(), 0u);
  t.prepareWrite(false);  // the View is no longer read: what it held is freed
  EXPECT_EQ(t.retiredBytes(), 0u);
  EXPECT_EQ(contents(t), expect);
}

TEST(FlatTableTest, AWriteAfterAFreezeCopiesOnlyThePageItChanges) {
  FlatTable t;
  for (uint64_t i = 0; i < 100000; ++i) t.insertOrAssign(keyOf(i), std::to_string(i));
  const size_t pages = t.capacity() / FlatTable::kPageSlots;
  ASSERT_GE(pages, 512u);
  const size_t page = FlatTable::kPageSlots * sizeof(FlatTable::Entry);
  const size_t dir = pages * 16;  // a directory entry: the page's pointer and version

  FlatTable::View v = t.freeze();
  t.prepareWrite(true);
  EXPECT_EQ(t.retiredBytes(), 0u);  // freeze() copies nothing
  size_t index;
  ASSERT_NE(std::as_const(t).find(keyOf(7), &index), nullptr);
  t.writableAt(index).assign("changed");
  EXPECT_EQ(t.retiredBytes(), dir + page);  // the directory once, then one page
  t.writableAt(index).assign("again");      // the page is the table's own now
  EXPECT_EQ(t.retiredBytes(), dir + page);
  // A key on another page costs one more page, whatever the table's size.
  uint64_t other = 8;
  size_t otherIndex = 0;
  for (;; ++other) {
    ASSERT_NE(std::as_const(t).find(keyOf(other), &otherIndex), nullptr);
    if (otherIndex / FlatTable::kPageSlots != index / FlatTable::kPageSlots) break;
  }
  t.insertOrAssign(keyOf(other), "other");
  EXPECT_EQ(t.retiredBytes(), dir + 2 * page);
  EXPECT_EQ(valueOf(t, keyOf(7)), "again");
  std::map<std::string, std::string> frozen = viewContents(v);
  EXPECT_EQ(frozen.size(), 100000u);
  EXPECT_EQ(frozen[keyOf(7)], "7");
  EXPECT_EQ(frozen[keyOf(other)], std::to_string(other));

  // Without a View to protect, writes go in place and nothing is retired.
  t.prepareWrite(false);
  EXPECT_EQ(t.retiredBytes(), 0u);
  for (uint64_t i = 0; i < 100000; i += 97) t.insertOrAssign(keyOf(i), "in place");
  t.erase(keyOf(1));
  EXPECT_EQ(t.retiredBytes(), 0u);
}

TEST(FlatTableTest, TwoFreezesKeepTwoMomentsAndEachPageIsCopiedOncePerFreeze) {
  FlatTable t;
  for (uint64_t i = 0; i < 3000; ++i) t.insertOrAssign(keyOf(i), "a");
  const auto first = contents(t);
  FlatTable::View a = t.freeze();  // a checkpoint...
  for (uint64_t i = 0; i < 3000; i += 2) t.insertOrAssign(keyOf(i), "b");
  t.erase(keyOf(1));
  const auto second = contents(t);
  t.prepareWrite(true);
  FlatTable::View b = t.freeze();  // ...and a savepoint while it uploads
  t.prepareWrite(true);
  const size_t retired = t.retiredBytes();
  for (uint64_t i = 0; i < 3000; i += 2) t.insertOrAssign(keyOf(i), "c");  // pages made after `a` are copied again
  EXPECT_GT(t.retiredBytes(), retired);
  for (uint64_t i = 3000; i < 9000; ++i) t.insertOrAssign(keyOf(i), "d");  // growth under both
  EXPECT_EQ(viewContents(a), first);
  EXPECT_EQ(viewContents(b), second);
  auto now = second;
  for (uint64_t i = 0; i < 3000; i += 2) now[keyOf(i)] = "c";
  for (uint64_t i = 3000; i < 9000; ++i) now[keyOf(i)] = "d";
  EXPECT_EQ(contents(t), now);
}

// Backward-shift erases move entries between slots of different pages: every page they touch
// is copied first. One hash for all keys makes one run of 700 slots over three pages.
TEST(FlatTableTest, ErasesThatShiftEntriesAcrossPagesLeaveTheViewWhole) {
  BasicFlatTable<SameHash> t;
  for (uint64_t i = 0; i < 700; ++i) t.insertOrAssign(keyOf(i), i % 5 ? std::to_string(i) : std::string(50, 's'));
  std::map<std::string, std::string> before;
  for (const auto& e : t) before.emplace(e.key(), e.value());
  auto v = t.freeze();
  auto expect = before;
  for (uint64_t i = 0; i < 700; i += 3) {
    ASSERT_TRUE(t.erase(keyOf(i)));
    expect.erase(keyOf(i));
  }
  EXPECT_EQ(viewContents(v), before);
  std::map<std::string, std::string> now;
  for (const auto& e : t) now.emplace(e.key(), e.value());
  EXPECT_EQ(now, expect);
  for (const auto& [k, val] : expect) ASSERT_EQ(std::as_const(t).find(k)->value(), val) << k;
  t.prepareWrite(false);
}

// Random operations with Views taken and released at random, at most two alive at once (a
// checkpoint and a savepoint): each View must read back exactly its moment, the table
// exactly the reference. Run under ASan in CI, so a page freed too early or leaked shows.
TEST(FlatTableTest, RandomOperationsUnderRandomFreezesMatchTheirMoments) {
  std::mt19937_64 rng(20261202);
  FlatTable t;
  std::unordered_map<std::string, std::string> ref;
  struct Frozen {
    FlatTable::View view;
    std::map<std::string, std::string> moment;
  };
  std::vector<Frozen> views;
  auto randomValue = [&] { return std::string(rng() % 4 == 0 ? 30 + rng() % 60 : rng() % 12, 'a' + rng() % 26); };
  for (int op = 1; op <= 60000; ++op) {
    if (op % 2000 == 0) {
      if (views.size() == 2 || (!views.empty() && rng() % 2)) {
        const size_t which = rng() % views.size();
        ASSERT_EQ(viewContents(views[which].view), views[which].moment) << "op " << op;
        views.erase(views.begin() + static_cast<long>(which));
      } else {
        views.push_back({t.freeze(), std::map<std::string, std::string>(ref.begin(), ref.end())});
      }
    }
    t.prepareWrite(!views.empty());
    const std::string k = "k" + std::to_string(rng() % 4000);
    switch (rng() % 4) {
      case 0:
      case 1: {
        const std::string v = randomValue();
        t.insertOrAssign(k, v);
        ref[k] = v;
        break;
      }
      case 2: {
        const std::string v = randomValue();
        t.findOrInsert(k).append(v);
        ref[k] += v;
        break;
      }
      case 3:
        ASSERT_EQ(t.erase(k), ref.erase(k) == 1) << "op " << op;
        break;
    }
    ASSERT_EQ(t.size(), ref.size()) << "op " << op;
  }
  for (const auto& f : views) EXPECT_EQ(viewContents(f.view), f.moment);
  const std::map<std::string, std::string> sorted(ref.begin(), ref.end());
  EXPECT_EQ(contents(t), sorted);
}

}  // namespace flat_table_test
}  // namespace jobhost::state
