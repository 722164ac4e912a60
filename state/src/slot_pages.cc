// Slot pages from huge-page chunks: see slot_pages.h.
#include "slot_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define JOBHOST_SLOT_PAGES_FROM_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define JOBHOST_SLOT_PAGES_FROM_MALLOC 1
#endif
#endif

namespace jobhost::state::slot_pages {
namespace {

#ifdef JOBHOST_SLOT_PAGES_FROM_MALLOC

std::mutex mu;
size_t inUse = 0;

}  // namespace

void* allocate() {
  void* p = std::aligned_alloc(kPageBytes, kPageBytes);
  if (p == nullptr) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(mu);
  ++inUse;
  return p;
}

void release(void* page) {
  std::free(page);
  std::lock_guard<std::mutex> lock(mu);
  --inUse;
}

Stats stats() {
  std::lock_guard<std::mutex> lock(mu);
  return {0, inUse, false};
}

#else

constexpr size_t kChunkBytes = size_t{2} << 20;  // one huge page on x86-64 and arm64 (4 KiB base pages)
constexpr size_t kPagesPerChunk = kChunkBytes / kPageBytes;  // the first page holds the header

/// The first page of a chunk. Its other pages are either handed out, on the chunk's free
/// list (linked through their first bytes), or not yet touched (index >= fresh).
struct Chunk {
  Chunk* prev = nullptr;  // in the list of chunks with a free page
  Chunk* next = nullptr;
  void* freeList = nullptr;
  size_t fresh = 1;  // pages [fresh, kPagesPerChunk) have never been handed out
  size_t used = 0;
  bool listed = false;
};
static_assert(sizeof(Chunk) <= kPageBytes);

struct Pool {
  std::mutex mu;
  Chunk* withRoom = nullptr;  // chunks with a free page, the one freed into last first
  size_t chunks = 0;
  size_t emptyChunks = 0;  // mapped chunks with no page in use (at most one is kept)
  size_t inUse = 0;
  bool huge = false;

  void link(Chunk* c) {
    c->prev = nullptr;
    c->next = withRoom;
    if (withRoom) withRoom->prev = c;
    withRoom = c;
    c->listed = true;
  }
  void unlink(Chunk* c) {
    if (c->prev) c->prev->next = c->next;
    else withRoom = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = nullptr;
    c->listed = false;
  }

  /// A new chunk, aligned to its size so that a page finds its chunk by masking.
  Chunk* map() {
    // Twice the size, then the unaligned ends are given back.
    void* raw = ::mmap(nullptr, 2 * kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kChunkBytes - 1) & ~(kChunkBytes - 1);
    if (aligned > start) ::munmap(raw, aligned - start);
    const uintptr_t end = start + 2 * kChunkBytes;
    if (end > aligned + kChunkBytes) ::munmap(reinterpret_cast<void*>(aligned + kChunkBytes), end - aligned - kChunkBytes);
    void* base = reinterpret_cast<void*>(aligned);
    // A hint: where THP is off the chunk is plain pages and everything works the same.
    if (::madvise(base, kChunkBytes, MADV_HUGEPAGE) == 0) huge = true;
    ++chunks;
    ++emptyChunks;
    return new (base) Chunk();
  }
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tables may be freed during static destruction
  return *p;
}

Chunk* chunkOf(void* page) {
  return reinterpret_cast<Chunk*>(reinterpret_cast<uintptr_t>(page) & ~(kChunkBytes - 1));
}

}  // namespace

void* allocate() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.withRoom == nullptr) p.link(p.map());
  Chunk* c = p.withRoom;
  void* page;
  if (c->freeList != nullptr) {
    page = c->freeList;
    c->freeList = *static_cast<void**>(page);
  } else {
    page = reinterpret_cast<char*>(c) + c->fresh * kPageBytes;
    ++c->fresh;
  }
  if (c->used++ == 0) --p.emptyChunks;
  if (c->freeList == nullptr && c->fresh == kPagesPerChunk) p.unlink(c);  // full
  ++p.inUse;
  return page;
}

void release(void* page) {
  if (page == nullptr) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  Chunk* c = chunkOf(page);
  *static_cast<void**>(page) = c->freeList;
  c->freeList = page;
  --p.inUse;
  if (--c->used > 0) {
    if (!c->listed) p.link(c);
    else if (p.withRoom != c) {  // freed into last: allocated from first
      p.unlink(c);
      p.link(c);
    }
    return;
  }
  if (p.emptyChunks == 0) {  // keep one empty chunk for the next allocation
    ++p.emptyChunks;
    if (!c->listed) p.link(c);
    return;
  }
  if (c->listed) p.unlink(c);
  c->~Chunk();
  ::munmap(c, kChunkBytes);
  --p.chunks;
}

Stats stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return {p.chunks, p.inUse, p.huge};
}

#endif

}  // namespace jobhost::state::slot_pages
