#include "job_runner.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "control/job_control.h"
#include "checkpoint/preflight.h"
#include "config/configuration.h"
#if __has_include("control/control_server.h")
#include "control/control_server.h"
#define JOBHOST_HAS_CONTROL_SERVER 1
#endif
#include "jobhost/job.h"
#include "jobhost/stream.h"
#include "plugin/plugin_loader.h"
#include "runtime/job_execution.h"
#include "runtime/restart_strategy.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> gInterrupted{false};
std::atomic<JobControl*> gControl{nullptr};  // the running job, for the signal thread

std::string newJobId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(gen()));
  return buf;
}

std::string defaultCheckpointDir() {
  if (const char* h = std::getenv("JOBHOST_HOME")) return (fs::path(h) / "checkpoints").string();
  if (const char* h = std::getenv("HOME")) return (fs::path(h) / ".jobhost" / "checkpoints").string();
  return (fs::temp_directory_path() / "jobhost-checkpoints").string();
}

}  // namespace

void applyJobConfiguration(Job& job, Configuration* config);

namespace {

struct Prepared {
  std::unique_ptr<Job> job;
  Plan plan;
};

/// Creates the job, applies configure() into `config` and builds the plan.
Prepared prepareJob(const JobClassInfo& info, const RunOptions& o, Configuration* config, bool applyConfigure) {
  Prepared p;
  p.job.reset(info.create());
  if (applyConfigure) applyJobConfiguration(*p.job, config);
  StreamEnvironment env{JobArgs(o.jobArgs)};
  p.job->build(env);
  p.plan = env.takePlan();
  return p;
}

}  // namespace

void loadUserConfiguration(const std::optional<std::string>& configFile, const std::vector<std::string>& defines,
                           const std::optional<int>& parallelism, Configuration* config) {
  std::optional<std::string> file = configFile;
  if (!file)
    if (const char* d = std::getenv("JOBHOST_CONF_DIR"); d && fs::exists(fs::path(d) / "config.yaml"))
      file = (fs::path(d) / "config.yaml").string();
  if (file) config->loadYamlFile(*file);
  for (const auto& d : defines) config->setFromArgument(d);
  if (parallelism) config->set("parallelism.default", std::to_string(*parallelism), Configuration::Layer::kCommandLine);
}

void applyJobConfiguration(Job& job, Configuration* config) {
  JobConfig jc;
  callUser("configure()", [&] { job.configure(jc); });
  for (auto& [k, v] : jc.values()) config->set(k, v, Configuration::Layer::kJob);
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
      spdlog::info("received {}: stopping the job (press Ctrl-C again to exit at once)", sig == SIGINT ? "SIGINT" : "SIGTERM");
      if (auto* c = gControl.load()) c->cancel(false, std::nullopt).ok();
    }
  }).detach();
}


const char* jobStateName(JobState s) {
  switch (s) {
    case JobState::kCreated: return "CREATED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kRestarting: return "RESTARTING";
    case JobState::kCancelling: return "CANCELLING";
    case JobState::kFinished: return "FINISHED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCanceled: return "CANCELED";
  }
  return "?";
}

namespace {

/// Deletes a restored snapshot the job has claimed: its _metadata first (from then on it
/// no longer exists), then its own files, then shared files no other complete checkpoint
/// next to it references.
void disposeClaimedSnapshot(const ResolvedSnapshot& snap) {
  fs::path dir(snap.directory);
  std::string rel = dir.filename().string();
  std::set<std::string> stillUsed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.parent_path(), ec)) {
    if (e.path() == dir || !fs::exists(e.path() / state::kMetadataFileName)) continue;
    auto other = resolveSnapshot(e.path().string());
    if (!other.ok()) continue;
    for (const auto& f : other->metadata.referencedFiles()) stillUsed.insert(f.path);
  }
  state::CheckpointStorage& st = *snap.storage;
  if (auto s = st.remove(rel + "/" + state::kMetadataFileName); !s.ok()) {
    spdlog::warn("could not delete claimed snapshot {}: {}", snap.directory, s.toString());
    return;
  }
  for (const auto& f : snap.metadata.referencedFiles())
    if (!stillUsed.count(f.path) && f.path.rfind(rel + "/", 0) != 0) st.remove(f.path).ok();
  st.removeAll(rel).ok();
  fs::remove(dir, ec);
  spdlog::info("deleted the claimed snapshot {} (restore mode claim)", snap.directory);
}

