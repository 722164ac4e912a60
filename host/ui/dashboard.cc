// The REST API and page of `jobhost ui` (see dashboard.h); the HTTP server is in
// http_server.cc.
#include "ui/dashboard.h"

// GCC 12 reports a false -Wmaybe-uninitialized inside kj/capnp templates.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "config/units.h"
#include "checkpoint/checkpoint_coordinator.h"
#include "checkpoint/snapshot_state_view.h"
#include "control/control_client.h"
#include "control/control_server.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/s3_storage.h"
#include "job_id.h"
#include "ui/ui_api.capnp.h"
#include "ui/ui_assets.h"
#include "wall_clock.h"

namespace jobhost::host {

namespace fs = std::filesystem;

namespace {

constexpr size_t kJobIdLength = 32;
constexpr size_t kMaxSeenJobs = 1000;
constexpr size_t kMaxDiskJobs = 200;  // newest job directories listed
constexpr std::chrono::milliseconds kUiSavepointTimeout = std::chrono::minutes(10);

bool isHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/// A job id: one jobhost makes up (32 lower-case hex digits) or a `run --job-id NAME`.
bool isJobId(const std::string& s) { return jobIdProblem(s).empty(); }

/// A job id or a prefix of one from a URL: what a job id may hold, 1 to 64 characters.
/// (Hex ids are matched case-insensitively by resolve().)
std::optional<std::string> jobIdPrefix(const std::string& s) {
  if (!isJobId(s)) return std::nullopt;
  return s;
}

/// `s` lower-cased if it is all hex digits (a prefix of a made-up id typed in capitals).
std::string lowerHex(const std::string& s) {
  if (!std::all_of(s.begin(), s.end(), isHex)) return s;
  std::string out = s;
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

template <class Reader>
std::string encode(Reader r) {
  capnp::JsonCodec codec;
  kj::String s = codec.encode(r);
  return std::string(s.cStr(), s.size());
}

HttpReply json(int status, std::string body) { return HttpReply{status, "application/json; charset=utf-8", std::move(body)}; }

HttpReply error(int status, const std::string& message) { return jsonErrorReply(status, message); }

HttpReply asset(std::string_view body, const char* type) { return HttpReply{200, type, std::string(body)}; }

/// The path of a request target, split at '/'. nullopt if it is not an origin-form path
/// ("/..."). One trailing slash is ignored; empty segments ("//") are kept (and match no
/// route).
std::optional<std::vector<std::string>> segments(const std::string& target) {
  std::string path = target.substr(0, target.find_first_of("?#"));
  if (path.empty() || path[0] != '/') return std::nullopt;
  if (path.size() > 1 && path.back() == '/') path.pop_back();
  std::vector<std::string> out;
  if (path == "/") return out;
  size_t pos = 1;
  for (;;) {
    size_t next = path.find('/', pos);
    out.push_back(path.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

/// A checkpoint id from a URL: 1 to 19 decimal digits.
std::optional<uint64_t> checkpointIdOf(const std::string& s) {
  if (s.empty() || s.size() > 19 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoull(s);
}

/// A path segment with its %XX escapes decoded (state names may hold any character);
/// nullopt for a malformed escape or a decoded NUL.
std::optional<std::string> percentDecoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !isHex(s[i + 1]) || !isHex(s[i + 2])) return std::nullopt;
    char c = static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    if (c == '\0') return std::nullopt;
    out += c;
    i += 2;
  }
  return out;
}

/// The decimal value of query parameter `name` ("...?limit=20"), if present and valid.
std::optional<uint64_t> queryNumber(const std::string& target, const std::string& name) {
  size_t q = target.find('?');
  if (q == std::string::npos) return std::nullopt;
  std::string query = target.substr(q + 1, target.find('#') == std::string::npos ? std::string::npos : target.find('#') - q - 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t end = query.find('&', pos);
    std::string part = query.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (part.rfind(name + "=", 0) == 0) {
      std::string v = part.substr(name.size() + 1);
      if (v.empty() || v.size() > 9 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
      return std::stoull(v);
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return std::nullopt;
}

constexpr uint64_t kStateEntriesDefault = 50;
constexpr uint64_t kStateEntriesMax = 1000;

std::string statusOf(const JobStatusInfo& s) { return jobStateName(s.state); }

void fillJob(uiapi::Job::Builder b, const JobStatusInfo& s, bool running, const std::string& source,
             const std::string& status, int64_t sampledAtMs) {
  b.setId(text(s.jobId));
  b.setJobClass(text(s.jobClass));
  b.setPluginPath(text(s.pluginPath));
  b.setBackend(text(s.backend));
  b.setParallelism(s.parallelism);
  b.setStatus(text(status));
  b.setRunning(running);
  b.setSource(text(source));
  b.setStartTimeMs(static_cast<double>(s.startedMs));
  b.setRestarts(s.restarts);
  b.setLastFailure(text(s.lastFailure));
  b.setLastFailureTimeMs(static_cast<double>(s.lastFailureMs));
  b.setRecordsIn(static_cast<double>(s.recordsIn));
  b.setRecordsOut(static_cast<double>(s.recordsOut));
  b.setSampledAtMs(static_cast<double>(sampledAtMs));
  b.setLastCheckpointId(static_cast<double>(s.lastCheckpointId));
  b.setLastCheckpointPath(text(s.lastCheckpointPath));
  b.setCheckpointDir(text(s.checkpointDir));
  b.setCheckpointsCompleted(static_cast<double>(s.checkpointsCompleted));
  b.setCheckpointsFailed(static_cast<double>(s.checkpointsFailed));
  b.setPid(running ? s.pid : 0);
  b.setRecordsInPerSecond(s.recordsInPerSecond);
  b.setRecordsOutPerSecond(s.recordsOutPerSecond);
  b.setCheckpointsInProgress(static_cast<double>(s.checkpointsInProgress));
  b.setLastCheckpointDurationMs(static_cast<double>(s.lastCheckpointDurationMs));
  b.setLastCheckpointSizeBytes(static_cast<double>(s.lastCheckpointSizeBytes));
  b.setLastCheckpointFullSizeBytes(static_cast<double>(s.lastCheckpointFullSizeBytes));
  b.setLastCheckpointCompletedMs(static_cast<double>(s.lastCheckpointCompletedMs));
  b.setLastRestoreMs(static_cast<double>(s.lastRestoreMs));
  b.setStoreUnavailableSinceMs(static_cast<double>(s.storeUnavailableSinceMs));
  auto tasks = b.initTasks(running ? static_cast<unsigned>(s.tasks.size()) : 0);
  for (unsigned i = 0; i < tasks.size(); ++i) {
    const TaskStatusInfo& t = s.tasks[i];
    auto tb = tasks[i];
    tb.setName(text(t.name));
    tb.setSubtask(t.subtask);
    tb.setParallelism(t.parallelism);
    tb.setRecordsIn(static_cast<double>(t.recordsIn));
    tb.setRecordsOut(static_cast<double>(t.recordsOut));
    tb.setRecordsInPerSecond(t.recordsInPerSecond);
    tb.setRecordsOutPerSecond(t.recordsOutPerSecond);
    tb.setBusyTimeMsPerSecond(t.busyTimeMsPerSecond);
    tb.setBackPressuredTimeMsPerSecond(t.backPressuredTimeMsPerSecond);
    tb.setIdleTimeMsPerSecond(t.idleTimeMsPerSecond);
    tb.setHasInputWatermark(t.inputWatermark != INT64_MIN);
    if (t.inputWatermark != INT64_MIN) tb.setInputWatermark(static_cast<double>(t.inputWatermark));
    uint64_t entries = 0;
    for (const auto& be : t.backends) entries += be.entries;
    tb.setStateEntries(static_cast<double>(entries));
  }
  b.setCheckpointStoreError(text(s.checkpointStoreError));
  b.setCheckpointsDeclinedUnavailable(static_cast<double>(s.checkpointsDeclinedUnavailable));
  b.setPublishingFencedSinceMs(static_cast<double>(s.publishingFencedSinceMs));
}

bool hasMetadata(const std::string& dir) {
  if (dir.empty()) return false;
  if (state::isObjectStoreUri(dir)) {
    auto storage = state::openStorage(dir);
    return storage.ok() && (*storage)->exists(state::kMetadataFileName);
  }
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / state::kMetadataFileName, ec);
}

/// On an object store: the top-level names under `dir` and, per name, the checkpoint ids
/// (chk-<n>) found below it — from one listing (there are no directories to iterate).
std::map<std::string, std::set<uint64_t>> objectStoreTree(const std::string& dir) {
  std::map<std::string, std::set<uint64_t>> out;
  auto storage = state::openStorage(dir);
  std::vector<state::FileEntry> files;
  if (!storage.ok() || !(*storage)->list("", &files).ok()) return out;
  for (const auto& f : files) {
    auto slash = f.path.find('/');
    if (slash == std::string::npos) continue;
    auto& ids = out[f.path.substr(0, slash)];
    auto next = f.path.find('/', slash + 1);
    if (next == std::string::npos) continue;
    if (auto id = state::parseCheckpointDirName(std::string_view(f.path).substr(slash + 1, next - slash - 1))) ids.insert(*id);
  }
  return out;
}

void fillCheckpoint(uiapi::Checkpoint::Builder b, const CheckpointRecord& r, const std::string& jobClass,
                    const std::string& plugin) {
  b.setId(static_cast<double>(r.id));
  b.setStatus(checkpointStatusName(r.status));
  b.setKind(r.savepoint ? "savepoint" : "checkpoint");
  b.setType(r.canonical ? "canonical" : r.incremental ? "incremental" : r.savepoint ? "native" : "full");
  b.setTriggerTimeMs(static_cast<double>(r.triggerTimeMs));
  b.setDurationMs(static_cast<double>(r.durationMicros) / 1000.0);
  b.setSyncDurationMs(static_cast<double>(r.syncMicros) / 1000.0);
  b.setAsyncDurationMs(static_cast<double>(r.asyncMicros) / 1000.0);
  b.setAlignmentMs(static_cast<double>(r.alignmentMicros) / 1000.0);
  b.setNewBytes(static_cast<double>(r.newBytes));
  b.setTotalBytes(static_cast<double>(r.totalBytes));
  auto ids = b.initDependsOn(static_cast<unsigned>(r.dependsOn.size()));
  auto deps = b.initDependencies(static_cast<unsigned>(r.dependsOn.size()));
  for (unsigned i = 0; i < r.dependsOn.size(); ++i) {
    ids.set(i, static_cast<double>(r.dependsOn[i].checkpointId));
    deps[i].setCheckpointId(static_cast<double>(r.dependsOn[i].checkpointId));
    deps[i].setFiles(r.dependsOn[i].files);
    deps[i].setBytes(static_cast<double>(r.dependsOn[i].bytes));
  }
  b.setPath(text(r.path));
  b.setFailureReason(text(r.failureReason));
  b.setSubsumed(r.subsumed);
  bool restorable = r.status == CheckpointRecord::Status::kCompleted && !r.subsumed && hasMetadata(r.path);
  b.setRestorable(restorable);
  b.setRestoreCommand(restorable ? text(Dashboard::restoreCommand(r.path, jobClass, plugin)) : text(""));
}

/// Subdirectories of `dir` whose names are job ids, newest first (by modification time).
std::vector<std::string> jobDirectories(const std::string& dir) {
  if (state::isObjectStoreUri(dir)) {
    // No modification times: the job with the highest checkpoint id first.
    std::vector<std::pair<uint64_t, std::string>> jobs;
    for (const auto& [name, ids] : objectStoreTree(dir))
      if (isJobId(name)) jobs.emplace_back(ids.empty() ? 0 : *ids.rbegin(), name);
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    std::vector<std::string> out;
    for (auto& [n, name] : jobs) out.push_back(name);
    return out;
  }
  std::vector<std::pair<fs::file_time_type, std::string>> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code e2;
    if (!isJobId(name) || !it->is_directory(e2) || it->is_symlink(e2)) continue;
    found.emplace_back(fs::last_write_time(it->path(), e2), name);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [t, name] : found) out.push_back(name);
  return out;
}

/// Job ids with a control socket in the runtime directory (checked as discoverJobs does).
std::set<std::string> socketJobIds() {
  std::set<std::string> out;
  std::string dir = runtimeDirPath();
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return out;
  auto checked = ensureRuntimeDir();
  if (!checked.ok()) return out;
  if (DIR* d = opendir(checked->c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0 && isJobId(name.substr(0, name.size() - 5)))
        out.insert(name.substr(0, name.size() - 5));
    }
    closedir(d);
  }
  return out;
}

bool sameRecord(const CheckpointRecord& a, const CheckpointRecord& b) {
  return a.id == b.id && a.triggerTimeMs == b.triggerTimeMs;
}

}  // namespace

HttpReply jsonErrorReply(int status, const std::string& message) {
  capnp::MallocMessageBuilder m;
  auto e = m.initRoot<uiapi::Error>();
  e.setStatus(status);
  e.setError(text(message));
  return json(status, encode(e.asReader()));
}

struct Dashboard::Target {
  std::string id;
  std::optional<JobStatusInfo> running;  // it answered on its control socket
  std::string socketPath;
};

struct Dashboard::DiskJob {
  JobStatusInfo status;  // what the files and the dashboard's memory tell
  std::string source;
  std::string state;
};

Dashboard::Dashboard(Options options) : options_(std::move(options)) {}

std::string Dashboard::restoreCommand(const std::string& path, const std::string& jobClass, const std::string& plugin) {
  return shellCommand({"jobhost", "run", "-s", path, "-c", jobClass, plugin});
}

std::optional<HttpReply> Dashboard::quick(const std::string& method, const std::string& target) const {
  bool get = method == "GET" || method == "HEAD";
  auto seg = segments(target);
  if (!seg) return error(400, "bad request target: expected a path starting with '/'");
  auto onlyGet = [&](HttpReply r) -> HttpReply { return get ? r : error(405, "method not allowed: use GET"); };
  if (seg->empty() || (seg->size() == 1 && (*seg)[0] == "index.html"))
    return onlyGet(asset(ui_assets::kIndexHtml, "text/html; charset=utf-8"));
  if (seg->size() == 1 && (*seg)[0] == "app.js") return onlyGet(asset(ui_assets::kAppJs, "text/javascript; charset=utf-8"));
  if (seg->size() == 1 && (*seg)[0] == "app.css") return onlyGet(asset(ui_assets::kAppCss, "text/css; charset=utf-8"));
  if (seg->empty() || (*seg)[0] != "api") return HttpReply{404, "text/plain; charset=utf-8", "not found\n"};
  const auto& s = *seg;
  if (s.size() < 2 || s[1] != "jobs") return error(404, "no such API endpoint; see README \"Web dashboard\"");
  if (s.size() == 2) return get ? std::nullopt : std::optional(error(405, "method not allowed: use GET"));
  // Longer than /api/jobs/<id>/<what>: only /api/jobs/<id>/checkpoints/<n>/state[/<uid>/<state>].
  const bool stateRoute = s.size() > 4 && s[3] == "checkpoints" && (s.size() == 6 || s.size() == 8) && s[5] == "state";
  if (s.size() > 4 && !stateRoute) return error(404, "no such API endpoint; see README \"Web dashboard\"");
  if (!jobIdPrefix(s[2]))
    return error(400, "invalid job id: expected a job id (32 hex digits, or the NAME of run --job-id) or a unique prefix");
  if (stateRoute) {
    if (!checkpointIdOf(s[4])) return error(400, "invalid checkpoint id: expected a decimal number");
    if (s.size() == 8 && (!percentDecoded(s[6]) || !percentDecoded(s[7])))
      return error(400, "invalid operator uid or state name: a malformed %-escape");
    return get ? std::nullopt : std::optional(error(405, "method not allowed: use GET"));
  }
  if (s.size() == 3 || s[3] == "checkpoints")
    return get ? std::nullopt : std::optional(error(405, "method not allowed: use GET"));
  if (s[3] == "savepoints" || s[3] == "cancel") {
    if (method != "POST") return error(405, "method not allowed: use POST");
    if (options_.readOnly)
      return error(403, "this dashboard is read-only (--read-only or ui.read-only: true): savepoints and cancel are disabled");
    return std::nullopt;
  }
  return error(404, "no such API endpoint; see README \"Web dashboard\"");
}

HttpReply Dashboard::handle(const std::string& method, const std::string& target, const std::string& body) {
  if (auto r = quick(method, target)) return *r;
  auto s = *segments(target);  // quick() accepted it: /api/jobs[/<id>[/<what>]]
  try {
    if (s.size() == 2) return listJobs();
    std::string id = *jobIdPrefix(s[2]);
    if (s.size() == 3) return jobDetail(id);
    if (s[3] == "checkpoints" && s.size() == 6) return stateView(id, *checkpointIdOf(s[4]));
    if (s[3] == "checkpoints" && s.size() == 8)
      return stateEntries(id, *checkpointIdOf(s[4]), *percentDecoded(s[6]), *percentDecoded(s[7]),
                          std::min(queryNumber(target, "limit").value_or(kStateEntriesDefault), kStateEntriesMax));
    if (s[3] == "checkpoints") return checkpoints(id);
    if (s[3] == "savepoints") return savepoint(id, body);
    if (s[3] == "cancel") return cancel(id);
  } catch (const std::exception& e) {
    return error(500, std::string("internal error: ") + e.what());
  } catch (const kj::Exception& e) {
    return error(500, std::string("internal error: ") + e.getDescription().cStr());
  }
  return error(404, "no such API endpoint");
}

// ---------------------------------------------------------------------------------------
// What the dashboard knows

void Dashboard::remember(const JobStatusInfo& s) {
  std::lock_guard lock(mu_);
  auto& e = seen_[s.jobId];
  e.status = s;
  e.lastSeenMs = wallClockMs();
  if (seen_.size() > kMaxSeenJobs) {
    auto oldest = std::min_element(seen_.begin(), seen_.end(),
                                   [](const auto& a, const auto& b) { return a.second.lastSeenMs < b.second.lastSeenMs; });
    seen_.erase(oldest);
  }
}

std::optional<Dashboard::Seen> Dashboard::seen(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = seen_.find(id);
  if (it == seen_.end()) return std::nullopt;
  return it->second;
}

std::string Dashboard::jobDirOf(const std::string& id) const {
  if (auto s = seen(id); s && !s->status.checkpointDir.empty()) return s->status.checkpointDir;
  return (fs::path(options_.checkpointDir) / id).string();  // id: validated job id
}

std::optional<Dashboard::DiskJob> Dashboard::diskJob(const std::string& id, const std::string& jobDir) const {
  DiskJob j;
  auto remembered = seen(id);
  if (remembered) {
    j.status = remembered->status;
    j.source = "disk";
    // The socket goes away before the process ends: the final state is unknown unless the
    // job already reported it.
    auto st = remembered->status.state;
    j.state = st == JobState::kFinished || st == JobState::kFailed || st == JobState::kCanceled ? statusOf(remembered->status)
                                                                                                : "ENDED";
  }
  std::error_code ec;
  if (state::isObjectStoreUri(jobDir) || fs::is_directory(jobDir, ec)) {
    auto latest = resolveSnapshot(jobDir);
    if (latest.ok()) {
      const auto& m = latest->metadata;
      if (!remembered) {
        j.status.jobId = id;
        j.status.jobClass = m.jobClass;
        j.status.pluginPath = m.pluginFile;  // only the file name is recorded
        j.status.backend = m.backend + (m.incremental ? " (incremental)" : "");
        j.status.parallelism = m.parallelism;
        j.source = "disk";
        j.state = "ENDED";
      }
      j.status.checkpointDir = jobDir;
      j.status.lastCheckpointId = m.checkpointId;
      j.status.lastCheckpointPath = latest->directory;
    } else if (!remembered) {
      return std::nullopt;  // no complete checkpoint: nothing to show or restore
    }
  } else if (!remembered) {
    return std::nullopt;
  }
  return j;
}

std::vector<CheckpointRecord> Dashboard::diskHistory(const std::string& jobDir) const {
  std::vector<std::pair<uint64_t, fs::path>> chks;
  std::error_code ec;
  if (state::isObjectStoreUri(jobDir)) {
    auto storage = state::openStorage(jobDir);
    std::vector<state::FileEntry> files;
    std::set<uint64_t> ids;
    if (storage.ok() && (*storage)->list("", &files).ok())
      for (const auto& f : files)
        if (auto slash = f.path.find('/'); slash != std::string::npos)
          if (auto id = state::parseCheckpointDirName(std::string_view(f.path).substr(0, slash))) ids.insert(*id);
    for (uint64_t id : ids) chks.emplace_back(id, fs::path(jobDir + "/" + state::checkpointDirName(id)));
  }
  for (auto it = state::isObjectStoreUri(jobDir) ? fs::directory_iterator() : fs::directory_iterator(jobDir, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    auto id = state::parseCheckpointDirName(it->path().filename().string());
    std::error_code e2;
    if (!id || !it->is_directory(e2) || it->is_symlink(e2)) continue;
    chks.emplace_back(*id, it->path());
  }
  std::sort(chks.begin(), chks.end());
  std::vector<CheckpointRecord> out;
  for (const auto& [id, p] : chks) {
    if (!hasMetadata(p.string())) {
      CheckpointRecord r;
      r.id = id;
      r.status = CheckpointRecord::Status::kFailed;
      r.path = p.string();
      r.failureReason = "incomplete: no _metadata (it never completed)";
      out.push_back(r);
      continue;
    }
    auto snap = resolveSnapshot(p.string());
    if (!snap.ok()) {
      CheckpointRecord r;
      r.id = id;
      r.status = CheckpointRecord::Status::kFailed;
      r.path = p.string();
      r.failureReason = "unreadable _metadata: " + snap.status().message();
      out.push_back(r);
      continue;
    }
    out.push_back(recordFromMetadata(snap->metadata, snap->directory));
  }
  return out;
}

std::optional<Dashboard::Target> Dashboard::resolve(const std::string& prefix, HttpReply* err) {
  std::set<std::string> sockets = socketJobIds();
  std::set<std::string> ids = sockets;
  for (const auto& d : jobDirectories(options_.checkpointDir)) ids.insert(d);
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : seen_) ids.insert(id);
  }
  std::vector<std::string> matches;
  for (const std::string& p : {prefix, lowerHex(prefix)}) {
    for (const auto& id : ids)
      if (id.compare(0, p.size(), p) == 0) matches.push_back(id);
    if (!matches.empty()) break;
  }
  // An exact id wins over the longer ids it is a prefix of (a named job "wc" and "wc-2").
  if (matches.size() > 1 && std::find(matches.begin(), matches.end(), prefix) != matches.end()) matches = {prefix};
  if (matches.empty()) {
    *err = error(404, "no job with id " + prefix + " (neither running nor under " + options_.checkpointDir + ")");
    return std::nullopt;
  }
  if (matches.size() > 1) {
    *err = error(400, "job id prefix " + prefix + " is ambiguous: it matches " + std::to_string(matches.size()) + " jobs");
    return std::nullopt;
  }
  Target t;
  t.id = matches[0];
  if (sockets.count(t.id)) {
    t.socketPath = controlSocketPath(runtimeDirPath(), t.id);
    auto s = callStatus(t.socketPath);
    if (s.ok() && s->jobId == t.id) {
      remember(*s);
      t.running = *s;
    }
  }
  return t;
}

// ---------------------------------------------------------------------------------------
// Endpoints

HttpReply Dashboard::listJobs() {
  std::vector<std::string> stale, problems;
  auto running = discoverJobs(&stale, &problems);
  int64_t sampled = wallClockMs();
  for (const auto& j : running) remember(j.status);
  std::set<std::string> listed;
  for (const auto& j : running) listed.insert(j.jobId);

  std::vector<DiskJob> ended;
  auto addEnded = [&](const std::string& id, const std::string& dir) {
    if (listed.count(id)) return;
    if (auto d = diskJob(id, dir)) {
      listed.insert(id);
      ended.push_back(std::move(*d));
    }
  };
  auto dirs = jobDirectories(options_.checkpointDir);
  if (dirs.size() > kMaxDiskJobs) dirs.resize(kMaxDiskJobs);
  for (const auto& id : dirs) addEnded(id, (fs::path(options_.checkpointDir) / id).string());
  std::vector<std::string> remembered;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, s] : seen_) remembered.push_back(id);
  }
  for (const auto& id : remembered) addEnded(id, jobDirOf(id));
  std::sort(ended.begin(), ended.end(), [](const DiskJob& a, const DiskJob& b) {
    return a.status.startedMs != b.status.startedMs ? a.status.startedMs > b.status.startedMs
                                                    : a.status.jobId < b.status.jobId;
  });

  capnp::MallocMessageBuilder m;
  auto list = m.initRoot<uiapi::JobList>();
  auto jobs = list.initJobs(static_cast<unsigned>(running.size() + ended.size()));
  unsigned i = 0;
  for (const auto& j : running) fillJob(jobs[i++], j.status, true, "control", statusOf(j.status), sampled);
  for (const auto& d : ended) fillJob(jobs[i++], d.status, false, d.source, d.state, sampled);
  list.setReadOnly(options_.readOnly);
  list.setCheckpointDir(text(options_.checkpointDir));
  auto probs = list.initProblems(static_cast<unsigned>(problems.size()));
  for (unsigned k = 0; k < problems.size(); ++k) probs.set(k, text(problems[k]));
  list.setServerTimeMs(static_cast<double>(sampled));
  return json(200, encode(list.asReader()));
}

