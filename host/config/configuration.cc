#include "config/configuration.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace jobhost::host {

const std::vector<ConfigKey>& knownConfigKeys() {
  static const std::vector<ConfigKey> keys = {
      {"state.backend.type", "hashmap", "Keyed state backend: hashmap (heap) or rocksdb."},
      {"state.backend.incremental", "false", "incremental checkpoints: rocksdb uploads only new SST files, hashmap writes only the key groups changed since the last completed checkpoint (savepoints stay self-contained)."},
      {"state.backend.rocksdb.writebuffer.size", "64mb", "rocksdb: memtable size per state (64 KiB to 64 GiB)."},
      {"state.backend.rocksdb.writebuffer.count", "2", "rocksdb: memtables per state, the active one included (1-64)."},
      {"state.backend.rocksdb.block.cache-size", "8mb",
       "rocksdb: block cache of each RocksDB instance, shared by its states."},
      {"state.backend.rocksdb.entry-cache.size", "32mb",
       "rocksdb: write-back cache of ValueState values and MapState entries in front of each RocksDB instance, "
       "written to it at every checkpoint and when full; 0 turns it off."},
      {"state.backend.rocksdb.compaction.style", "LEVEL",
       "rocksdb: LEVEL, UNIVERSAL or FIFO (FIFO drops the oldest data beyond 1 GiB per state)."},
      {"state.backend.rocksdb.checkpoint.transfer.thread.num", "4",
       "rocksdb: threads uploading a checkpoint's files and downloading them on restore (1-64)."},
      {"state.checkpoints.dir", nullptr,
       "Where checkpoints go: <dir>/<jobId>/chk-<n>. Default: $JOBHOST_HOME/checkpoints (~/.jobhost/checkpoints)."},
      {"state.savepoints.dir", nullptr, "Default target directory of savepoints."},
      {"state.checkpoints.num-retained", "1", "How many completed checkpoints to keep."},
      {"execution.checkpointing.interval", "0", "Checkpoint interval, e.g. 500ms or 10 s; 0 disables checkpoints."},
      {"execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION",
       "DELETE_ON_CANCELLATION or RETAIN_ON_CANCELLATION: keep checkpoints when the job is cancelled."},
      {"execution.checkpointing.tolerable-failed-checkpoints", "0",
       "Consecutive failed checkpoints tolerated before the job fails."},
      {"execution.checkpointing.timeout", "10 min", "A checkpoint not complete after this long is aborted."},
      {"heartbeat.timeout", "50 s",
       "A running job's worker process that sends nothing for this long (it reports every 0.5 s) is taken for hung "
       "or stopped: killed, and restarted from the latest checkpoint as the restart strategy says."},
      {"execution.checkpointing.unaligned", "false",
       "Unaligned checkpoints (Flink's FLIP-76): a checkpoint barrier overtakes the records queued in each input "
       "channel and a task snapshots at the first barrier, without waiting for the others; the records it overtook "
       "or took before the last barrier are stored in the checkpoint (metadata format version 2) and processed "
       "first on restore, at any parallelism. Under back-pressure checkpoints no longer wait for full channels. "
       "Savepoints stay aligned."},
      {"execution.checkpointing.aligned-checkpoint-timeout", "0",
       "With execution.checkpointing.unaligned: 0 makes every checkpoint unaligned from the start; a longer "
       "duration starts each checkpoint aligned and turns it unaligned at a task whose barriers are later than this "
       "after the checkpoint was triggered (Flink's aligned checkpoint timeout): in-flight records are stored only "
       "under back-pressure."},
      {"execution.stop-with-savepoint-on-sigterm", "false",
       "SIGTERM (and Ctrl-C) stop the job with a savepoint into state.savepoints.dir, as `jobhost stop` does, instead "
       "of cancelling it (if the savepoint fails, the job is cancelled)."},
      {"health.readiness.max-checkpoint-age", nullptr,
       "jobhost run --health-port: /readyz answers 503 once the newest checkpoint is older than this. Default: 5 "
       "checkpoint intervals, at least 1 min."},
      {"ui.read-only", "false", "jobhost ui: disable the savepoint and cancel endpoints."},
      {"restart-strategy.type", "none", "none, fixed-delay, failure-rate or exponential-delay."},
      {"restart-strategy.fixed-delay.attempts", "1", "fixed-delay: restarts before giving up."},
      {"restart-strategy.fixed-delay.delay", "1 s", "fixed-delay: pause before each restart."},
      {"restart-strategy.failure-rate.max-failures-per-interval", "1", "failure-rate: failures allowed per interval."},
      {"restart-strategy.failure-rate.failure-rate-interval", "1 min", "failure-rate: the measuring interval."},
      {"restart-strategy.failure-rate.delay", "1 s", "failure-rate: pause before each restart."},
      {"restart-strategy.exponential-delay.initial-backoff", "1 s", "exponential-delay: first pause."},
      {"restart-strategy.exponential-delay.max-backoff", "1 min", "exponential-delay: longest pause."},
      {"restart-strategy.exponential-delay.backoff-multiplier", "1.5", "exponential-delay: growth per failure."},
      {"restart-strategy.exponential-delay.attempts-before-reset-backoff", "2147483647",
       "exponential-delay: restarts before giving up (counted since the backoff was last reset)."},
      {"restart-strategy.exponential-delay.reset-backoff-threshold", "1 h",
       "exponential-delay: a job that ran this long without a failure starts over at initial-backoff."},
      {"restart-strategy.exponential-delay.jitter-factor", "0.1",
       "exponential-delay: each pause is drawn from [pause*(1-f), pause*(1+f)], so that many jobs do not restart "
       "in step."},
      {"parallelism.default", "1", "Subtasks per keyed operator (the -p option)."},
      {"pipeline.max-parallelism", "128", "Number of key groups; fixed for the life of the state."},
      {"pipeline.auto-watermark-interval", "200 ms",
       "How often watermark assigners (assignTimestampsAndWatermarks) emit a watermark; 0 disables periodic "
       "watermarks (a bounded input still ends with the maximum watermark)."},
      {"pipeline.window.mini-batch.size", "0",
       "Event-time aggregate and reduce windows (tumbling, sliding) fold records into up to this many (key, pane) "
       "accumulators in memory and write them to keyed state before a checkpoint barrier and before a watermark "
       "that fires one of their windows; 0 (the default) writes every record to state. Calls the function's "
       "merge() (reduce: the function itself) for every window kind, which must give what folding the records "
       "one by one gives. 16384 is a good size."},
      {"taskmanager.network.memory.buffer-debloat.enabled", "true",
       "Size each input channel to what its task consumes in the debloat target (measured while it runs), so a "
       "checkpoint barrier waits behind at most that much data; false: every channel holds 512 KiB."},
      {"taskmanager.network.memory.buffer-debloat.target", "100 ms",
       "Buffer debloating: the time the data in one input channel should take its task to consume. Smaller "
       "shortens barrier alignment under back-pressure (and the data in flight); 10 ms costs some throughput "
       "(NexmarkQ7 about 10 %). Flink's default is 1 s, for network channels; ours are queues between threads."},
      {"taskmanager.network.memory.buffer-debloat.period", "200 ms",
       "Buffer debloating: how often each task measures its consumption rate and resizes its channels."},
      {"s3.endpoint", nullptr,
       "S3 checkpoint storage (s3://bucket/prefix): the endpoint URL, e.g. http://127.0.0.1:7480. Default: "
       "$AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else https://s3.<region>.amazonaws.com."},
      {"s3.path.style.access", "false", "S3: address buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint>."},
      {"s3.access-key", nullptr, "S3: access key. Default: $AWS_ACCESS_KEY_ID."},
      {"s3.secret-key", nullptr, "S3: secret key (never logged or shown). Default: $AWS_SECRET_ACCESS_KEY."},
      {"s3.entropy.key", nullptr,
       "S3: a path component of the checkpoint directory replaced by entropy in data files' keys (removed for "
       "_metadata)."},
      {"s3.entropy.length", "4", "S3: characters of entropy that replace s3.entropy.key (1-32)."},
      {"s3.upload.min.part.size", "5mb", "S3: files above this size go up as multipart uploads in parts of this size."},
      {"state.local.dir", nullptr,
       "Working directories of rocksdb instances (<dir>/<jobId>/attempt-<n>, private). Default: "
       "$XDG_RUNTIME_DIR/jobhost/work, else /tmp/jobhost-<uid>/work."},
  };
  return keys;
}