class JobRunner : public JobControl {
 public:
  explicit JobRunner(const RunOptions& o) : o_(o) {}
  int run();

  JobStatusInfo status() override {
    std::lock_guard lock(mu_);
    JobStatusInfo s = info_;
    if (execution_) {
      s.recordsIn = execution_->recordsIn();
      s.recordsOut = execution_->recordsOut();
    }
    if (coordinator_)
      if (auto last = coordinator_->latestCompleted()) {
        s.lastCheckpointId = last->checkpointId;
        s.lastCheckpointPath = coordinator_->pathOf(last->checkpointId);
      }
    return s;
  }

  state::Result<std::string> savepoint(const std::optional<std::string>& targetDir,
                                       state::SnapshotFormat format) override {
    std::string dir = targetDir.value_or(savepointDir_);
    if (dir.empty())
      return state::Status::InvalidArgument(
          "no savepoint directory: pass one, or set state.savepoints.dir in the configuration or with -D");
    CheckpointCoordinator* c;
    {
      std::lock_guard lock(mu_);
      if (info_.state != JobState::kRunning)
        return state::Status::InvalidArgument(std::string("the job is ") + jobStateName(info_.state) +
                                              "; savepoints need a RUNNING job");
      c = coordinator_.get();
    }
    if (!c) return state::Status::InvalidArgument("the job has no checkpoint coordinator");
    return c->triggerSavepoint(fs::absolute(dir).string(), format);
  }

  state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& targetDir) override {
    std::string path;
    if (withSavepoint) {
      auto sp = savepoint(targetDir, state::SnapshotFormat::kCanonical);
      if (!sp.ok()) return sp.status();
      path = *sp;
    }
    std::lock_guard lock(mu_);
    cancelRequested_ = true;
    if (info_.state == JobState::kRunning || info_.state == JobState::kRestarting) info_.state = JobState::kCancelling;
    if (execution_) execution_->cancel();
    return path;
  }

  state::Result<std::string> stop(const std::optional<std::string>& targetDir) override {
    auto r = cancel(true, targetDir);
    if (r.ok()) {
      std::lock_guard lock(mu_);
      stopped_ = true;
    }
    return r;
  }

 private:
  void setState(JobState s) {
    std::lock_guard lock(mu_);
    if (cancelRequested_ && s == JobState::kRunning) return;
    info_.state = s;
  }
  void signalReady();

  const RunOptions& o_;
  std::mutex mu_;
  JobStatusInfo info_;                       // guarded by mu_
  JobExecution* execution_ = nullptr;        // guarded by mu_
  std::unique_ptr<CheckpointCoordinator> coordinator_;
  std::string savepointDir_;
  bool cancelRequested_ = false;             // guarded by mu_
  bool stopped_ = false;                     // guarded by mu_
  bool readySignalled_ = false;
};

void JobRunner::signalReady() {
  if (readySignalled_) return;
  readySignalled_ = true;
  const char* fdText = std::getenv("JOBHOST_READY_FD");
  if (!fdText) return;
  int fd = std::atoi(fdText);
  if (fd <= 2) return;
  std::string line = info_.jobId + "\n";
  ssize_t n = ::write(fd, line.data(), line.size());
  (void)n;
  ::close(fd);
}

}  // namespace

int runJob(const RunOptions& o) {
  JobRunner runner(o);
  return runner.run();
}

