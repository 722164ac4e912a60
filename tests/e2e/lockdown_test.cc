// Issue 13, the process half: plugin code that throws anything is one clear error (never
// std::terminate of the supervisor); working directories are private, one per job, and
// collected; a plugin overwritten while its job runs does not change the restarted job.
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <regex>
#include <set>

#include "cli_fixture.h"
#include "../support/contains.h"

using namespace e2e;

namespace {

const std::string kThrowingPlugin = JOBHOST_THROWING_PLUGIN;
const std::string kStaticInitPlugin = JOBHOST_STATIC_INIT_PLUGIN;
const std::string kStaticInitCrashPlugin = JOBHOST_STATIC_INIT_CRASH_PLUGIN;
const std::string kStaticInitExceptionPlugin = JOBHOST_STATIC_INIT_EXCEPTION_PLUGIN;
const std::string kStaticInitOverflowPlugin = JOBHOST_STATIC_INIT_OVERFLOW_PLUGIN;

unsigned modeOf(const fs::path& p) {
  struct stat st {};
  if (lstat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

std::string jobIdIn(const std::string& log) {
  std::smatch m;
  std::regex re("job ([0-9a-f]{32}) \\(");
  return std::regex_search(log, m, re) ? m[1].str() : "";
}

/// Waits until `pred` holds or `timeout` passes (polling; no fixed sleeps).
bool waitFor(const std::function<bool()>& pred, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// A regular file somewhere below `dir` (RocksDB's files), or empty.
fs::path someFileBelow(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code t;
    if (it->is_regular_file(t) && it->path().filename() != ".lock") return it->path();
  }
  return {};
}

class Lockdown : public Cli {
 protected:
  fs::path localDir() const { return tmp / "local"; }
  /// Runs a RocksDB job slowly with its working directories under localDir().
  std::vector<std::string> slowRocksDbJob(const std::string& plugin, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-D", "state.local.dir=" + localDir().string()};
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {plugin, "--input", input(400).string(), "--rate", "500"});
    return jobhost(args);
  }
};

// --- Item 5: every user-code entry point is fenced -------------------------------------

TEST_F(Lockdown, SetupCodeThrowingAnythingIsOneErrorNamingClassAndPhaseWithExitCode2) {
  struct Case {
    std::string plugin, cls;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {kThrowingPlugin, "ConstructorThrowsInt", {"ConstructorThrowsInt: the constructor threw int 42"}},
      {kThrowingPlugin, "ConfigureThrowsInt", {"ConfigureThrowsInt: configure() threw int 42"}},
      {kThrowingPlugin, "BuildThrowsStruct", {"BuildThrowsStruct: build() threw a value of type throwing::NotAnException"}},
      {kStaticInitPlugin, "StaticInitThrows", {"StaticInitThrows", "a static initialiser", "threw int 42"}},
  };
  for (const auto& c : cases) {
    Result r = cli({"run", "-c", c.cls, c.plugin});
    EXPECT_EQ(r.exitCode, 2) << c.cls << ": " << r.err;
    for (const auto& e : c.expected) EXPECT_TRUE(contains(r.err, e)) << c.cls << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "terminate called")) << c.cls << ": " << r.err;
  }
}

struct StaticInitCase {
  std::string plugin, cls, what;
};
const std::vector<StaticInitCase>& staticInitCases() {
  static const std::vector<StaticInitCase> cases = {
      {kStaticInitPlugin, "StaticInitThrows", "threw int 42"},
      {kStaticInitCrashPlugin, "StaticInitFails", "crashed with SIGSEGV"},
      {kStaticInitExceptionPlugin, "StaticInitFails", "threw no configuration for the global"},
      // The stack is gone: the fence's handler runs on a stack of its own (sigaltstack).
      {kStaticInitOverflowPlugin, "StaticInitFails", "crashed with SIGSEGV"},
  };
  return cases;
}