HttpReply Dashboard::jobDetail(const std::string& prefix) {
  HttpReply err;
  auto t = resolve(prefix, &err);
  if (!t) return err;
  capnp::MallocMessageBuilder m;
  auto detail = m.initRoot<uiapi::JobDetail>();
  std::map<std::string, std::string> config;
  if (t->running) {
    fillJob(detail.initJob(), *t->running, true, "control", statusOf(*t->running), wallClockMs());
    auto c = callConfiguration(t->socketPath);
    if (c.ok()) {
      config = *c;
      std::lock_guard lock(mu_);
      seen_[t->id].configuration = config;
    }
  } else {
    auto d = diskJob(t->id, jobDirOf(t->id));
    if (!d) return error(404, "job " + t->id + " has ended and left no complete checkpoint");
    fillJob(detail.initJob(), d->status, false, d->source, d->state, wallClockMs());
    if (auto s = seen(t->id)) config = s->configuration;
  }
  auto entries = detail.initConfiguration(static_cast<unsigned>(config.size()));
  unsigned i = 0;
  for (const auto& [k, v] : config) {
    entries[i].setKey(text(k));
    entries[i].setValue(text(v));
    ++i;
  }
  detail.setReadOnly(options_.readOnly);
  return json(200, encode(detail.asReader()));
}