Configuration::Configuration() {
  for (const auto& k : knownConfigKeys())
    if (k.defaultValue) values_[k.key] = {k.defaultValue, Layer::kDefault};
}

namespace {
void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string k = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? k : prefix + "." + k, out);
    }
  } else if (node.IsScalar()) {
    out[prefix] = node.as<std::string>();
  } else if (node.IsNull()) {
    if (!prefix.empty()) out[prefix] = "";  // an empty file (every line a comment) sets nothing
  } else {
    throw ConfigError("configuration key '" + prefix + "' must be a single value, not a list");
  }
}
}  // namespace

void Configuration::loadYamlFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || std::filesystem::is_directory(path, ec)) throw ConfigError("cannot read configuration file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  loadYaml(text.str(), path);
}

void Configuration::loadYaml(const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("configuration file '" + path + "' is not valid YAML: line " + std::to_string(e.mark.line + 1) +
                      ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (!root.IsMap() && !root.IsNull())
    throw ConfigError("configuration file '" + path + "' must be a map of keys to values");
  std::map<std::string, std::string> flat;
  try {
    flatten(root, "", flat);
  } catch (const YAML::Exception& e) {
    throw ConfigError("configuration file '" + path + "': " + e.msg);
  }
  file_ = path;
  for (auto& [k, v] : flat) set(k, v, Layer::kFile);
}

void Configuration::set(const std::string& key, const std::string& value, Layer layer) {
  auto it = values_.find(key);
  if (it != values_.end() && it->second.layer > layer) return;  // a higher layer already set it
  if (it != values_.end() && it->second.layer == Layer::kFile && layer == Layer::kJob && it->second.value != value)
    fileValuesOverridden_[key] = it->second.value;
  values_[key] = {value, layer};
}

void Configuration::setFromArgument(const std::string& a) {
  auto eq = a.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("-D expects key=value, got '" + a + "' (e.g. -D state.backend.type=rocksdb)");
  set(a.substr(0, eq), a.substr(eq + 1), Layer::kCommandLine);
}

std::optional<std::string> Configuration::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second.value;
}