// `jobhost run`, `check` and `run --dry-run` run a plugin's static initialisers once, in
// their own process, fenced by a terminate handler and crash-signal handlers
// (plugin_loader.h, "Static initialisers"). All must say the same thing, exit 2, and
// leave no "terminate called" or core behind.
TEST_F(Lockdown, AStaticInitialiserThatThrowsOrCrashesIsOneErrorFromRunCheckAndDryRun) {
  for (const auto& c : staticInitCases()) {
    for (const std::vector<std::string>& command :
         {std::vector<std::string>{"run", "-c", c.cls, c.plugin},
          std::vector<std::string>{"check", "-s", (tmp / "no-snapshot").string(), "-c", c.cls, c.plugin},
          std::vector<std::string>{"run", "--dry-run", "-c", c.cls, c.plugin}}) {
      Result r = cli(command);
      const std::string label = command[0] + " " + command[1] + " " + c.cls;
      EXPECT_EQ(r.exitCode, 2) << label << ": " << r.err;
      EXPECT_TRUE(contains(r.err, "error: plugin " + c.plugin + " (classes " + c.cls +
                                      "): a static initialiser (a global or static object's constructor) " + c.what))
          << label << ": " << r.err;
      EXPECT_TRUE(contains(r.err, " while the plugin was loaded; no job ran")) << label << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << label << ": one line, nothing else: " << r.err;
      EXPECT_FALSE(contains(r.err, "terminate called")) << label << ": " << r.err;
    }
  }
}

// `info` runs the initialisers in a probe child (it goes on after the error): the child's
// terminate handler or its death by a signal is the report.
TEST_F(Lockdown, InfoOfAPluginWhoseStaticInitialiserThrowsOrCrashesSaysSoAndListsTheDeclaredClasses) {
  for (const auto& c : staticInitCases()) {
    Result r = cli({"info", c.plugin});
    EXPECT_EQ(r.exitCode, 0) << c.plugin << ": " << r.err;
    EXPECT_TRUE(contains(r.out, c.cls)) << r.out;
    EXPECT_TRUE(contains(r.out, "a static initialiser (a global or static object's constructor) " + c.what)) << r.out;
    EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
  }
}

TEST_F(Lockdown, OperatorThrowingAnIntFailsTheTaskNotTheProcess) {
  fs::path in = tmp / "boom.txt";
  writeFile(in, "a\nb\nboom\nc\n");
  Result r = cli({"run", "-c", "OperatorThrowsInt", kThrowingPlugin, "--input", in.string()});
  EXPECT_EQ(r.exitCode, 1) << r.err;  // the restart strategy (none) gave up: a task failure
  EXPECT_TRUE(contains(r.err, "int 42, not a std::exception")) << r.err;
  EXPECT_TRUE(contains(r.err, "operator 'explode'")) << r.err;
  EXPECT_FALSE(contains(r.err, "SIGABRT")) << r.err;
  EXPECT_FALSE(contains(r.err, "terminate called")) << r.err;
}

// --- Item 3: private working directories --------------------------------------------