HttpReply Dashboard::checkpoints(const std::string& prefix) {
  HttpReply err;
  auto t = resolve(prefix, &err);
  if (!t) return err;
  std::vector<CheckpointRecord> records;
  std::string jobClass, plugin, source;
  if (t->running) {
    jobClass = t->running->jobClass;
    plugin = t->running->pluginPath;
    source = "control";
    auto h = callCheckpointHistory(t->socketPath);
    if (h.ok()) {
      records = std::move(*h);
      std::lock_guard lock(mu_);
      seen_[t->id].history = records;
    } else if (!t->running->checkpointDir.empty()) {
      records = diskHistory(t->running->checkpointDir);  // a job of an older jobhost
    }
  } else {
    auto d = diskJob(t->id, jobDirOf(t->id));
    if (!d) return error(404, "job " + t->id + " has ended and left no complete checkpoint");
    jobClass = d->status.jobClass;
    plugin = d->status.pluginPath;
    source = "disk";
    if (auto s = seen(t->id)) records = s->history;  // what it reported while running
    for (auto& r : diskHistory(jobDirOf(t->id))) {
      auto it = std::find_if(records.begin(), records.end(), [&](const auto& x) { return sameRecord(x, r); });
      if (it == records.end()) {
        // An incomplete directory of a checkpoint the job reported as failed is that one.
        bool known = std::any_of(records.begin(), records.end(), [&](const auto& x) { return x.id == r.id; });
        if (!known || r.status == CheckpointRecord::Status::kCompleted) records.push_back(r);
      }
    }
    for (auto& r : records)
      if (r.status == CheckpointRecord::Status::kInProgress) {
        r.status = CheckpointRecord::Status::kFailed;
        r.failureReason = "the job ended before it completed";
      }
    // Ids grow with time within a job (restarted attempts continue the numbering).
    std::stable_sort(records.begin(), records.end(), [](const auto& a, const auto& b) {
      return a.id != b.id ? a.id < b.id : a.triggerTimeMs < b.triggerTimeMs;
    });
  }
  capnp::MallocMessageBuilder m;
  auto list = m.initRoot<uiapi::CheckpointList>();
  list.setJobId(text(t->id));
  list.setJobClass(text(jobClass));
  list.setSource(text(source));
  auto out = list.initCheckpoints(static_cast<unsigned>(records.size()));
  for (unsigned i = 0; i < records.size(); ++i) fillCheckpoint(out[i], records[i], jobClass, plugin);
  return json(200, encode(list.asReader()));
}

