// Slot pages: the 8 KiB pages of FlatTable's slot arrays (flat_table.h), carved from 2 MiB
// chunks that the kernel is asked to back with transparent huge pages
// (madvise(MADV_HUGEPAGE); the machine's THP setting must be `always` or `madvise`).
//
// Why not malloc: a heap backend's tables are hundreds of MiB read at random, one slot per
// state access. With 4 KiB pages nearly every access also misses the TLB, and under a
// hypervisor a TLB miss walks two sets of page tables: on the 2-vCPU VMs of
// docs/benchmarks.md that walk, not the slot's cache miss, was most of an update's time
// (A1: huge-page chunks made updates of 1M and 10M keys 1.5x faster). glibc's malloc asks
// for huge pages only when the process starts with the tunable glibc.malloc.hugetlb=1,
// which would change every allocation of the process (RocksDB's included), and a page of
// 8 KiB per allocation would leave each huge page shared with unrelated blocks.
//
// Memory goes back to the system a whole chunk at a time: a chunk whose pages are all free
// is unmapped (one empty chunk is kept for the next allocation). Pages freed from a chunk
// that still holds others stay resident until it empties; an allocation takes a page from
// the chunk a page was last freed into, so freed pages are reused before a new chunk is
// mapped (a table that grows frees its old pages as it allocates the new ones).
//
// Under AddressSanitizer or ThreadSanitizer the pages come from aligned_alloc instead, so
// that the sanitizers see every page's allocation and release.
//
// Thread-safety: allocate() and release() may be called from any thread (a table is
// destroyed on whichever thread drops its last reference, a snapshot's included); one
// process-wide mutex guards the chunks. They are called once per page (growth,
// copy-on-write), not per state access.
#pragma once

#include <cstddef>

namespace jobhost::state::slot_pages {

/// Bytes of a page: FlatTable's 256 slots of 32 bytes.
inline constexpr size_t kPageBytes = 8192;

/// A page of kPageBytes, aligned to 64 bytes (in fact to 8 KiB), contents unspecified.
/// Throws std::bad_alloc when the system has no memory for it.
void* allocate();
/// Gives back a page allocate() returned.
void release(void* page);

/// For tests and statistics.
struct Stats {
  size_t chunks = 0;       // chunks mapped
  size_t pagesInUse = 0;   // pages allocated and not released
  bool hugePages = false;  // chunks were madvised MADV_HUGEPAGE (false: aligned_alloc, or madvise refused)
};
Stats stats();

}  // namespace jobhost::state::slot_pages