TEST_F(Lockdown, WorkingDirectoryIsPrivateAndItsFilesAre0600) {
  fs::create_directories(localDir());
  fs::permissions(localDir(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);  // a shared 0755 root
  Process p(slowRocksDbJob(kPlugin), tmp / "private.out", tmp / "private.err");
  ASSERT_TRUE(waitForCheckpoint(p)) << readFile(tmp / "private.err");
  std::string jobId = jobIdIn(readFile(tmp / "private.err"));
  ASSERT_FALSE(jobId.empty()) << readFile(tmp / "private.err");
  fs::path jobDir = localDir() / jobId;
  // Scans race the job's checkpoints (a directory can vanish under the iterator): retry.
  fs::path file;
  ASSERT_TRUE(waitFor([&] { return !(file = someFileBelow(jobDir / "attempt-1")).empty(); }))
      << "no RocksDB file under " << jobDir;
  EXPECT_EQ(modeOf(jobDir), 0700u);
  EXPECT_EQ(modeOf(jobDir / "attempt-1"), 0700u);
  std::error_code ec;
  for (fs::recursive_directory_iterator it(jobDir / "attempt-1", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code t;
    if (!it->is_regular_file(t)) continue;
    unsigned mode = modeOf(it->path());
    if (mode != 0) {  // 0: removed by the job meanwhile
      EXPECT_EQ(mode, 0600u) << it->path();
    }
  }

  // A second local user can neither list the job's directory nor read a file in it.
  if (geteuid() != 0) {
    p.signal(SIGTERM);
    p.wait();
    GTEST_SKIP() << "the second-user check needs root to create a user with useradd (running as uid " << geteuid()
                 << ")";
  }
  const char* kOther = "jobhost-e2e-other";
  if (getpwnam(kOther) == nullptr) {
    int rc = std::system((std::string("useradd --system --no-create-home --shell /usr/sbin/nologin ") + kOther +
                          " >/dev/null 2>&1")
                             .c_str());
    if (rc != 0 || getpwnam(kOther) == nullptr) {
      p.signal(SIGTERM);
      p.wait();
      GTEST_SKIP() << "useradd " << kOther << " failed (exit " << rc << "); cannot test a second user";
    }
  }
  struct passwd* pw = getpwnam(kOther);
  uid_t uid = pw->pw_uid;
  gid_t gid = pw->pw_gid;
  auto asOther = [&](const fs::path& path, bool directory) {
    pid_t child = fork();
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(3);
      int fd = open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
      _exit(fd >= 0 ? 0 : (errno == EACCES ? 1 : 2));
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(asOther(localDir(), true), 0) << "the shared root must be readable for this test to mean anything";
  EXPECT_EQ(asOther(jobDir, true), 1) << jobDir;
  EXPECT_EQ(asOther(file, false), 1) << file;
  p.signal(SIGTERM);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;
  EXPECT_FALSE(fs::exists(jobDir)) << "the job's working directory outlived the job";
}

TEST_F(Lockdown, FilesARestoreDownloadsIntoTheWorkingDirectoryAre0600) {
  // A restore hard-links the checkpoint's SSTs when the checkpoint is on the same file
  // system (it is here: both under tmp) and copies MANIFEST/CURRENT/OPTIONS. A link is the
  // checkpoint's own file (same inode; its mode is the checkpoint directory's business,
  // the 0700 working directory keeps others from this name); every other file, the
  // copies included, is 0600.
  fs::path chk = checkpointOf("WordCountIncremental");
  ASSERT_FALSE(chk.empty());
  std::set<std::pair<dev_t, ino_t>> checkpointFiles;  // the restored checkpoint's files
  std::set<std::string> copiedNames;                   // local names of its MANIFEST and OPTIONS
  for (const fs::path& d : {chk, chk.parent_path() / "shared"}) {
    std::error_code ec;
    for (fs::recursive_directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) {
      struct stat st {};
      if (lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      checkpointFiles.insert({st.st_dev, st.st_ino});
      const std::string name = it->path().filename().string();  // <operator>-<subtask>-<RocksDB's name>
      for (const char* kind : {"-MANIFEST-", "-OPTIONS-"})
        if (size_t at = name.find(kind); at != std::string::npos) copiedNames.insert(name.substr(at + 1));
    }
  }
  ASSERT_FALSE(checkpointFiles.empty()) << chk;
  ASSERT_FALSE(copiedNames.empty()) << chk;
  // No checkpoint of the restored job while we look: no flush, compaction or local
  // checkpoint changes the restored files, so one scan sees them as the restore left them.
  std::vector<std::string> args = {"run", "-s", chk.string(), "-c", "WordCountIncremental", "-D",
                                   "state.local.dir=" + localDir().string()};
  for (auto& f : ckFlags("1h")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "500"});
  Process p(jobhost(args), tmp / "restored.out", tmp / "restored.err");
  ASSERT_TRUE(waitFor([&] { return contains(readFile(tmp / "restored.err"), "restoring from"); }))
      << readFile(tmp / "restored.err");
  // Records out of the keyed operator: its state was restored.
  ASSERT_TRUE(waitFor([&] { return !readFile(tmp / "restored.out").empty(); })) << readFile(tmp / "restored.err");
  std::string jobId = jobIdIn(readFile(tmp / "restored.err"));
  ASSERT_FALSE(jobId.empty()) << readFile(tmp / "restored.err");
  std::vector<std::string> linked, notPrivate, copies;  // copies: of the checkpoint's MANIFEST/OPTIONS
  std::error_code ec;
  for (fs::recursive_directory_iterator it(localDir() / jobId / "attempt-1", ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const std::string name = it->path().filename().string();
    if (checkpointFiles.count({st.st_dev, st.st_ino}) > 0) {
      linked.push_back(name);
      EXPECT_EQ(it->path().extension(), ".sst") << "only SSTs may be links into the checkpoint: " << it->path();
      continue;
    }
    if (copiedNames.count(name) > 0) copies.push_back(name);
    if ((st.st_mode & 07777) != 0600u) notPrivate.push_back(it->path().string() + " " + std::to_string(st.st_mode & 07777));
  }
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_FALSE(linked.empty()) << "no SST of the working directory is a link into " << chk;
  // RocksDB's open replaces the downloaded MANIFEST and CURRENT by its own (0600 as well)
  // but keeps the downloaded OPTIONS file among the two it keeps: that copy is checked.
  EXPECT_FALSE(copies.empty()) << "no copy of the checkpoint's MANIFEST/OPTIONS in the working directory";
  EXPECT_TRUE(notPrivate.empty()) << "not 0600: " << notPrivate.front();
  p.signal(SIGTERM);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;
}

TEST_F(Lockdown, DefaultWorkingDirectoryIsInTheRuntimeDirectory) {
  fs::path xdg = tmp / "xdg";
  fs::create_directories(xdg);
  fs::permissions(xdg, fs::perms::owner_all);
  setenv("XDG_RUNTIME_DIR", xdg.c_str(), 1);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "500"});
  Process p(jobhost(args), tmp / "default.out", tmp / "default.err");
  unsetenv("XDG_RUNTIME_DIR");
  ASSERT_TRUE(waitForCheckpoint(p)) << readFile(tmp / "default.err");
  std::string jobId = jobIdIn(readFile(tmp / "default.err"));
  fs::path work = xdg / "jobhost" / "work";
  EXPECT_EQ(modeOf(work), 0700u);
  EXPECT_TRUE(fs::is_directory(work / jobId / "attempt-1")) << readFile(tmp / "default.err");
  p.signal(SIGTERM);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;
  EXPECT_TRUE(entries(work).empty()) << "left in " << work;
}

TEST_F(Lockdown, ARootThatIsASymbolicLinkIsRefusedWithTheReason) {
  fs::path xdg = tmp / "xdg";
  fs::create_directories(xdg / "jobhost");
  fs::permissions(xdg, fs::perms::owner_all);
  fs::permissions(xdg / "jobhost", fs::perms::owner_all);
  fs::create_directories(tmp / "elsewhere");
  fs::create_directory_symlink(tmp / "elsewhere", xdg / "jobhost" / "work");
  setenv("XDG_RUNTIME_DIR", xdg.c_str(), 1);
  Result r = cli({"run", "-c", "WordCountIncremental", kPlugin, "--input", kWords});
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "symbolic link")) << r.err;
  EXPECT_TRUE(contains(r.err, (xdg / "jobhost" / "work").string())) << r.err;
  EXPECT_TRUE(entries(tmp / "elsewhere").empty());
}