HttpReply Dashboard::savepoint(const std::string& prefix, const std::string& body) {
  if (options_.readOnly) return error(403, "this dashboard is read-only");
  // The body may choose the format, nothing else (never a path).
  state::SnapshotFormat format = state::SnapshotFormat::kCanonical;
  if (body.find_first_not_of(" \t\r\n") != std::string::npos) {
    capnp::MallocMessageBuilder m;
    auto req = m.initRoot<uiapi::SavepointRequest>();
    try {
      capnp::JsonCodec codec;
      codec.setRejectUnknownFields(true);
      codec.setMaxNestingDepth(4);
      codec.decode(kj::ArrayPtr<const char>(body.data(), body.size()), capnp::toDynamic(req));
    } catch (const kj::Exception&) {
      return error(400, "the body must be a JSON object {\"format\": \"canonical\" | \"native\"} and nothing else");
    }
    std::string f = req.hasFormat() ? std::string(req.getFormat().cStr()) : "";
    if (f == "native") format = state::SnapshotFormat::kNative;
    else if (!f.empty() && f != "canonical") return error(400, "format must be \"canonical\" or \"native\"");
  }
  HttpReply err;
  auto t = resolve(prefix, &err);
  if (!t) return err;
  if (!t->running) return error(409, "job " + t->id + " is not running");
  if (t->running->state != JobState::kRunning)
    return error(409, "job " + t->id + " is " + statusOf(*t->running) + "; savepoints need a RUNNING job");
  auto config = callConfiguration(t->socketPath);
  if (config.ok()) {
    auto it = config->find("state.savepoints.dir");
    if (it == config->end() || it->second.empty())
      return error(409, "job " + t->id +
                            " has no state.savepoints.dir; start it with -D state.savepoints.dir=<dir> (the dashboard "
                            "never takes a directory from the request)");
  }
  if (t->running->checkpointDir.empty()) return error(409, "job " + t->id + " runs without checkpointing");
  auto path = callSavepoint(t->socketPath, std::nullopt, format, kUiSavepointTimeout);
  if (!path.ok()) return error(500, path.status().message());
  capnp::MallocMessageBuilder m;
  auto res = m.initRoot<uiapi::SavepointResult>();
  res.setJobId(text(t->id));
  res.setPath(text(*path));
  res.setRestoreCommand(text(restoreCommand(*path, t->running->jobClass, t->running->pluginPath)));
  return json(200, encode(res.asReader()));
}