namespace {

int JobRunner::run() {
  const RunOptions& o = o_;
  PluginError perr;
  auto plugin = PluginLibrary::open(o.pluginPath, &perr);
  if (!plugin) {
    std::cerr << "error: " << perr.message << "\n";
    return kExitUsage;
  }
  const JobClassInfo* info = plugin->selectClass(o.jobClass, &perr);
  if (!info) {
    std::cerr << "error: " << perr.message << "\n";
    return kExitUsage;
  }
  const std::string className = info->name;

  Configuration config;
  Prepared prepared;
  state::BackendType backend;
  bool incremental;
  int parallelism, maxParallelism, numRetained;
  std::chrono::milliseconds interval;
  std::unique_ptr<RestartStrategy> restart;
  std::string checkpointDir;
  try {
    loadUserConfiguration(o.configFile, o.defines, o.parallelism, &config);
    prepared = prepareJob(*info, o, &config, true);
    for (const auto& w : config.suspiciousKeys()) spdlog::warn("{}", w);
    std::string b = config.getString("state.backend.type");
    if (b != "hashmap" && b != "rocksdb")
      throw ConfigError("state.backend.type = '" + b + "' (from " + config.origin("state.backend.type") +
                        ") is unknown; use hashmap or rocksdb");
    backend = b == "rocksdb" ? state::BackendType::kRocksDb : state::BackendType::kHashMap;
    incremental = backend == state::BackendType::kRocksDb && config.getBool("state.backend.incremental");
    parallelism = static_cast<int>(config.getInt("parallelism.default", 1, 32768));
    maxParallelism = static_cast<int>(config.getInt("pipeline.max-parallelism", 1, 32768));
    if (parallelism > maxParallelism)
      throw ConfigError("parallelism " + std::to_string(parallelism) + " exceeds pipeline.max-parallelism " +
                        std::to_string(maxParallelism));
    numRetained = static_cast<int>(config.getInt("state.checkpoints.num-retained", 1, 1000000));
    interval = config.getDuration("execution.checkpointing.interval");
    restart = createRestartStrategy(config);
    checkpointDir = config.get("state.checkpoints.dir").value_or("");
    if (checkpointDir.empty()) checkpointDir = defaultCheckpointDir();
  } catch (const ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const JobArgumentError& e) {
    std::cerr << "error: " << className << ": " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << className << " failed while defining its dataflow: " << e.what() << "\n";
    return kExitUsage;
  }
  std::vector<OperatorInfo> operators;
  try {
    operators = describeOperators(prepared.plan, parallelism);
  } catch (const std::exception& e) {
    std::cerr << "error: " << className << ": " << e.what() << "\n";
    return kExitUsage;
  }

  // Restore preflight.
  std::optional<ResolvedSnapshot> snapshot;
  if (o.fromSnapshot) {
    auto r = resolveSnapshot(*o.fromSnapshot);
    if (!r.ok()) {
      std::cerr << "error: cannot restore from " << *o.fromSnapshot << ": " << r.status().message() << "\n";
      return kExitIncompatible;
    }
    snapshot = std::move(*r);
    if (!snapshot->note.empty()) spdlog::info("{}", snapshot->note);
    PreflightInput in;
    in.metadata = &snapshot->metadata;
    in.storage = snapshot->storage.get();
    in.snapshotPath = snapshot->directory;
    in.operators = operators;
    in.selectedClass = className;
    in.pluginPath = o.pluginPath;
    in.pluginDigest = plugin->contentDigest();
    for (const auto& c : plugin->classes()) in.pluginClasses.push_back(c.name);
    in.backend = backend;
    in.incremental = incremental;
    in.maxParallelism = maxParallelism;
    in.parallelism = parallelism;
    in.allowNonRestoredState = o.allowNonRestoredState;
    PreflightReport report = runPreflight(in);
    if (!report.compatible()) {
      std::cerr << report.format(snapshot->directory);
      return kExitIncompatible;
    }
    if (o.dryRun) {
      std::cout << report.format(snapshot->directory);
      return kExitOk;
    }
    for (const auto& f : report.findings) spdlog::warn("restore check [{}]: {}", f.check, f.message);
  } else if (o.dryRun) {
    std::cout << "nothing to check: no snapshot given (-s)\n";
    return kExitOk;
  }

  // Storage for this job's checkpoints.
  const std::string jobId = newJobId();
  fs::path jobDir = fs::absolute(fs::path(checkpointDir) / jobId);
  std::unique_ptr<CheckpointCoordinator> coordinator;
  if (interval.count() > 0) {
    auto storage = state::openStorage(jobDir.string());
    if (!storage.ok()) {
      std::cerr << "error: state.checkpoints.dir: " << storage.status().message() << "\n";
      return kExitUsage;
    }
    std::error_code ec;
    fs::create_directories(jobDir / "shared", ec);
    fs::create_directories(jobDir / "taskowned", ec);
    if (ec) {
      std::cerr << "error: cannot create checkpoint directory " << jobDir.string() << ": " << ec.message() << "\n";
      return kExitUsage;
    }
    state::CheckpointMetadata templ;
    templ.jobId = jobId;
    templ.jobClass = className;
    templ.pluginFile = fs::path(o.pluginPath).filename().string();
    templ.pluginDigest = plugin->contentDigest();
    templ.sdkVersion = info->sdkVersion;
    templ.parallelism = parallelism;
    templ.backend = state::backendTypeName(backend);
    templ.incremental = incremental;
    templ.maxParallelism = maxParallelism;
    CoordinatorOptions co;
    co.interval = interval;
    co.numRetained = numRetained;
    uint64_t firstId = snapshot ? snapshot->metadata.checkpointId + 1 : 1;
    coordinator = std::make_unique<CheckpointCoordinator>(co, std::move(*storage), templ, firstId);
  }
  savepointDir_ = config.get("state.savepoints.dir").value_or("");
  std::string retention = config.getString("execution.checkpointing.externalized-checkpoint-retention");
  if (retention != "RETAIN_ON_CANCELLATION" && retention != "DELETE_ON_CANCELLATION") {
    std::cerr << "error: execution.checkpointing.externalized-checkpoint-retention = '" << retention
              << "' is unknown; use RETAIN_ON_CANCELLATION or DELETE_ON_CANCELLATION\n";
    return kExitUsage;
  }
  {
    std::lock_guard lock(mu_);
    info_.jobId = jobId;
    info_.jobClass = className;
    info_.pluginPath = fs::absolute(o.pluginPath).string();
    info_.backend = std::string(state::backendTypeName(backend)) + (incremental ? " (incremental)" : "");
    info_.parallelism = parallelism;
    info_.startedMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
    info_.checkpointDir = coordinator ? jobDir.string() : "";
    info_.pid = static_cast<int>(getpid());
  }
  fs::path localDir = config.get("state.local.dir") ? fs::path(*config.get("state.local.dir")) / jobId
                                                    : fs::temp_directory_path() / ("jobhost-" + jobId);
  spdlog::info("job {} ({}) starting: backend {}{}, parallelism {}, checkpoints {}", jobId, className,
               state::backendTypeName(backend), incremental ? " (incremental)" : "", parallelism,
               coordinator ? "every " + formatDuration(interval) + " to " + jobDir.string() : "off");

  ExecutionConfig ec;
  ec.parallelism = parallelism;
  ec.maxParallelism = maxParallelism;
  ec.backend = backend;
  ec.incremental = incremental;
  ec.localStateDir = localDir.string();

  if (coordinator && o.claimSnapshot && snapshot)
    coordinator->setOnComplete([this, &snapshot, claimed = false](const state::CheckpointMetadata&) mutable {
      if (claimed) return;
      claimed = true;
      disposeClaimedSnapshot(*snapshot);
    });
  if (coordinator) coordinator->start();
  coordinator_ = std::move(coordinator);
  auto& coordinatorRef = coordinator_;
  gControl.store(this);
#ifdef JOBHOST_HAS_CONTROL_SERVER
  std::unique_ptr<ControlServer> control;
  {
    auto server = ControlServer::start(*this, jobId);
    if (server.ok()) control = std::move(*server);
    else spdlog::warn("control endpoint unavailable ({}); list/savepoint/cancel cannot reach this job",
                      server.status().message());
  }
#else
  std::unique_ptr<int> control;
#endif
  int attempt = 0;
  int exitCode = kExitOk;
  bool cancelled = false;
  for (;;) {
    ++attempt;
    // Latest completed checkpoint of this job, else the initial snapshot.
    std::optional<state::CheckpointMetadata> own = coordinatorRef ? coordinatorRef->latestCompleted() : std::nullopt;
    RestoreSource rs;
    if (own) {
      rs.metadata = &*own;
      rs.storage = &coordinatorRef->storage();
    } else if (snapshot) {
      rs.metadata = &snapshot->metadata;
      rs.storage = snapshot->storage.get();
      rs.allowNonRestoredState = o.allowNonRestoredState;
    }
    if (attempt > 1) {
      try {
        Configuration unused;
        prepared = prepareJob(*info, o, &unused, false);
      } catch (const std::exception& e) {
        spdlog::error("{} failed while defining its dataflow on restart: {}", className, e.what());
        exitCode = kExitJobFailed;
        break;
      }
      if (own) spdlog::info("restoring from checkpoint {} ({})", own->checkpointId, coordinatorRef->pathOf(own->checkpointId));
    }
    auto exec = std::make_unique<JobExecution>(std::move(prepared.plan), ec, coordinatorRef.get());
    state::Status ps = exec->prepare(rs.metadata ? &rs : nullptr);
    if (!ps.ok()) {
      spdlog::error("job {} failed while restoring state, not retrying: {}", jobId, ps.message());
      exitCode = ps.isIncompatible() || ps.isCorruption() || ps.isNotFound() ? kExitIncompatible : kExitJobFailed;
      break;
    }
    if (coordinatorRef) coordinatorRef->attach(exec.get());
    exec->start();
    {
      std::lock_guard lock(mu_);
      execution_ = exec.get();
      if (cancelRequested_) exec->cancel();
    }
    setState(JobState::kRunning);
    signalReady();
    if (gInterrupted.load()) exec->cancel();
    ExecutionResult result = exec->wait();
    if (coordinatorRef) coordinatorRef->detach();
    {
      std::lock_guard lock(mu_);
      execution_ = nullptr;
    }
    exec.reset();
    if (result.kind == ExecutionResult::kFinished) {
      spdlog::info("job {} ({}) finished", jobId, className);
      setState(JobState::kFinished);
      break;
    }
    bool requested;
    {
      std::lock_guard lock(mu_);
      requested = cancelRequested_;
    }
    if (result.kind == ExecutionResult::kCancelled || requested) {
      if (gInterrupted.load()) {
        spdlog::info("job {} stopped by signal", jobId);
        exitCode = kExitInterrupted;
      } else {
        spdlog::info("job {} {}", jobId, stopped_ ? "stopped with a savepoint" : "cancelled");
      }
      setState(JobState::kCanceled);
      cancelled = true;
      break;
    }
    std::string where = result.operatorName.empty() ? "" : "operator '" + result.operatorName + "' " + result.subtask + ": ";
    std::chrono::milliseconds delay{0};
    {
      std::lock_guard lock(mu_);
      info_.lastFailure = where + result.message;
    }
    if (!restart->onFailure(&delay)) {
      setState(JobState::kFailed);
      spdlog::error("job {} failed: Recovery is suppressed by {}; root cause: {}{}", jobId, restart->describe(), where,
                    result.message);
      exitCode = kExitJobFailed;
      break;
    }
    spdlog::warn("job {} attempt {} failed: {}{}; restarting in {} ({})", jobId, attempt, where, result.message,
                 formatDuration(delay), restart->describe());
    {
      std::lock_guard lock(mu_);
      ++info_.restarts;
    }
    setState(JobState::kRestarting);
    auto until = std::chrono::steady_clock::now() + delay;
    while (std::chrono::steady_clock::now() < until && !gInterrupted.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (gInterrupted.load()) {
      exitCode = kExitInterrupted;
      break;
    }
  }
  control.reset();  // the socket goes before the process does
  gControl.store(nullptr);
  if (coordinatorRef) {
    coordinatorRef->stop();
    if (cancelled && retention == "DELETE_ON_CANCELLATION") {
      coordinatorRef->discardAll();
      std::error_code rmJob;
      fs::remove_all(jobDir, rmJob);
      spdlog::info("deleted the checkpoints of cancelled job {} (DELETE_ON_CANCELLATION)", jobId);
    } else if (auto last = coordinatorRef->latestCompleted()) {
      spdlog::info("latest checkpoint: {} (restore with: jobhost run -s {} -c {} {})",
                   coordinatorRef->pathOf(last->checkpointId), coordinatorRef->pathOf(last->checkpointId), className,
                   o.pluginPath);
    }
  }
  std::error_code rmEc;
  fs::remove_all(localDir, rmEc);
  return exitCode;
}

}  // namespace

}  // namespace jobhost::host
