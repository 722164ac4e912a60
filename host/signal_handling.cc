#include "signal_handling.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "control/job_control.h"
#include "job_runner.h"

namespace jobhost::host {

namespace {
std::atomic<bool> gInterrupted{false};
std::atomic<JobControl*> gTarget{nullptr};
}  // namespace

void setSignalTarget(JobControl* job) { gTarget.store(job); }

bool interruptedBySignal() { return gInterrupted.load(); }

bool sleepUnlessInterrupted(std::chrono::milliseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  while (!interruptedBySignal()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(100)));
  }
  return false;
}

void installSignalHandling() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (gInterrupted.exchange(true)) {
        std::fprintf(stderr, "second interrupt: exiting now\n");
        std::_Exit(kExitInterrupted);
      }
      spdlog::info("received {}: stopping the job (press Ctrl-C again to exit at once)",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      if (auto* c = gTarget.load()) c->cancel(false, std::nullopt).ok();
    }
  }).detach();
}

}  // namespace jobhost::host