HttpReply Dashboard::cancel(const std::string& prefix) {
  if (options_.readOnly) return error(403, "this dashboard is read-only");
  HttpReply err;
  auto t = resolve(prefix, &err);
  if (!t) return err;
  if (!t->running) return error(409, "job " + t->id + " is not running");
  auto r = callCancel(t->socketPath, false, std::nullopt, kStatusTimeout);
  if (!r.ok()) return error(500, r.status().message());
  capnp::MallocMessageBuilder m;
  auto res = m.initRoot<uiapi::CancelResult>();
  res.setJobId(text(t->id));
  res.setStatus("CANCELLING");
  return json(200, encode(res.asReader()));
}

// ---------------------------------------------------------------------------------------
// Keyed state of a completed checkpoint: what `jobhost state ls` and `dump` read
// (snapshot_state_view.h), from the job's own checkpoint directory. The request names a
// checkpoint id, an operator uid and a state name; they select from the snapshot's
// metadata and never become paths.

std::optional<HttpReply> Dashboard::openCheckpoint(const std::string& prefix, uint64_t checkpointId,
                                                   std::string* jobId, ResolvedSnapshot* out) {
  HttpReply err;
  auto t = resolve(prefix, &err);
  if (!t) return err;
  *jobId = t->id;
  std::string dir = (fs::path(jobDirOf(t->id)) / ("chk-" + std::to_string(checkpointId))).string();
  if (!hasMetadata(dir))
    return error(404, "checkpoint " + std::to_string(checkpointId) + " of job " + t->id +
                          " is not on disk (not completed, or deleted by retention)");
  auto snap = openSnapshot(dir);
  if (!snap.ok()) return error(409, "cannot read checkpoint " + std::to_string(checkpointId) + ": " + snap.status().message());
  *out = std::move(*snap);
  return std::nullopt;
}