std::string Configuration::getString(const std::string& key) const { return get(key).value_or(""); }

std::string Configuration::origin(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return "unset";
  switch (it->second.layer) {
    case Layer::kDefault: return "default";
    case Layer::kFile: return file_;
    case Layer::kJob: return "the job's configure()";
    case Layer::kCommandLine: return "-D";
  }
  return "?";
}

int64_t Configuration::getInt(const std::string& key, int64_t min, int64_t max) const {
  std::string v = getString(key);
  try {
    size_t used = 0;
    long long n = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument("");
    if (n < min || n > max)
      throw ConfigError(key + " = " + v + " (from " + origin(key) + ") is out of range [" + std::to_string(min) + ", " +
                        std::to_string(max) + "]");
    return n;
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception&) {
    throw ConfigError(key + " = '" + v + "' (from " + origin(key) + ") is not an integer");
  }
}

bool Configuration::getBool(const std::string& key) const {
  std::string v = getString(key);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no" || v.empty()) return false;
  throw ConfigError(key + " = '" + getString(key) + "' (from " + origin(key) + ") must be true or false");
}

std::chrono::milliseconds Configuration::getDuration(const std::string& key) const {
  auto d = parseDuration(getString(key));
  if (!d)
    throw ConfigError(key + " = '" + getString(key) + "' (from " + origin(key) +
                      ") is not a duration; use e.g. 500ms, 10 s, 1min");
  return *d;
}

std::map<std::string, std::string> Configuration::effective() const {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : values_) out[k] = isSecretKey(k) && !v.value.empty() ? std::string(kHiddenValue) : v.value;
  return out;
}

bool isSecretKey(std::string_view key) {
  return key == "s3.secret-key" || key.find("password") != std::string_view::npos ||
         key.find("secret") != std::string_view::npos;
}

std::vector<std::string> Configuration::suspiciousKeys() const {
  std::vector<std::string> out;
  std::string unknown;
  for (auto& [k, v] : values_) {
    // The job's own keys (configure()) are the plugin author's: only what the user set.
    if (v.layer == Layer::kDefault || v.layer == Layer::kJob) continue;
    bool known = false;
    for (const auto& kk : knownConfigKeys()) known |= k == kk.key;
    if (known) continue;
    bool typo = false;
    for (const auto& kk : knownConfigKeys()) {
      std::string a = k, b = kk.key;
      // Same prefix family and similar length: likely a typo.
      size_t common = 0;
      while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
      if (common >= std::min(a.size(), b.size()) * 2 / 3 && a.size() + 3 >= b.size() && b.size() + 3 >= a.size()) {
        out.push_back("unknown configuration key '" + k + "' (from " + origin(k) + "); did you mean '" + b + "'?");
        typo = true;
        break;
      }
    }
    if (!typo) unknown += (unknown.empty() ? "" : ", ") + ("'" + k + "' (from " + origin(k) + ")");
  }
  if (!unknown.empty())
    out.push_back("configuration keys jobhost does not know, so they have no effect: " + unknown +
                  " (the keys: README \"Configuration\")");
  for (const auto& [k, fileValue] : fileValuesOverridden_) {
    auto it = values_.find(k);
    if (it == values_.end() || it->second.layer != Layer::kJob) continue;  // -D overrides both
    out.push_back(k + ": " + (isSecretKey(k) ? std::string(kHiddenValue) : fileValue) + " in " + file_ +
                  " has no effect: the job's class sets " + (isSecretKey(k) ? std::string(kHiddenValue) : it->second.value) +
                  " (its declaration or configure()); -D " + k + "=… overrides the class");
  }
  return out;
}

}  // namespace jobhost::host
