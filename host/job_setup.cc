#include "job_setup.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>

#include "jobhost/state/s3_storage.h"
#include "jobhost/stream.h"
#include "config/configuration_layers.h"
#include "config/rocksdb_settings.h"
#include "exit_codes.h"
#include "job_work_directory.h"
#include "plugin/job_class.h"
#include "plugin/user_code.h"
#include "runtime/restart_strategy.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {
std::string defaultCheckpointDir() {
  if (const char* h = std::getenv("JOBHOST_HOME")) return (fs::path(h) / "checkpoints").string();
  if (const char* h = std::getenv("HOME")) return (fs::path(h) / ".jobhost" / "checkpoints").string();
  std::error_code ec;  // TMPDIR missing or not a directory: /tmp, as the library would without TMPDIR
  fs::path tmp = fs::temp_directory_path(ec);
  return ((ec ? fs::path("/tmp") : tmp) / "jobhost-checkpoints").string();
}
/// A storage location key as a local path: a plain path or a file:/// URI. Other schemes
/// are refused (the storage interface allows adding them later).
std::string localPathOf(const Configuration& config, const std::string& key) {
  std::string v = config.get(key).value_or("");
  if (v.rfind("file://", 0) == 0) {
    std::string path = v.substr(7);
    if (path.empty() || path[0] != '/')
      throw ConfigError(key + " = '" + v + "': a file URI needs an absolute path, e.g. file:///var/lib/jobhost");
    return path;
  }
  if (state::isObjectStoreUri(v)) return v;  // s3://bucket/prefix: checkpoint storage on an object store
  auto colon = v.find("://");
  if (colon != std::string::npos)
    throw ConfigError(key + " = '" + v + "' (from " + config.origin(key) + "): the storage scheme '" +
                      v.substr(0, colon) + "' is not supported; use a local path, file:/// or s3://bucket/prefix");
  return v;
}

}  // namespace

Plan buildPlan(const JobSetup& setup, const RunOptions& o, std::vector<std::string>* unreadArguments) {
  std::unique_ptr<Job> job = createJob(*setup.info);
  StreamEnvironment env{JobArgs(o.jobArgs), /*planOnly=*/o.dryRun || o.planOnly};
  fenceUserCode(setup.className, "build()", [&] { job->build(env); });
  if (unreadArguments) {
    unreadArguments->clear();
    for (const auto& u : env.args().unread(setup.className))
      unreadArguments->push_back(
          u.message + (o.hostOptionNames.count(u.option) != 0
                           ? "; " + u.option + " is also a jobhost option, but jobhost's options go before the plugin "
                                 "path: everything after it is the job's"
                           : ""));
  }
  return env.takePlan();
}