TEST_F(Lockdown, CrashLoopOfFiveAttemptsLeavesAtMostOneWorkingDirectory) {
  // Every attempt reads "crash" (abort()) after enough lines for its RocksDB instance to
  // exist; the worker dies without cleaning up, five times.
  std::string words = readFile(kWords), text;
  for (int i = 0; i < 20; ++i) text += words;
  text += "crash\n";
  fs::path in = tmp / "crash.txt";
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-D", "state.local.dir=" + localDir().string(),
                                   "-D", "restart-strategy.type=fixed-delay", "-D",
                                   "restart-strategy.fixed-delay.attempts=4", "-D",
                                   "restart-strategy.fixed-delay.delay=10ms"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string()});
  Process p(jobhost(args), tmp / "loop.out", tmp / "loop.err");
  size_t most = 0;
  while (p.running()) {
    for (const auto& job : entries(localDir())) {
      size_t attempts = 0;
      for (const auto& e : entries(job)) attempts += e.filename().string().rfind("attempt-", 0) == 0;
      most = std::max(most, attempts);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "attempt 4 failed")) << r.err;
  EXPECT_LE(most, 1u);
  size_t left = 0;
  for (const auto& job : entries(localDir())) left += entries(job).size() > 0 ? 1 : 0;
  EXPECT_LE(entries(localDir()).size(), 1u);
  EXPECT_EQ(left, 0u) << "the ended job left working files in " << localDir();
}

