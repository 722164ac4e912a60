// Unit tests for MapEntries (state/src/map_entries.h), the heap backend's MapState table:
// copy-on-write per key under frozen Views (only the key written is copied, once per
// freeze; erased and replaced maps stay readable by the View until prepareWrite(false)),
// two Views at once, and a randomized comparison with a model under random freezes.
#include "map_entries.h"

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace jobhost::state {
// Named, not anonymous: this binary is compiled as one unit per batch of sources
// (JOBHOST_UNITY_BUILD), where the helpers of two test files would collide.
namespace map_entries_test {

using Model = std::map<std::string, std::map<std::string, std::string>>;

Model contents(const MapEntries& t) {
  Model out;
  t.forEach([&](std::string_view k, const MapEntries::UserMap& m) {
    EXPECT_FALSE(out.count(std::string(k))) << "visited twice: " << k;
    auto& o = out[std::string(k)];
    for (const auto& [uk, v] : m) o[std::string(std::string_view(uk))] = v;
  });
  return out;
}

Model viewContents(const MapEntries::View& v) {
  Model out;
  size_t n = 0;
  v.forEach([&](std::string_view k, const MapEntries::UserMap& m) {
    ++n;
    auto& o = out[std::string(k)];
    for (const auto& [uk, val] : m) o[std::string(std::string_view(uk))] = val;
  });
  EXPECT_EQ(n, v.size());
  return out;
}

std::string keyOf(int i) { return "key-" + std::to_string(i); }  // some spill out of the slot

TEST(MapEntriesTest, WritableCreatesFindsAndEraseRemoves) {
  MapEntries t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.find("a"), nullptr);
  t.writable("a")["x"] = "1";
  t.writable("a")["y"] = "2";
  t.writable("a-much-longer-key-than-a-slot-holds")["x"] = "3";
  ASSERT_NE(t.find("a"), nullptr);
  EXPECT_EQ(t.find("a")->size(), 2u);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_TRUE(t.erase("a"));
  EXPECT_FALSE(t.erase("a"));
  EXPECT_EQ(t.find("a"), nullptr);
  EXPECT_EQ(contents(t), (Model{{"a-much-longer-key-than-a-slot-holds", {{"x", "3"}}}}));
  EXPECT_EQ(t.copies(), 0u);  // no View: all in place
}

// The point of the class (issue 16, item 2): a write after a freeze copies the one key's
// map, not the key group's; a second write to it, and writes to keys made after the
// freeze, copy nothing.
TEST(MapEntriesTest, AWriteAfterAFreezeCopiesOnlyTheMapOfTheKeyWritten) {
  MapEntries t;
  const int keys = 2000;
  for (int i = 0; i < keys; ++i)
    for (int u = 0; u < 3; ++u) t.writable(keyOf(i))["u" + std::to_string(u)] = "old";
  const Model before = contents(t);
  MapEntries::View v = t.freeze();
  t.prepareWrite(true);
  t.writable(keyOf(7))["u0"] = "new";
  EXPECT_EQ(t.copies(), 1u);
  EXPECT_EQ(t.retiredMaps(), 1u);
  t.writable(keyOf(7))["u1"] = "new";  // its own copy now: in place
  t.writable("made-after")["u"] = "new";
  EXPECT_EQ(t.copies(), 1u);
  t.erase("made-after");  // no View has it: freed at once
  EXPECT_EQ(t.retiredMaps(), 1u);
  EXPECT_EQ(viewContents(v), before);
  EXPECT_EQ(t.find(keyOf(7))->at("u0"), "new");
  EXPECT_EQ(t.find(keyOf(8))->at("u0"), "old");
  // The View is done: retired maps are freed and writes go in place again.
  v = {};
  t.prepareWrite(false);
  EXPECT_EQ(t.retiredMaps(), 0u);
  t.writable(keyOf(9))["u0"] = "new";
  EXPECT_EQ(t.copies(), 1u);
}

TEST(MapEntriesTest, AnErasedKeyStaysInTheViewUntilItIsReleased) {
  MapEntries t;
  for (int i = 0; i < 300; ++i) t.writable(keyOf(i))["u"] = std::to_string(i);
  const Model before = contents(t);
  MapEntries::View v = t.freeze();
  t.prepareWrite(true);
  for (int i = 0; i < 300; i += 2) EXPECT_TRUE(t.erase(keyOf(i)));  // shifts entries across pages
  EXPECT_EQ(t.retiredMaps(), 150u);
  for (int i = 300; i < 2000; ++i) t.writable(keyOf(i))["u"] = "grown";  // growth during the View
  EXPECT_EQ(viewContents(v), before);
  EXPECT_EQ(t.size(), 150u + 1700u);
  EXPECT_EQ(t.find(keyOf(0)), nullptr);
  EXPECT_EQ(t.find(keyOf(1))->at("u"), "1");
}

TEST(MapEntriesTest, TwoFreezesKeepTwoMomentsAndEachMapIsCopiedOncePerFreeze) {
  MapEntries t;
  for (int i = 0; i < 100; ++i) t.writable(keyOf(i))["u"] = "0";
  const Model m0 = contents(t);
  MapEntries::View v0 = t.freeze();
  t.prepareWrite(true);
  for (int i = 0; i < 100; ++i) t.writable(keyOf(i))["u"] = "1";
  EXPECT_EQ(t.copies(), 100u);
  const Model m1 = contents(t);
  MapEntries::View v1 = t.freeze();
  t.prepareWrite(true);
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 100; ++i) t.writable(keyOf(i))["u"] = "2";
  EXPECT_EQ(t.copies(), 200u);
  EXPECT_EQ(viewContents(v0), m0);
  EXPECT_EQ(viewContents(v1), m1);
  EXPECT_EQ(t.find(keyOf(5))->at("u"), "2");
}