HttpReply Dashboard::stateView(const std::string& prefix, uint64_t checkpointId) {
  std::string id;
  ResolvedSnapshot snap;
  if (auto e = openCheckpoint(prefix, checkpointId, &id, &snap)) return *e;
  const auto& m = snap.metadata;
  std::vector<const state::OperatorSnapshot*> ops;
  for (const auto& op : m.operators)
    if (!op.states.empty()) ops.push_back(&op);
  capnp::MallocMessageBuilder msg;
  auto view = msg.initRoot<uiapi::StateView>();
  view.setJobId(text(id));
  view.setCheckpointId(static_cast<double>(checkpointId));
  view.setPath(text(snap.directory));
  view.setBackend(text(m.backend + (m.incremental ? " (incremental)" : "")));
  view.setMaxParallelism(m.maxParallelism);
  auto list = view.initOperators(static_cast<unsigned>(ops.size()));
  for (unsigned i = 0; i < ops.size(); ++i) {
    const auto& op = *ops[i];
    auto reader = state::OperatorStateReader::open(*snap.storage, op, m.maxParallelism);
    std::vector<StateStats> stats;
    state::Status s = reader.ok() ? stateStats(**reader, false, &stats) : reader.status();
    if (!s.ok()) return error(409, "cannot read checkpoint " + std::to_string(checkpointId) + ": " + s.message());
    list[i].setUid(text(op.uid));
    list[i].setName(text(op.name));
    auto states = list[i].initStates(static_cast<unsigned>(op.states.size()));
    for (unsigned j = 0; j < op.states.size(); ++j) {
      const auto& d = op.states[j];
      states[j].setName(text(d.name));
      states[j].setKind(stateKindName(d.kind));
      states[j].setKeyType(text(typeName(d.keySerializer, d.keySerializerVersion)));
      states[j].setUserKeyType(text(typeName(d.userKeySerializer, d.userKeySerializerVersion)));
      states[j].setValueType(text(typeName(d.valueSerializer, d.valueSerializerVersion)));
      states[j].setEntries(static_cast<double>(stats[j].entries));
      states[j].setBytes(static_cast<double>(stats[j].bytes));
    }
  }
  return json(200, encode(view.asReader()));
}