TEST_F(Lockdown, GcRemovesWorkingDirectoriesOfEndedJobsAndKeepsRunningOnes) {
  // A job killed with kill -9 (supervisor and worker) cannot remove its directory.
  std::string killedId;
  {
    Process p(slowRocksDbJob(kPlugin), tmp / "killed.out", tmp / "killed.err");
    ASSERT_TRUE(waitForCheckpoint(p)) << readFile(tmp / "killed.err");
    killedId = jobIdIn(readFile(tmp / "killed.err"));
    p.killTree();
    p.wait();
  }
  ASSERT_TRUE(fs::exists(localDir() / killedId));
  Process running(slowRocksDbJob(kPlugin), tmp / "running.out", tmp / "running.err");
  ASSERT_TRUE(waitFor([&] { return !jobIdIn(readFile(tmp / "running.err")).empty() &&
                                   fs::exists(localDir() / jobIdIn(readFile(tmp / "running.err")) / "attempt-1"); }))
      << readFile(tmp / "running.err");
  std::string runningId = jobIdIn(readFile(tmp / "running.err"));
  // state.local.dir may be shared (a home directory, /tmp): directories that are not laid
  // out as a job's working directory are never removed, whatever their name.
  fs::create_directories(localDir() / "photos" / "2024");
  writeFile(localDir() / "photos" / "2024" / "a.jpg", "jpeg");
  fs::create_directories(localDir() / "notes");
  fs::permissions(localDir() / "notes", fs::perms::owner_all, fs::perm_options::replace);
  writeFile(localDir() / "notes" / ".lock", "");
  writeFile(localDir() / "notes" / "todo.txt", "milk");
  fs::create_directories(localDir() / "empty");
  const std::vector<fs::path> theirs = {localDir() / "photos" / "2024" / "a.jpg", localDir() / "notes" / "todo.txt",
                                        localDir() / "empty"};

  std::string flag = "state.local.dir=" + localDir().string();
  Result dry = cli({"gc", "--dry-run", "-D", flag});
  EXPECT_EQ(dry.exitCode, 0) << dry.err;
  EXPECT_TRUE(contains(dry.out, (localDir() / killedId).string())) << dry.out;
  EXPECT_FALSE(contains(dry.out, runningId)) << dry.out;
  EXPECT_TRUE(contains(dry.out, "would remove 1 working directory")) << dry.out;
  EXPECT_TRUE(fs::exists(localDir() / killedId));

  Result gc = cli({"gc", "-D", flag});
  EXPECT_EQ(gc.exitCode, 0) << gc.err;
  EXPECT_TRUE(contains(gc.out, "removed 1 working directory")) << gc.out;
  EXPECT_FALSE(fs::exists(localDir() / killedId));
  EXPECT_TRUE(fs::exists(localDir() / runningId / "attempt-1"));
  for (const auto& f : theirs) EXPECT_TRUE(fs::exists(f)) << f << " was removed by gc:\n" << gc.out;
  // Nor does a run whose --job-id names one of them clear it to use it.
  Result reuse = cli({"run", "--job-id", "notes", "-c", "WordCountIncremental", "-D", flag, kPlugin, "--input", kWords});
  EXPECT_EQ(reuse.exitCode, 2) << reuse.err;
  EXPECT_TRUE(contains(reuse.err, "cannot use " + (localDir() / "notes").string() +
                                      " as the working directory of job notes: it exists and is not one (it holds "
                                      "'todo.txt'")) << reuse.err;
  for (const auto& f : theirs) EXPECT_TRUE(fs::exists(f)) << f << " was removed by a run:\n" << reuse.err;

  running.signal(SIGTERM);
  Result r = running.wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;
}