// Random writes, erases and user-key removals under random freezes and releases: every
// View keeps its moment, the table matches the model, and nothing leaks or is freed early
// (the ASan run of this binary checks the latter two).
TEST(MapEntriesTest, RandomOperationsUnderRandomFreezesMatchTheirMoments) {
  std::mt19937_64 rng(42);
  MapEntries t;
  Model model;
  struct Held {
    MapEntries::View view;
    Model moment;
  };
  std::vector<Held> held;
  for (int op = 0; op < 60000; ++op) {
    const std::string k = keyOf(static_cast<int>(rng() % 700));
    // User keys on both sides of UserKey's 24 inline bytes (lengths 1, 23, 24, 25, 41), so
    // copies, moves and rehashes of inline and allocated keys are all checked.
    static constexpr size_t kPad[] = {0, 22, 23, 24, 40};
    const std::string uk = std::to_string(rng() % 5) + std::string(kPad[rng() % 5], 'u');
    switch (rng() % 10) {
      case 0:
        EXPECT_EQ(t.erase(k), model.erase(k) == 1);
        break;
      case 1:
        if (held.size() < 3) {
          held.push_back({t.freeze(), model});
          t.prepareWrite(true);
        }
        break;
      case 2:
        if (!held.empty()) {
          const size_t i = rng() % held.size();
          ASSERT_EQ(viewContents(held[i].view), held[i].moment) << "op " << op;
          held.erase(held.begin() + static_cast<long>(i));
          t.prepareWrite(!held.empty());
        }
        break;
      case 3:
        if (model.count(k) && model[k].size() > 1 && model[k].erase(uk)) t.writable(k).erase(uk);
        break;
      default: {
        const std::string v = std::to_string(op) + std::string(rng() % 30, 'v');
        t.writable(k)[uk] = v;
        model[k][uk] = v;
      }
    }
  }
  for (const auto& h : held) EXPECT_EQ(viewContents(h.view), h.moment);
  EXPECT_EQ(contents(t), model);
}

}  // namespace map_entries_test
}  // namespace jobhost::state