HttpReply Dashboard::stateEntries(const std::string& prefix, uint64_t checkpointId, const std::string& uid,
                                  const std::string& stateName, uint64_t limit) {
  std::string id;
  ResolvedSnapshot snap;
  if (auto e = openCheckpoint(prefix, checkpointId, &id, &snap)) return *e;
  const auto& m = snap.metadata;
  const state::OperatorSnapshot* op = m.findOperator(uid);
  if (!op || op->states.empty()) return error(404, "checkpoint " + std::to_string(checkpointId) + " has no keyed state for operator '" + uid + "'");
  int only = -1;
  for (size_t i = 0; i < op->states.size(); ++i)
    if (op->states[i].name == stateName) only = static_cast<int>(i);
  if (only < 0) return error(404, "operator '" + uid + "' has no state '" + stateName + "'");
  const auto& d = op->states[static_cast<size_t>(only)];
  auto reader = state::OperatorStateReader::open(*snap.storage, *op, m.maxParallelism);
  if (!reader.ok()) return error(409, "cannot read checkpoint " + std::to_string(checkpointId) + ": " + reader.status().message());
  StateTexts texts{SerializerTextRegistry()};
  struct Row {
    std::string key, userKey, value;
  };
  std::vector<Row> rows;
  bool more = false;
  std::vector<OwnedEntry> entries;
  for (int kg = 0; kg < m.maxParallelism && !more; ++kg) {
    if (state::Status s = sortedKeyGroup(**reader, kg, &entries); !s.ok())
      return error(409, "cannot read checkpoint " + std::to_string(checkpointId) + ": " + s.message());
    for (const auto& e : entries) {
      if (e.state != only) continue;
      if (rows.size() == limit) {
        more = true;
        break;
      }
      rows.push_back({texts.key(d, e.key), d.kind == StateKind::kMap ? texts.userKey(d, e.userKey) : "", texts.value(d, e.value)});
    }
  }
  capnp::MallocMessageBuilder msg;
  auto res = msg.initRoot<uiapi::StateEntries>();
  res.setJobId(text(id));
  res.setCheckpointId(static_cast<double>(checkpointId));
  res.setOperatorUid(text(uid));
  res.setState(text(stateName));
  res.setKind(stateKindName(d.kind));
  auto out = res.initEntries(static_cast<unsigned>(rows.size()));
  for (unsigned i = 0; i < rows.size(); ++i) {
    out[i].setKey(text(rows[i].key));
    out[i].setUserKey(text(rows[i].userKey));
    out[i].setValue(text(rows[i].value));
  }
  res.setLimit(static_cast<uint32_t>(limit));
  res.setMore(more);
  auto undecoded = res.initUndecoded(static_cast<unsigned>(texts.undecoded().size()));
  unsigned k = 0;
  for (const auto& u : texts.undecoded()) undecoded.set(k++, text(u));
  return json(200, encode(res.asReader()));
}

}  // namespace jobhost::host