// --- Item 4: the plugin a job started with is the plugin it restarts with ----------------

TEST_F(Lockdown, PluginOverwrittenWhileItsJobRunsDoesNotChangeTheRestartedJob) {
  fs::path plugin = tmp / "libpinned.so";
  fs::copy_file(kPlugin, plugin);
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "restart-strategy.type=fixed-delay", "-D",
                                   "restart-strategy.fixed-delay.attempts=3", "-D",
                                   "restart-strategy.fixed-delay.delay=10ms",
                                   // Every checkpoint stays: inspect reads the one just listed.
                                   "-D", "state.checkpoints.num-retained=1000"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {plugin.string(), "--input", input(400).string(), "--rate", "500"});
  Process p(jobhost(args), tmp / "pinned.out", tmp / "pinned.err");
  ASSERT_TRUE(waitForCheckpoint(p)) << readFile(tmp / "pinned.err");
  std::string jobId = jobIdIn(readFile(tmp / "pinned.err"));
  auto digestOf = [&](const fs::path& chk) {
    Result inspect = cli({"inspect", "--json", chk.string()});
    std::smatch m;
    std::regex re("\"pluginDigest\":\"([0-9a-f]+)\"");
    return std::regex_search(inspect.out, m, re) ? m[1].str() : "(none in: " + inspect.out + inspect.err + ")";
  };
  std::string original = digestOf(completed(jobDirs().at(0)).back());

  // Overwrite the plugin in place (same inode, as cp does) with different bytes that
  // still load: the same library with bytes appended.
  {
    std::string bytes = readFile(kPlugin) + std::string(4096, 'x');
    std::ofstream out(plugin, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  Result listed = cli({"list"});
  std::string row;
  for (std::istringstream in(listed.out); std::getline(in, row);)
    if (contains(row, jobId)) break;
  EXPECT_TRUE(contains(row, "CHANGED")) << listed.out;

  // The worker dies; the restarted attempt must load the bytes the job started with.
  std::string children = readFile("/proc/" + std::to_string(p.pid()) + "/task/" + std::to_string(p.pid()) + "/children");
  ASSERT_FALSE(children.empty()) << "no worker process";
  pid_t worker = static_cast<pid_t>(std::stol(children));
  kill(worker, SIGKILL);
  ASSERT_TRUE(waitFor([&] { return contains(readFile(tmp / "pinned.err"), "attempt 1 failed"); }))
      << readFile(tmp / "pinned.err");
  auto idOf = [](const fs::path& chk) { return std::stoull(chk.filename().string().substr(4)); };
  uint64_t before = 0;  // attempt 1 is gone: every later checkpoint is attempt 2's
  for (const auto& c : completed(jobDirs().at(0))) before = std::max<uint64_t>(before, idOf(c));
  fs::path after;
  ASSERT_TRUE(waitFor([&] {
    for (const auto& c : completed(jobDirs().at(0)))
      if (idOf(c) > before) after = c;
    return !after.empty();
  })) << readFile(tmp / "pinned.err");
  EXPECT_EQ(digestOf(after), original) << "the restarted attempt loaded the overwritten plugin";
  p.signal(SIGTERM);
  Result r = p.wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;
}

}  // namespace