int setupJob(const RunOptions& o, JobSetup* s, const PluginOpenOptions& pluginOptions) {
  PluginError perr;
  s->plugin = PluginLibrary::open(o.pluginPath, &perr, pluginOptions);
  if (!s->plugin) {
    std::cerr << "error: " << perr.message << "\n";
    return kExitUsage;
  }
  s->info = s->plugin->selectClass(o.jobClass, &perr);
  if (!s->info) {
    std::cerr << "error: " << perr.message << "\n";
    return kExitUsage;
  }
  s->className = s->info->name;
  Configuration& config = s->config;
  try {
    loadUserConfiguration(o.configFile, o.defines, o.parallelism, &config);
    {
      std::unique_ptr<Job> job = createJob(*s->info);
      applyJobConfiguration(*s->info, *job, &config);
    }
    s->plan = buildPlan(*s, o, &s->unreadArguments);
    std::string b = config.getString("state.backend.type");
    if (b != "hashmap" && b != "rocksdb")
      throw ConfigError("state.backend.type = '" + b + "' (from " + config.origin("state.backend.type") +
                        ") is unknown; use hashmap or rocksdb");
    s->backend = b == "rocksdb" ? state::BackendType::kRocksDb : state::BackendType::kHashMap;
    s->incremental = config.getBool("state.backend.incremental");
    s->rocksdb = rocksDbOptionsFrom(config);  // checked whatever the backend, like every key
    s->parallelism = static_cast<int>(config.getInt("parallelism.default", 1, 32768));
    s->maxParallelism = static_cast<int>(config.getInt("pipeline.max-parallelism", 1, 32768));
    if (s->parallelism > s->maxParallelism)
      throw ConfigError("parallelism " + std::to_string(s->parallelism) + " exceeds pipeline.max-parallelism " +
                        std::to_string(s->maxParallelism));
    s->numRetained = static_cast<int>(config.getInt("state.checkpoints.num-retained", 1, 1000000));
    s->interval = config.getDuration("execution.checkpointing.interval");
    s->autoWatermarkInterval = config.getDuration("pipeline.auto-watermark-interval");
    s->windowMiniBatchSize = config.getInt("pipeline.window.mini-batch.size", 0, 1 << 24);
    for (const char* key : {"taskmanager.network.memory.buffer-debloat.target",
                            "taskmanager.network.memory.buffer-debloat.period"})
      if (config.getDuration(key).count() <= 0)
        throw ConfigError(std::string(key) + " = '" + config.getString(key) + "' (from " + config.origin(key) +
                          ") must be longer than 0 ms; to turn debloating off set "
                          "taskmanager.network.memory.buffer-debloat.enabled: false");
    if (config.getBool("taskmanager.network.memory.buffer-debloat.enabled"))
      s->bufferDebloatTarget = config.getDuration("taskmanager.network.memory.buffer-debloat.target");
    s->bufferDebloatPeriod = config.getDuration("taskmanager.network.memory.buffer-debloat.period");
    s->checkpointTimeout = config.getDuration("execution.checkpointing.timeout");
    s->heartbeatTimeout = config.getDuration("heartbeat.timeout");
    if (s->heartbeatTimeout < std::chrono::seconds(1))
      throw ConfigError("heartbeat.timeout = '" + config.getString("heartbeat.timeout") + "' (from " +
                        config.origin("heartbeat.timeout") +
                        ") must be 1 s or more: a running worker reports every 0.5 s");
    s->unalignedCheckpoints = config.getBool("execution.checkpointing.unaligned");
    s->alignedCheckpointTimeout = config.getDuration("execution.checkpointing.aligned-checkpoint-timeout");
    s->tolerableFailures =
        static_cast<int>(config.getInt("execution.checkpointing.tolerable-failed-checkpoints", 0, 1000000));
    createRestartStrategy(config);  // validates the restart-strategy.* keys now
    if (auto given = config.get("state.checkpoints.dir"); given && given->empty())
      throw ConfigError("state.checkpoints.dir (from " + config.origin("state.checkpoints.dir") +
                        ") is empty: name a directory, or leave the key out for the default, " + defaultCheckpointDir());
    std::string dir = localPathOf(config, "state.checkpoints.dir");
    s->checkpointDir = state::isObjectStoreUri(dir) ? dir : fs::absolute(dir.empty() ? defaultCheckpointDir() : dir).string();
    s->savepointDir = localPathOf(config, "state.savepoints.dir");
    // An object store's URI and credentials are checked now, not at the first checkpoint.
    for (auto [key, uri] : {std::pair<const char*, std::string*>{"state.checkpoints.dir", &s->checkpointDir},
                            {"state.savepoints.dir", &s->savepointDir}}) {
      if (!state::isObjectStoreUri(*uri)) continue;
      while (uri->size() > uri->find("://") + 3 && uri->back() == '/') uri->pop_back();
      auto opened = state::openStorage(*uri);
      if (!opened.ok()) throw ConfigError(std::string(key) + " = '" + *uri + "': " + opened.status().message());
    }
    std::string retention = config.getString("execution.checkpointing.externalized-checkpoint-retention");
    if (retention != "RETAIN_ON_CANCELLATION" && retention != "DELETE_ON_CANCELLATION")
      throw ConfigError("execution.checkpointing.externalized-checkpoint-retention = '" + retention +
                        "' is unknown; use RETAIN_ON_CANCELLATION or DELETE_ON_CANCELLATION");
    s->deleteOnCancel = retention == "DELETE_ON_CANCELLATION";
    s->stopWithSavepointOnSigterm = config.getBool("execution.stop-with-savepoint-on-sigterm");
    if (s->stopWithSavepointOnSigterm && s->savepointDir.empty())
      throw ConfigError("execution.stop-with-savepoint-on-sigterm = true (from " +
                        config.origin("execution.stop-with-savepoint-on-sigterm") +
                        ") needs state.savepoints.dir: where the savepoint goes");
    if (s->stopWithSavepointOnSigterm && s->interval.count() <= 0)
      throw ConfigError("execution.stop-with-savepoint-on-sigterm = true needs checkpointing "
                        "(execution.checkpointing.interval): savepoints are taken by the checkpoint coordinator");
    if (config.get("health.readiness.max-checkpoint-age")) {
      s->readinessMaxCheckpointAge = config.getDuration("health.readiness.max-checkpoint-age");
      if (s->readinessMaxCheckpointAge.count() <= 0)
        throw ConfigError("health.readiness.max-checkpoint-age (from " +
                          config.origin("health.readiness.max-checkpoint-age") + ") must be a positive duration");
    } else if (s->interval.count() > 0) {
      s->readinessMaxCheckpointAge = std::max<std::chrono::milliseconds>(5 * s->interval, std::chrono::minutes(1));
    }
    std::string local = config.get("state.local.dir").value_or("");
    s->localDirIsDefault = local.empty();
    s->localDirRoot = local.empty() ? defaultWorkRoot() : fs::absolute(local).lexically_normal().string();
    s->operators = describeOperators(s->plan, s->parallelism);
  } catch (const ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const JobArgumentError& e) {
    std::cerr << "error: " << s->className << ": " << e.what() << "\n";
    if (o.dryRun)
      std::cerr << "  the check builds the class's dataflow from the job arguments given after the plugin path:\n"
                << "  jobhost check -s <snapshot> -c " << s->className << " " << o.pluginPath << " <job arguments>\n";
    return kExitUsage;
  } catch (const UserCodeFailure& e) {
    std::cerr << "error: " << e.what() << " (in " << o.pluginPath << "); fix the job class\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "error: " << s->className << " failed while defining its dataflow: " << e.what() << "\n";
    return kExitUsage;
  }
  return 0;
}

std::string attemptLocalDir(const JobSetup& setup, const std::string& jobId, int attempt) {
  return attemptWorkDir(setup.localDirRoot, jobId, attempt);
}

}  // namespace jobhost::host
