#include "job_worker.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/checkpoint_record_capnp.h"
#include "exit_codes.h"
#include "job_setup.h"
#include "log_format.h"
#include "runtime/checkpoint_failure.h"
#include "runtime/worker_protocol.capnp.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

/// Frames to the supervisor; several threads send.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  template <class Fill>
  void send(Fill fill) {
    capnp::MallocMessageBuilder message;
    fill(message.initRoot<wire::FromWorker>());
    std::lock_guard lock(mu_);
    try {
      capnp::writeMessageToFd(fd_, message);
    } catch (const kj::Exception&) {
      // The supervisor is gone; PR_SET_PDEATHSIG ends us shortly.
    }
  }
  int fd() const { return fd_; }

 private:
  int fd_;
  std::mutex mu_;
};

// Written by the fatal-signal handler; see installCrashReporter.
int gCrashFd = -1;

void onFatalSignal(int sig) {
  if (gCrashFd >= 0) {
    char buf[512];
    const char* op = nullptr;
    const char* subtask = nullptr;
    activeOperatorOfThisThread(&op, &subtask);
    int n = 0;
    const char* name = strsignal(sig);
    // Only async-signal-safe calls: build the line by hand.
    auto append = [&](const char* s) {
      while (s && *s && n < static_cast<int>(sizeof buf) - 2) buf[n++] = *s++;
    };
    append(name ? name : "signal");
    append("\t");
    append(op ? op : "");
    append("\t");
    append(subtask ? subtask : "");
    buf[n++] = '\n';
    ssize_t w = ::write(gCrashFd, buf, static_cast<size_t>(n));
    (void)w;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void writeTaskStats(const std::vector<TaskMetricsSample>& tasks, capnp::List<wire::TaskStats>::Builder out) {
  for (unsigned i = 0; i < tasks.size(); ++i) {
    const TaskMetricsSample& t = tasks[i];
    auto b = out[i];
    b.setName(t.name);
    b.setSubtask(t.subtask);
    b.setParallelism(t.parallelism);
    b.setRecordsIn(t.recordsIn);
    b.setRecordsOut(t.recordsOut);
    b.setIdleNanos(t.idleNanos);
    b.setBackPressuredNanos(t.backPressuredNanos);
    b.setInputWatermark(t.inputWatermark);
    auto backends = b.initBackends(static_cast<unsigned>(t.backends.size()));
    for (unsigned j = 0; j < t.backends.size(); ++j) {
      backends[j].setOperatorUid(t.backends[j].operatorUid);
      backends[j].setBackend(t.backends[j].backend);
      backends[j].setEntries(t.backends[j].entries);
    }
  }
}

void installCrashReporter(int fd) {
  gCrashFd = fd;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction sa{};
    sa.sa_handler = onFatalSignal;
    sa.sa_flags = SA_RESETHAND;
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace

int runWorker(const RunOptions& o, const WorkerParams& w) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The supervisor died before PR_SET_PDEATHSIG took effect? (Compared with its pid, not
  // with 1: in a container the supervisor may itself be pid 1.)
  if (const char* sup = std::getenv("JOBHOST_SUPERVISOR_PID"); sup && getppid() != std::atoi(sup))
    return kExitJobFailed;
  installCrashReporter(w.crashFd);
  setLogJob(w.jobId, w.attempt);
  Channel channel(w.channelFd);
  auto end = [&](wire::EndKind kind, const std::string& message, const std::string& op, const std::string& subtask,
                 bool restoreFailure, int exitCode, bool storeUnavailable = false, bool dependencyUnavailable = false) {
    channel.send([&](wire::FromWorker::Builder b) {
      auto e = b.initEnded();
      e.setKind(kind);
      e.setMessage(message);
      e.setOperatorName(op);
      e.setSubtask(subtask);
      e.setRestoreFailure(restoreFailure);
      e.setExitCode(exitCode);
      e.setStoreUnavailable(storeUnavailable);
      e.setDependencyUnavailable(dependencyUnavailable);
    });
    return exitCode;
  };

  JobSetup setup;
  PluginOpenOptions pluginOptions;
  pluginOptions.fd = w.pluginFd;  // the supervisor's pinned copy: the bytes the job started with
  pluginOptions.sealedDigest = w.pluginDigest;
  pluginOptions.probeInitialisers = false;
  if (int rc = setupJob(o, &setup, pluginOptions); rc != 0)
    return end(wire::EndKind::SETUP_FAILED, "setup failed", "", "", false, rc);
  fs::path jobDir = fs::path(setup.checkpointDir) / w.jobId;

  // What to restore was decided by the supervisor (job_supervisor.cc): an exact snapshot.
  std::optional<ResolvedSnapshot> restoreFrom;
  if (w.restoreFrom) {
    auto r = openSnapshot(*w.restoreFrom);
    if (!r.ok()) {
      bool retryable = r.status().isIOError() || r.status().isNoSpace() || r.status().isPermissionDenied() ||
                       r.status().isUnavailable();
      return end(wire::EndKind::FAILED, "cannot read the snapshot to restore: " + r.status().toString(), "", "",
                 !retryable, retryable ? kExitJobFailed : kExitIncompatible, isStoreUnavailability(r.status()));
    }
    restoreFrom = std::move(*r);
  }

  std::unique_ptr<CheckpointCoordinator> coordinator;
  if (setup.interval.count() > 0) {
    auto storage = state::openStorage(jobDir.string());
    if (!storage.ok()) return end(wire::EndKind::FAILED, storage.status().message(), "", "", true, kExitUsage);
    // The supervisor collected what earlier attempts left; this only reads.
    auto registry = state::SnapshotRegistry::load(std::move(*storage));
    if (!registry.ok())
      return end(wire::EndKind::FAILED, "cannot read the job's checkpoints: " + registry.status().toString(), "", "",
                 false, kExitJobFailed, isStoreUnavailability(registry.status()));
    state::CheckpointMetadata templ;
    templ.jobId = w.jobId;
    templ.jobClass = setup.className;
    templ.pluginFile = fs::path(o.pluginPath).filename().string();
    templ.pluginDigest = setup.plugin->contentDigest();
    templ.sdkVersion = setup.info->sdkVersion;
    templ.parallelism = setup.parallelism;
    templ.backend = state::backendTypeName(setup.backend);
    templ.incremental = setup.incremental;
    templ.maxParallelism = setup.maxParallelism;
    CoordinatorOptions co;
    co.interval = setup.interval;
    co.numRetained = setup.numRetained;
    co.tolerableFailures = setup.tolerableFailures;
    co.timeout = setup.checkpointTimeout;
    co.storageRootDescription = jobDir.string();
    co.localStorage = !state::isObjectStoreUri(setup.checkpointDir);
    coordinator = std::make_unique<CheckpointCoordinator>(co, std::move(*registry), templ, w.firstCheckpointId);
    // The supervisor keeps the history across attempts: from here on every change goes to it.
    coordinator->setOnHistoryChange([&channel](const CheckpointRecord& r) {
      channel.send([&](wire::FromWorker::Builder b) { writeCheckpointRecord(b.initCheckpointEvent(), r); });
    });
  }

  RestoreSource rs;
  if (restoreFrom) {
    rs.metadata = &restoreFrom->metadata;
    rs.storage = restoreFrom->storage.get();
    rs.allowNonRestoredState = w.restoreInitial && o.allowNonRestoredState;
    spdlog::info("restoring from {} {}", w.restoreInitial ? "snapshot" : "checkpoint", restoreFrom->directory);
  }

  ExecutionConfig ec;
  ec.parallelism = setup.parallelism;
  ec.maxParallelism = setup.maxParallelism;
  ec.backend = setup.backend;
  ec.incremental = setup.incremental;
  ec.rocksdb = setup.rocksdb;
  ec.localStateDir = attemptLocalDir(setup, w.jobId, w.attempt);
  ec.autoWatermarkIntervalMs = setup.autoWatermarkInterval.count();
  ec.windowMiniBatchSize = static_cast<size_t>(setup.windowMiniBatchSize);
  ec.bufferDebloat.target = setup.bufferDebloatTarget;
  ec.bufferDebloat.period = setup.bufferDebloatPeriod;
  ec.unalignedCheckpoints = setup.unalignedCheckpoints;
  ec.alignedCheckpointTimeout = setup.alignedCheckpointTimeout;
  ec.checkpointing = coordinator != nullptr;
  ec.checkpointIntervalMs = coordinator ? setup.interval.count() : 0;

  Plan plan;
  try {
    plan = w.attempt == 1 ? std::move(setup.plan) : buildPlan(setup, o);
  } catch (const std::exception& e) {  // a UserCodeFailure naming the class and build()
    return end(wire::EndKind::FAILED, e.what(), "", "", false, kExitJobFailed);
  }
  auto exec = std::make_unique<JobExecution>(std::move(plan), ec, coordinator.get());
  // Requests from the supervisor, read from before prepare() on: opening the operators
  // can wait for a dependency that is down (a source for its brokers, up to its start-up
  // timeout), and a cancel (Ctrl-C, SIGTERM, jobhost cancel) must reach it meanwhile.
  std::mutex startMu;
  bool started = false, cancelRequested = false;  // guarded by startMu
  std::atomic<bool> finished{false};
  std::vector<std::thread> savepointThreads;
  std::mutex threadsMu;
  struct SavepointAsk {
    uint64_t id;
    std::string dir;
    state::SnapshotFormat format;
    bool stop, drain;
  };
  std::vector<SavepointAsk> queuedSavepoints;  // guarded by startMu: asked for before the job ran
  auto launchSavepoint = [&](SavepointAsk ask) {
    std::lock_guard lock(threadsMu);
    savepointThreads.emplace_back([&, ask] {
      state::Result<std::string> r =
          coordinator ? coordinator->triggerSavepoint(ask.dir, ask.format, std::chrono::minutes(10), ask.stop, ask.drain)
                      : state::Result<std::string>(state::Status::InvalidArgument("checkpointing is off for this job"));
      channel.send([&](wire::FromWorker::Builder b) {
        auto d = b.initSavepointDone();
        d.setRequestId(ask.id);
        if (r.ok()) d.setPath(*r);
        else d.setError(r.status().message());
      });
      // Stop-with-savepoint: the sources are suspended after its barrier, so ending
      // the job now emits nothing after the savepoint. (After the answer: the
      // supervisor learns of the savepoint before it learns the job ended.)
      if (ask.stop && r.ok()) exec->cancel();
    });
  };
  std::thread reader([&] {
    for (;;) {
      try {
        capnp::StreamFdMessageReader reader(channel.fd());
        auto msg = reader.getRoot<wire::ToWorker>();
        if (msg.isCancel()) {
          std::lock_guard lock(startMu);
          cancelRequested = true;
          if (started) exec->cancel();
          else exec->cancelOpening();  // e.g. a source's open() waiting for its brokers
        } else if (msg.isLease()) {
          // The supervisor's lease of the job directory (fencing): publish only until then.
          auto l = msg.getLease();
          if (coordinator) coordinator->setPublishDeadline(l.getPublishUntilNanos(), l.getWhy());
        } else if (msg.isSavepoint()) {
          auto sp = msg.getSavepoint();
          SavepointAsk ask{sp.getRequestId(), sp.getTargetDir(),
                           sp.getCanonical() ? state::SnapshotFormat::kCanonical : state::SnapshotFormat::kNative,
                           sp.getStop(), sp.getDrain()};
          std::lock_guard lock(startMu);
          if (started) launchSavepoint(ask);
          else queuedSavepoints.push_back(std::move(ask));  // taken once the job runs
        }
      } catch (const kj::Exception&) {
        return;  // the supervisor closed its end, or we are shutting down
      }
      if (finished.load()) return;
    }
  });
  auto stopReading = [&] {
    ::shutdown(channel.fd(), SHUT_RD);
    reader.join();
  };
  auto joinSavepoints = [&] {
    std::lock_guard lock(threadsMu);
    for (auto& t : savepointThreads) t.join();
  };
  state::Status ps = exec->prepare(rs.metadata ? &rs : nullptr);
  if (!ps.ok()) {
    stopReading();
    {
      std::lock_guard lock(startMu);
      for (auto& ask : queuedSavepoints) launchSavepoint(std::move(ask));  // "the job is not running"
    }
    joinSavepoints();
    std::error_code rm;
    fs::remove_all(ec.localStateDir, rm);
    {
      std::lock_guard lock(startMu);
      if (cancelRequested) return end(wire::EndKind::CANCELLED, "", "", "", false, kExitOk);
    }
    // Only incompatibility and corruption are final; I/O errors (a full local disk, a
    // storage read error) are task failures for the restart strategy.
    // So is an operator that cannot open as the job is configured (JobArgumentError).
    if (exec->prepareFailedOnUsage()) return end(wire::EndKind::FAILED, ps.message(), "", "", true, kExitUsage);
    bool restoreFailure = ps.isIncompatible() || ps.isCorruption();
    const bool dependency = exec->prepareFailedOnDependency();
    return end(wire::EndKind::FAILED, ps.toString(), "", "", restoreFailure,
               restoreFailure ? kExitIncompatible : kExitJobFailed, !dependency && isStoreUnavailability(ps), dependency);
  }
  if (coordinator) {
    coordinator->attach(exec.get());
    coordinator->start();
  }
  exec->start();
  {
    std::lock_guard lock(startMu);
    started = true;
    if (cancelRequested) exec->cancel();  // asked for while the job was being started
    for (auto& ask : queuedSavepoints) launchSavepoint(std::move(ask));
    queuedSavepoints.clear();
  }
  channel.send([](wire::FromWorker::Builder b) { b.setRunning(); });

  // The job's counters, every 500 ms and once at the end (the supervisor's status, the
  // dashboard and /metrics read them there).
  auto sendStats = [&] {
    auto last = coordinator ? coordinator->latestCompleted() : std::nullopt;
    auto tasks = exec->taskMetrics();
    auto health = coordinator ? coordinator->storeHealth() : CheckpointCoordinator::StoreHealth{};
    channel.send([&](wire::FromWorker::Builder b) {
      auto s = b.initStats();
      s.setRecordsIn(exec->recordsIn());
      s.setRecordsOut(exec->recordsOut());
      if (last) {
        s.setLastCheckpointId(last->checkpointId);
        s.setLastCheckpointPath(coordinator->pathOf(last->checkpointId));
      }
      writeTaskStats(tasks, s.initTasks(static_cast<unsigned>(tasks.size())));
      s.setStoreUnavailableSinceMs(health.unavailableSinceMs);
      s.setStoreError(health.lastError);
      s.setStoreOutages(health.outages);
      s.setCheckpointsDeclinedUnavailable(health.declined);
    });
  };
  // Woken as soon as the job ends (a sleep in steps would hold every run's end back by
  // up to a step: 10 ms on average of each short job, issue 33 N7).
  std::mutex statsMu;
  std::condition_variable statsWake;
  std::thread stats([&] {
    std::unique_lock lock(statsMu);
    while (!statsWake.wait_for(lock, std::chrono::milliseconds(500), [&] { return finished.load(); })) {
      lock.unlock();
      sendStats();
      lock.lock();
    }
  });

  ExecutionResult result = exec->wait();
  {
    std::lock_guard lock(statsMu);
    finished.store(true);
  }
  statsWake.notify_all();
  stats.join();
  // No request may reach the execution while it is torn down: stop reading first (the
  // write side stays open for the final report).
  stopReading();
  if (coordinator) {
    coordinator->detach();  // releases a savepoint still waiting
    coordinator->stop();
  }
  joinSavepoints();
  sendStats();
  exec.reset();
  std::error_code rm;
  fs::remove_all(ec.localStateDir, rm);
  int rc = 0;
  switch (result.kind) {
    case ExecutionResult::kFinished:
      rc = end(wire::EndKind::FINISHED, "", "", "", false, kExitOk);
      break;
    case ExecutionResult::kCancelled:
      rc = end(wire::EndKind::CANCELLED, "", "", "", false, kExitOk);
      break;
    case ExecutionResult::kFailed:
      rc = end(wire::EndKind::FAILED, result.message, result.operatorName, result.subtask,
               result.restoreFailure || result.usageError, result.usageError ? kExitUsage : kExitJobFailed, false,
               result.dependencyUnavailable);
      break;
  }
  ::shutdown(channel.fd(), SHUT_RDWR);
  return rc;
}

}  // namespace jobhost::host
