// state/src/parallel_transfer.h — runs the file transfers of one snapshot or restore on a
// few threads (state.backend.rocksdb.checkpoint.transfer.thread.num, as Flink's
// RocksDBStateDownloader/Uploader).
//
// Written here rather than taken from a library: kj's thread support has no pool, and a
// transfer needs only "n independent jobs, at most k at a time, first error wins" — a
// dozen lines over std::thread, with threads that live only as long as one call.
//
// Thread-safety: job(i) runs on up to `threads` threads at once, each index exactly once
// unless a job failed (then the indices not yet started are skipped). Returns after every
// started job has returned, so nothing runs once runParallel() is back. A thread that
// cannot be started (std::system_error, e.g. EAGAIN) is done without: the jobs run on
// those that could, at least the calling one.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "jobhost/state/status.h"

namespace jobhost::state {

/// Runs job(0) .. job(n-1) on min(threads, n) threads (the calling thread is one of them)
/// and returns OK, or the error of the failed job with the lowest index (so the message
/// does not depend on scheduling among the jobs that ran).
inline Status runParallel(size_t n, int threads, const std::function<Status(size_t)>& job) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t firstIndex = n;  // GUARDED_BY(mu)
  Status first;           // GUARDED_BY(mu)
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < n && !failed.load(std::memory_order_acquire); i = next.fetch_add(1)) {
      Status s = job(i);
      if (s.ok()) continue;
      std::lock_guard<std::mutex> lock(mu);
      if (i < firstIndex) {
        firstIndex = i;
        first = std::move(s);
      }
      failed.store(true, std::memory_order_release);
    }
  };
  const size_t extra = std::min<size_t>(n, static_cast<size_t>(std::max(threads, 1))) - (n > 0 ? 1 : 0);
  std::vector<std::thread> pool;
  pool.reserve(extra);
  for (size_t t = 0; t < extra; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {  // no thread to be had: fewer do the work
      break;
    }
  }
  worker();
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace jobhost::state
