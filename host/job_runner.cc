#include "job_runner.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/preflight.h"
#include "config/configuration.h"
#include "jobhost/job.h"
#include "jobhost/stream.h"
#include "plugin/plugin_loader.h"
#include "runtime/job_execution.h"
#include "runtime/restart_strategy.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> gInterrupted{false};
std::atomic<JobExecution*> gExecution{nullptr};
std::mutex gExecutionMu;

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

struct Prepared {
  std::unique_ptr<Job> job;
  Plan plan;
};

/// Creates the job, applies configure() into `config` and builds the plan.
Prepared prepareJob(const JobClassInfo& info, const RunOptions& o, Configuration* config, bool applyConfigure) {
  Prepared p;
  p.job.reset(info.create());
  if (applyConfigure) {
    JobConfig jc;
    callUser("configure()", [&] { p.job->configure(jc); });
    for (auto& [k, v] : jc.values()) config->set(k, v, Configuration::Layer::kJob);
  }
  StreamEnvironment env{JobArgs(o.jobArgs)};
  p.job->build(env);
  p.plan = env.takePlan();
  return p;
}

}  // namespace

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
      std::lock_guard lock(gExecutionMu);
      if (auto* e = gExecution.load()) e->cancel();
    }
  }).detach();
}

int runJob(const RunOptions& o) {
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
    std::optional<std::string> file = o.configFile;
    if (!file)
      if (const char* d = std::getenv("JOBHOST_CONF_DIR"); d && fs::exists(fs::path(d) / "config.yaml"))
        file = (fs::path(d) / "config.yaml").string();
    if (file) config.loadYamlFile(*file);
    for (const auto& d : o.defines) config.setFromArgument(d);
    if (o.parallelism) config.set("parallelism.default", std::to_string(*o.parallelism), Configuration::Layer::kCommandLine);
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

  if (coordinator) coordinator->start();
  int attempt = 0;
  int exitCode = kExitOk;
  for (;;) {
    ++attempt;
    // Latest completed checkpoint of this job, else the initial snapshot.
    std::optional<state::CheckpointMetadata> own = coordinator ? coordinator->latestCompleted() : std::nullopt;
    RestoreSource rs;
    if (own) {
      rs.metadata = &*own;
      rs.storage = &coordinator->storage();
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
      if (own) spdlog::info("restoring from checkpoint {} ({})", own->checkpointId, coordinator->pathOf(own->checkpointId));
    }
    auto exec = std::make_unique<JobExecution>(std::move(prepared.plan), ec, coordinator.get());
    state::Status ps = exec->prepare(rs.metadata ? &rs : nullptr);
    if (!ps.ok()) {
      spdlog::error("job {} failed while restoring state, not retrying: {}", jobId, ps.message());
      exitCode = ps.isIncompatible() || ps.isCorruption() || ps.isNotFound() ? kExitIncompatible : kExitJobFailed;
      break;
    }
    {
      std::lock_guard lock(gExecutionMu);
      gExecution.store(exec.get());
    }
    if (coordinator) coordinator->attach(exec.get());
    exec->start();
    if (gInterrupted.load()) exec->cancel();
    ExecutionResult result = exec->wait();
    if (coordinator) coordinator->detach();
    {
      std::lock_guard lock(gExecutionMu);
      gExecution.store(nullptr);
    }
    exec.reset();
    if (result.kind == ExecutionResult::kFinished) {
      spdlog::info("job {} ({}) finished", jobId, className);
      break;
    }
    if (result.kind == ExecutionResult::kCancelled || gInterrupted.load()) {
      spdlog::info("job {} stopped", jobId);
      exitCode = kExitInterrupted;
      break;
    }
    std::string where = result.operatorName.empty() ? "" : "operator '" + result.operatorName + "' " + result.subtask + ": ";
    std::chrono::milliseconds delay{0};
    if (!restart->onFailure(&delay)) {
      spdlog::error("job {} failed: Recovery is suppressed by {}; root cause: {}{}", jobId, restart->describe(), where,
                    result.message);
      exitCode = kExitJobFailed;
      break;
    }
    spdlog::warn("job {} attempt {} failed: {}{}; restarting in {} ({})", jobId, attempt, where, result.message,
                 formatDuration(delay), restart->describe());
    auto until = std::chrono::steady_clock::now() + delay;
    while (std::chrono::steady_clock::now() < until && !gInterrupted.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (gInterrupted.load()) {
      exitCode = kExitInterrupted;
      break;
    }
  }
  if (coordinator) {
    coordinator->stop();
    if (auto last = coordinator->latestCompleted())
      spdlog::info("latest checkpoint: {} (restore with: jobhost run -s {} -c {} {})", coordinator->pathOf(last->checkpointId),
                   coordinator->pathOf(last->checkpointId), className, o.pluginPath);
  }
  std::error_code rmEc;
  fs::remove_all(localDir, rmEc);
  return exitCode;
}

}  // namespace jobhost::host
