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
#include "exit_codes.h"

namespace jobhost::host {

namespace {
std::atomic<bool> gInterrupted{false};
std::atomic<JobControl*> gTarget{nullptr};
std::atomic<bool> gStopWithSavepoint{false};
}  // namespace

void setSignalTarget(JobControl* job, bool stopWithSavepoint) {
  gStopWithSavepoint.store(stopWithSavepoint);
  gTarget.store(job);
}

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
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      auto* c = gTarget.load();
      if (c && gStopWithSavepoint.load()) {
        spdlog::info("received {}: stopping the job with a savepoint (execution.stop-with-savepoint-on-sigterm; a "
                     "second signal exits at once)",
                     name);
        // On its own thread: this one must stay in sigwait for a second signal.
        std::thread([c] {
          auto sp = c->stop(std::nullopt, /*drain=*/false);
          if (sp.ok()) {
            spdlog::info("stopped with savepoint {}", *sp);
          } else {
            spdlog::error("the savepoint on SIGTERM failed ({}); cancelling the job instead (its checkpoints stay)",
                          sp.status().message());
            c->cancel(false, std::nullopt).ok();
          }
        }).detach();
      } else {
        spdlog::info("received {}: stopping the job (press Ctrl-C again to exit at once)", name);
        if (c) c->cancel(false, std::nullopt).ok();
      }
    }
  }).detach();
}

}  // namespace jobhost::host
