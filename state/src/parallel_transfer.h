// state/src/parallel_transfer.h — runs the file transfers of one snapshot or restore on a
// few threads (state.backend.rocksdb.checkpoint.transfer.thread.num, as Flink's
// RocksDBStateDownloader/Uploader), and a storage batch's directory fsyncs.
//
// Written here rather than taken from a library: kj's thread support has no pool, and a
// transfer needs only "n independent jobs, at most k at a time, first error wins" — a
// few lines over std::thread, with threads that live only as long as one call.
//
// Thread-safety: job(i) runs on up to `threads` threads at once, each index exactly once
// unless a job failed (then the indices not yet started are skipped). Returns once every
// job that started has returned, so no job runs once runParallel() is back. It does not
// wait for the helper threads themselves: they are detached, and one that the scheduler
// starts only after every job was taken finds nothing to do and ends without touching
// `job` (on a loaded machine a new thread may wait a whole scheduler tick to run, and a
// join would add that wait to every call). A thread that cannot be started
// (std::system_error, e.g. EAGAIN) is done without: the jobs run on those that could, at
// least the calling one.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "jobhost/state/status.h"

namespace jobhost::state {

/// Runs job(0) .. job(n-1) on min(threads, n) threads (the calling thread is one of them)
/// and returns OK, or the error of the failed job with the lowest index (so the message
/// does not depend on scheduling among the jobs that ran).
inline Status runParallel(size_t n, int threads, const std::function<Status(size_t)>& job) {
  // Shared with the helper threads, which may outlive this call (see above).
  struct Jobs {
    std::mutex mu;
    std::condition_variable idle;
    const std::function<Status(size_t)>* job = nullptr;  // called only for a taken index
    size_t n = 0;
    size_t next = 0;         // GUARDED_BY(mu); the next index to take
    size_t running = 0;      // GUARDED_BY(mu); jobs taken and not yet returned
    bool failed = false;     // GUARDED_BY(mu)
    size_t firstIndex = 0;   // GUARDED_BY(mu)
    Status first;            // GUARDED_BY(mu)
  };
  auto jobs = std::make_shared<Jobs>();
  jobs->job = &job;
  jobs->n = n;
  jobs->firstIndex = n;
  auto worker = [jobs] {
    std::unique_lock<std::mutex> lock(jobs->mu);
    while (!jobs->failed && jobs->next < jobs->n) {
      const size_t i = jobs->next++;
      ++jobs->running;
      lock.unlock();
      Status s = (*jobs->job)(i);
      lock.lock();
      --jobs->running;
      if (!s.ok()) {
        if (i < jobs->firstIndex) {
          jobs->firstIndex = i;
          jobs->first = std::move(s);
        }
        jobs->failed = true;
      }
    }
    if (jobs->running == 0) jobs->idle.notify_all();
  };
  const size_t extra = std::min<size_t>(n, static_cast<size_t>(std::max(threads, 1))) - (n > 0 ? 1 : 0);
  for (size_t t = 0; t < extra; ++t) {
    try {
      std::thread(worker).detach();
    } catch (const std::system_error&) {  // no thread to be had: fewer do the work
      break;
    }
  }
  worker();  // the calling thread takes jobs too; back here, none is left to take
  std::unique_lock<std::mutex> lock(jobs->mu);
  jobs->idle.wait(lock, [&] { return jobs->running == 0; });
  return std::move(jobs->first);
}

}  // namespace jobhost::state
