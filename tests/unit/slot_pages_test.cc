// Unit tests for the slot-page pool (state/src/slot_pages.h): FlatTable's 8 KiB pages from
// huge-page chunks.
#include "slot_pages.h"

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace jobhost::state {
// Named, not anonymous: this binary is compiled as one unit per batch of sources
// (JOBHOST_UNITY_BUILD), where the helpers of two test files would collide.
namespace slot_pages_test {

using slot_pages::kPageBytes;

TEST(SlotPagesTest, PagesAreAlignedDistinctWritableAndReusedAfterRelease) {
  const slot_pages::Stats before = slot_pages::stats();
  std::vector<void*> pages;
  for (int i = 0; i < 1000; ++i) {  // about four chunks
    void* p = slot_pages::allocate();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % kPageBytes, 0u) << i;
    std::memset(p, i & 0xff, kPageBytes);  // the whole page is ours
    pages.push_back(p);
  }
  EXPECT_EQ(std::set<void*>(pages.begin(), pages.end()).size(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {  // nothing overlaps: each page kept its fill
    const auto* bytes = static_cast<const unsigned char*>(pages[i]);
    ASSERT_EQ(bytes[0], i & 0xff);
    ASSERT_EQ(bytes[kPageBytes - 1], i & 0xff);
  }
  EXPECT_EQ(slot_pages::stats().pagesInUse, before.pagesInUse + pages.size());

  // A released page is handed out again before anything new is touched (by the chunks;
  // under the sanitizers malloc may hold a freed page back).
  void* again = pages.back();
  slot_pages::release(again);
  pages.pop_back();
  void* next = slot_pages::allocate();
  if (slot_pages::stats().chunks > 0) EXPECT_EQ(next, again);
  pages.push_back(next);

  for (void* p : pages) slot_pages::release(p);
  const slot_pages::Stats after = slot_pages::stats();
  EXPECT_EQ(after.pagesInUse, before.pagesInUse);
  // Emptied chunks go back to the system but one (under sanitizers pages come from malloc
  // and there are no chunks).
  EXPECT_LE(after.chunks, before.chunks + 1);
}

TEST(SlotPagesTest, FreedPagesAreReusedBeforeNewChunksAndEmptiedChunksAreUnmapped) {
  const slot_pages::Stats before = slot_pages::stats();
  std::vector<void*> pages;
  for (int i = 0; i < 3000; ++i) pages.push_back(slot_pages::allocate());
  const size_t chunksUsed = slot_pages::stats().chunks;
  // Every other page (every chunk stays partly used), then as many pages again: they fill
  // the holes, no chunk is added.
  for (size_t i = 0; i < pages.size(); i += 2) slot_pages::release(pages[i]);
  EXPECT_EQ(slot_pages::stats().pagesInUse, before.pagesInUse + pages.size() / 2);
  std::vector<void*> refill;
  for (size_t i = 0; i < pages.size() / 2; ++i) refill.push_back(slot_pages::allocate());
  EXPECT_EQ(slot_pages::stats().chunks, chunksUsed);
  // The rest, backwards, and the refill: every chunk empties; all but one are unmapped.
  for (size_t i = pages.size(); i-- > 0;)
    if (i % 2 == 1) slot_pages::release(pages[i]);
  for (void* p : refill) slot_pages::release(p);
  const slot_pages::Stats after = slot_pages::stats();
  EXPECT_EQ(after.pagesInUse, before.pagesInUse);
  EXPECT_LE(after.chunks, before.chunks + 1);
}

}  // namespace slot_pages_test
}  // namespace jobhost::state
