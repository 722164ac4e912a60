// End-to-end tests of checkpoints and restores: rescaling from every handle type,
// chained restores (the second restore catches files deleted or not re-registered after
// the first), shared-file bookkeeping under num-retained, and the socket source.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <random>

#include "cli_fixture.h"
#include "../support/contains.h"

using namespace e2e;

namespace {

struct Leg {
  std::string cls;
  int parallelism;
  std::vector<std::string> flags;  // extra -D ...
};

class Checkpoints : public Cli {
 protected:
  /// Runs the legs one after another on the same input: every leg but the last is killed
  /// after one checkpoint of its own; each leg restores from the previous leg's job
  /// directory. Returns all outputs concatenated.
  std::string chain(const std::vector<Leg>& legs, const fs::path& in) {
    std::string all;
    fs::path previous;
    for (size_t i = 0; i < legs.size(); ++i) {
      const Leg& leg = legs[i];
      bool last = i + 1 == legs.size();
      std::vector<std::string> args = {"run", "-c", leg.cls, "-p", std::to_string(leg.parallelism)};
      if (!previous.empty()) args.insert(args.end(), {"-s", previous.string()});
      for (auto& f : ckFlags("150ms")) args.push_back(f);
      for (auto& f : leg.flags) args.insert(args.end(), {"-D", f});
      args.insert(args.end(), {kPlugin, "--input", in.string()});
      if (!last) args.insert(args.end(), {"--rate", "2000"});
      auto before = jobDirs();
      std::string outFile = (tmp / ("leg-" + std::to_string(i) + ".out")).string();
      std::string errFile = (tmp / ("leg-" + std::to_string(i) + ".err")).string();
      Process p(jobhost(args), outFile, errFile);
      if (!last) {
        // Wait for a checkpoint of this leg's own job directory.
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        fs::path mine;
        while (std::chrono::steady_clock::now() < until && p.running()) {
          for (const auto& d : jobDirs())
            if (std::find(before.begin(), before.end(), d) == before.end() && !completed(d).empty()) mine = d;
          if (!mine.empty()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        EXPECT_FALSE(mine.empty()) << "leg " << i << " wrote no checkpoint: " << readFile(errFile);
        p.signal(SIGKILL);
        Result r = p.wait();
        EXPECT_EQ(r.exitCode, 128 + SIGKILL) << "leg " << i << " ended before it was killed: " << r.err;
        all += r.out;
        previous = mine;
      } else {
        Result r = p.wait();
        EXPECT_EQ(r.exitCode, 0) << "leg " << i << ": " << r.err;
        all += r.out;
      }
    }
    return all;
  }

  /// Runs `cls` with incremental checkpoints (num-retained=2) and checks the shared-file
  /// bookkeeping while it runs and after it ended.
  void incrementalSharedFiles(const std::string& cls, const std::vector<std::string>& flags, const std::string& rate);
};

struct RescaleCase {
  const char* name;
  std::string cls;
  std::vector<std::string> flags;
  int from, to;
};

TEST_F(Checkpoints, RescalingFromEveryHandleTypeKeepsEveryCount) {
  std::vector<RescaleCase> cases = {
      {"hashmap 2->1", "WordCount", {}, 2, 1},
      {"hashmap 1->3", "WordCount", {}, 1, 3},
      {"hashmap incremental 2->1", "WordCount", {"state.backend.incremental=true"}, 2, 1},
      {"hashmap incremental 1->3", "WordCount", {"state.backend.incremental=true"}, 1, 3},
      {"hashmap incremental 2->3 into rocksdb", "WordCount", {"state.backend.incremental=true"}, 2, 3},
      {"rocksdb full 2->1", "WordCountIncremental", {"state.backend.incremental=false"}, 2, 1},
      {"rocksdb full 1->3", "WordCountIncremental", {"state.backend.incremental=false"}, 1, 3},
      {"rocksdb incremental 2->1", "WordCountIncremental", {}, 2, 1},
      {"rocksdb incremental 1->3", "WordCountIncremental", {}, 1, 3},
  };
  fs::path in = input(400);
  auto expected = expectedCounts(readFile(in));
  for (const auto& c : cases) {
    fs::remove_all(ckdir());
    std::vector<std::string> toFlags = c.flags;
    if (std::string(c.name).find("into rocksdb") != std::string::npos) toFlags = {"state.backend.type=rocksdb"};
    std::string out = chain({{c.cls, c.from, c.flags}, {c.cls, c.to, toFlags}}, in);
    EXPECT_EQ(finalCounts(out), expected) << c.name;
  }
}

TEST_F(Checkpoints, ChainedRestoresKeepEveryCountOnEveryBackendAndAcrossFullIncrementalSwitches) {
  struct Case {
    const char* name;
    std::vector<Leg> legs;
  };
  std::vector<Case> cases = {
      {"hashmap", {{"WordCount", 1, {}}, {"WordCount", 2, {}}, {"WordCount", 1, {}}}},
      {"hashmap incremental",
       {{"WordCount", 1, {"state.backend.incremental=true"}},
        {"WordCount", 2, {"state.backend.incremental=true"}},
        {"WordCount", 1, {"state.backend.incremental=true"}}}},
      {"hashmap incremental -> full -> incremental",
       {{"WordCount", 2, {"state.backend.incremental=true"}},
        {"WordCount", 2, {}},
        {"WordCount", 2, {"state.backend.incremental=true"}}}},
      {"rocksdb full",
       {{"WordCountIncremental", 1, {"state.backend.incremental=false"}},
        {"WordCountIncremental", 1, {"state.backend.incremental=false"}},
        {"WordCountIncremental", 1, {"state.backend.incremental=false"}}}},
      {"rocksdb incremental",
       {{"WordCountIncremental", 2, {}}, {"WordCountIncremental", 2, {}}, {"WordCountIncremental", 2, {}}}},
      {"incremental -> full -> incremental",
       {{"WordCountIncremental", 1, {}},
        {"WordCountIncremental", 1, {"state.backend.incremental=false"}},
        {"WordCountIncremental", 1, {}}}},
      {"full -> incremental -> full",
       {{"WordCountIncremental", 2, {"state.backend.incremental=false"}},
        {"WordCountIncremental", 2, {}},
        {"WordCountIncremental", 2, {"state.backend.incremental=false"}}}},
  };
  fs::path in = input(400);
  auto expected = expectedCounts(readFile(in));
  for (const auto& c : cases) {
    fs::remove_all(ckdir());
    std::string out = chain(c.legs, in);
    EXPECT_EQ(finalCounts(out), expected) << c.name;
  }
}

std::set<std::string> sharedFiles(const fs::path& jobDir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(jobDir / "shared")) out.insert(e.path().filename().string());
  return out;
}

/// Shared files referenced by a checkpoint, read through `jobhost inspect --json`.
std::set<std::string> referencedShared(Cli& t, const fs::path& chk, const std::function<Result(std::vector<std::string>)>& cli) {
  Result r = cli({"inspect", "--json", chk.string()});
  std::set<std::string> out;
  size_t pos = 0;
  while ((pos = r.out.find("/shared/", pos)) != std::string::npos) {
    size_t end = r.out.find('"', pos);
    out.insert(r.out.substr(pos + 8, end - pos - 8));
    pos = end;
  }
  return out;
}

TEST_F(Checkpoints, IncrementalCheckpointsUploadOnlyNewFilesAndDeleteSharedFilesExactlyWhenUnreferenced) {
  incrementalSharedFiles("WordCountIncremental", {}, "1000");
}

// The hashmap backend's incremental checkpoints: key-group files in shared/, owned the
// same way. A slow input changes a few words (key groups) per checkpoint, so later
// checkpoints reference files of earlier ones.
TEST_F(Checkpoints, HashmapIncrementalCheckpointsWriteChangedKeyGroupsAndDeleteSharedFilesExactlyWhenUnreferenced) {
  incrementalSharedFiles("WordCount", {"-D", "state.backend.incremental=true"}, "5");
}

void Checkpoints::incrementalSharedFiles(const std::string& cls, const std::vector<std::string>& flags,
                                             const std::string& rate) {
  // An input far longer than needed: the job is stopped once enough checkpoints were
  // observed, however fast or loaded the machine is.
  fs::path in = input(4000);
  std::vector<std::string> args = {"run", "-c", cls, "-D", "state.checkpoints.num-retained=2"};
  args.insert(args.end(), flags.begin(), flags.end());
  for (auto& f : ckFlags("300ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", rate});
  Process p(jobhost(args), tmp / "inc.out", tmp / "inc.err");
  // Observe the job directory while checkpoints complete: at every moment the shared
  // directory must hold every file a retained checkpoint references.
  fs::path jobDir;
  std::set<std::string> everUploaded;
  int observations = 0;
  int reusingCheckpoints = 0;  // checkpoints that reference files uploaded by an earlier one
  auto cliFn = [this](std::vector<std::string> a) { return cli(std::move(a)); };
  constexpr int kObservations = 8;
  while (p.running() && observations < kObservations) {
    auto dirs = jobDirs();
    if (!dirs.empty()) jobDir = dirs[0];
    if (!jobDir.empty()) {
      auto chks = completed(jobDir);
      EXPECT_LE(chks.size(), 3u) << "num-retained=2 (a third may be publishing)";
      for (const auto& c : chks) {
        if (!fs::exists(c / "_metadata")) continue;  // subsumed meanwhile
        auto refs = referencedShared(*this, c, cliFn);
        // List first, then confirm the checkpoint still existed: subsumption removes
        // _metadata before any file, so files listed while it exists must all be there.
        auto present = sharedFiles(jobDir);
        if (!fs::exists(c / "_metadata")) continue;
        for (const auto& f : refs) EXPECT_TRUE(present.count(f)) << f << " referenced by " << c << " is missing";
        ++observations;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  bool stopped = p.running();
  if (stopped) p.signal(SIGTERM);  // retention keeps the checkpoints
  Result r = p.wait();
  ASSERT_EQ(r.exitCode, stopped ? 130 : 0) << r.err;
  // Only a machine too loaded to list a directory twice per checkpoint sees fewer.
  EXPECT_GE(observations, stopped ? kObservations : 2);
  // Reuse, from the log (every checkpoint, not only those the loop caught before their
  // subsumption): "completed checkpoint N (X new, Y total, ...)" with X < Y.
  {
    std::istringstream log(r.err);
    std::string line;
    while (std::getline(log, line)) {
      auto at = line.find("completed checkpoint ");
      auto open = line.find('(', at == std::string::npos ? 0 : at);
      if (at == std::string::npos || open == std::string::npos) continue;
      auto newEnd = line.find(" new, ", open);
      auto totalEnd = line.find(" total", newEnd == std::string::npos ? open : newEnd);
      if (newEnd == std::string::npos || totalEnd == std::string::npos) continue;
      if (line.substr(open + 1, newEnd - open - 1) != line.substr(newEnd + 6, totalEnd - newEnd - 6)) ++reusingCheckpoints;
    }
  }
  EXPECT_GT(reusingCheckpoints, 0) << "no checkpoint reused an earlier upload: nothing was incremental";
  // After the run: exactly the files the retained checkpoints reference remain.
  auto chks = completed(jobDir);
  ASSERT_FALSE(chks.empty());
  EXPECT_LE(chks.size(), 2u);
  std::set<std::string> referenced;
  for (const auto& c : chks)
    for (const auto& f : referencedShared(*this, c, cliFn)) referenced.insert(f);
  EXPECT_EQ(sharedFiles(jobDir), referenced);
  // Later checkpoints reuse earlier uploads: the newest depends on an older one.
  Result hist = cli({"checkpoints", jobDir.string()});
  EXPECT_NE(hist.out.find("incremental"), std::string::npos) << hist.out;
  // One level too high (state.checkpoints.dir itself) said "no checkpoints": now it names
  // the job directories there.
  Result high = cli({"checkpoints", jobDir.parent_path().string()});
  EXPECT_EQ(high.exitCode, 2) << high.out << high.err;
  EXPECT_NE(high.err.find("holds the checkpoint directories of"), std::string::npos) << high.err;
  EXPECT_NE(high.err.find("jobhost checkpoints " + jobDir.parent_path().string() + "/"), std::string::npos) << high.err;
  // Log: some checkpoint uploaded less than the total it references.
  EXPECT_NE(r.err.find("completed checkpoint"), std::string::npos);
}

/// A one-shot TCP server on a free loopback port that sends `text` to the first client
/// and then closes.
class LineServer {
 public:
  explicit LineServer(std::string text) : text_(std::move(text)) {
    fd_ = listenOnLoopback(&port_);
    thread_ = std::thread([this] {
      for (int i = 0; i < 8; ++i) {  // serve every (re)connection
        int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ::send(c, text_.data(), text_.size(), MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        close(c);
      }
    });
  }
  ~LineServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::string text_;
  int fd_;
  int port_;
  std::thread thread_;
};

// Issue 35: a checkpoint triggered while the source is inside its last poll — here
// blocked reading a FIFO whose writer has not closed it yet — is taken when the input
// ends, its barrier after the last line. It used to be declined ("a source finished
// before its barrier"), that decline counted as a failed checkpoint, and with
// tolerable-failed-checkpoints = 0 the attempt failed and restarted: duplicated output
// (the Nexmark symptom), and here a restart that waits forever for a FIFO writer.
TEST_F(Checkpoints, ACheckpointWaitingForASourceInItsLastPollIsTakenWhenTheInputEnds) {
  const fs::path fifo = tmp / "in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // O_RDWR never blocks; O_CLOEXEC keeps the job from inheriting a writer (no EOF then).
  int writer = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(writer, 0) << std::strerror(errno);
  const std::string text = "to be or not to be\nthat is the question\n";
  ASSERT_EQ(::write(writer, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  std::vector<std::string> args = {"run", "-c", "WordCount"};
  for (auto& f : ckFlags("50ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", fifo.string()});
  Process proc(jobhost(args), tmp / "fifo.out", tmp / "fifo.err");
  // Started: the source has read both lines and blocks for more; the first trigger comes
  // 50 ms later and waits in the source task's mailbox.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (readFile(tmp / "fifo.err").find("starting") == std::string::npos && proc.running() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::close(writer);
  Result r = proc.wait(std::chrono::seconds(30));
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("completed checkpoint 1 "), std::string::npos) << r.err;
  auto counts = finalCounts(r.out);
  EXPECT_EQ(counts["to"], 2);
  EXPECT_EQ(counts["be"], 2);
  EXPECT_EQ(counts["question"], 1);
  EXPECT_EQ(counts.size(), 8u);
}

TEST_F(Checkpoints, SocketWordCountCountsAndFailsAfterTheFourthError) {
  {
    LineServer server("hello world\nhello\n");
    Result r = cli({"run", "-c", "WordCount", kPlugin, "--port", std::to_string(server.port())});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(finalCounts(r.out), (std::map<std::string, long>{{"hello", 2}, {"world", 1}}));
  }
  {
    // Each (re)connection receives "error": 1 try + 3 restarts, then the job fails.
    LineServer server("error\n");
    Result r = cli({"run", "-c", "WordCount", "-D", "restart-strategy.fixed-delay.delay=20ms", kPlugin, "--port",
                    std::to_string(server.port())});
    EXPECT_EQ(r.exitCode, 1) << r.err;
    EXPECT_NE(r.err.find("Recovery is suppressed by FixedDelayRestartStrategy(maxAttempts=3"), std::string::npos) << r.err;
  }
  // A port nobody listens on: bind one, note it, close it.
  int closedPort;
  close(listenOnLoopback(&closedPort));
  const std::string port = std::to_string(closedPort);
  Result refused = cli({"run", "-c", "WordCount", "-D", "restart-strategy.fixed-delay.delay=10ms", kPlugin, "--host",
                        "127.0.0.1", "--port", port});
  EXPECT_EQ(refused.exitCode, 1);
  EXPECT_NE(refused.err.find("attempt 3 failed"), std::string::npos) << "a refused connection is retried: " << refused.err;
  EXPECT_NE(refused.err.find("cannot connect to 127.0.0.1:" + port), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("nc -lk " + port), std::string::npos) << refused.err;
}

}  // namespace

namespace {

/// A small tmpfs for disk-full tests; unavailable without mount rights (then skipped).
struct SmallFilesystem {
  fs::path dir;
  bool mounted = false;
  SmallFilesystem(const fs::path& where, const std::string& size) : dir(where) {
    fs::create_directories(dir);
    std::string cmd = "mount -t tmpfs -o size=" + size + " tmpfs " + dir.string() + " 2>/dev/null";
    mounted = std::system(cmd.c_str()) == 0;
  }
  ~SmallFilesystem() {
    if (mounted) std::system(("umount -l " + dir.string() + " 2>/dev/null").c_str());
  }
};

TEST_F(Checkpoints, ACheckpointOnAFullDiskIsDeclinedNotCountedAndTheJobKeepsRunning) {
  SmallFilesystem small(tmp / "small", "400k");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  // Distinct words make the state grow past what the small disk holds twice over.
  fs::path in = tmp / "distinct.txt";
  std::string text;
  for (int i = 0; i < 12000; ++i) text += "word" + std::to_string(i) + "-padding-padding\n";
  writeFile(in, text);
  auto run = [&](const std::string& tolerable) {
    return cli({"run", "-c", "WordCount", "-D", "state.checkpoints.dir=" + small.dir.string(), "-D",
                "execution.checkpointing.interval=100ms", "-D", "restart-strategy.type=none", "-D",
                "execution.checkpointing.tolerable-failed-checkpoints=" + tolerable, kPlugin, "--input", in.string(),
                "--rate", "6000", "--output-file", (tmp / ("out-" + tolerable + ".txt")).string()});
  };
  Result tolerant = run("1000");
  EXPECT_EQ(tolerant.exitCode, 0) << tolerant.err;
  EXPECT_NE(tolerant.err.find("No space left on device"), std::string::npos) << tolerant.err;
  EXPECT_NE(tolerant.err.find("completed checkpoint"), std::string::npos) << tolerant.err;
  EXPECT_EQ(finalCounts(readFile(tmp / "out-1000.txt")).size(), 12000u);
  // The checkpoint that completed before the disk filled is intact and restorable.
  fs::path jobDir;
  for (const auto& e : fs::directory_iterator(small.dir)) jobDir = e.path();
  Result check = cli({"check", "-s", jobDir.string(), "-c", "WordCount", kPlugin, "--input", in.string()});
  EXPECT_EQ(check.exitCode, 0) << check.err;
  fs::remove_all(jobDir);

  // A full disk is waited out (issue 31): declined, not counted, even with no tolerance.
  Result strict = run("0");
  EXPECT_EQ(strict.exitCode, 0) << strict.err;
  EXPECT_NE(strict.err.find("was declined (store unavailable)"), std::string::npos) << strict.err;
  EXPECT_EQ(strict.err.find("tolerable-failed-checkpoints = 0"), std::string::npos) << strict.err;
  EXPECT_EQ(finalCounts(readFile(tmp / "out-0.txt")).size(), 12000u);
}

/// Keeps a filesystem full but for `slackBytes`: every byte freed is taken again within
/// milliseconds, until stop(). Its files are removed by stop().
class DiskFiller {
 public:
  DiskFiller(fs::path dir, uint64_t slackBytes) : dir_(std::move(dir)), slack_(slackBytes) {
    thread_ = std::thread([this] { loop(); });
  }
  ~DiskFiller() { stop(); }
  /// Blocks until the filesystem was full but for the slack at least once.
  void waitFull() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return full_; });
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    for (int i = 0; i < files_; ++i) fs::remove(dir_ / ("filler-" + std::to_string(i)));
  }

 private:
  uint64_t freeBytes() const {
    struct statvfs st {};
    if (statvfs(dir_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
  void loop() {
    const std::string chunk(64 * 1024, 'f');
    while (!stop_) {
      uint64_t free = freeBytes();
      if (free > slack_ + chunk.size()) {
        int fd = ::open((dir_ / ("filler-" + std::to_string(files_++))).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        for (uint64_t left = free - slack_; fd >= 0 && left >= chunk.size(); left -= chunk.size())
          if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) break;
        if (fd >= 0) ::close(fd);
        continue;
      }
      {
        std::lock_guard lock(mu_);
        full_ = true;
      }
      cv_.notify_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  const fs::path dir_;
  const uint64_t slack_;
  std::atomic<bool> stop_{false};
  int files_ = 0;  // touched by the thread until stop() joins it
  std::mutex mu_;
  std::condition_variable cv_;
  bool full_ = false;  // guarded by mu_
  std::thread thread_;
};

/// `lines` lines of a distinct random word (32 hex digits, from `seed`) and "to be": the
/// RocksDB state grows by ~50 bytes a line, compressed; "to" and "be" count every line.
std::string distinctWords(int lines, uint64_t seed) {
  std::string text;
  std::mt19937_64 random(seed);
  char word[48];
  for (int i = 0; i < lines; ++i) {
    std::snprintf(word, sizeof word, "%016llx%016llx", static_cast<unsigned long long>(random()),
                  static_cast<unsigned long long>(random()));
    text += std::string(word) + " to be\n";
  }
  return text;
}

/// Bytes of the shared files (RocksDB SSTs) of the job directories under `ckdir`.
uint64_t sharedBytes(const fs::path& ckdir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(ckdir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->path().parent_path().filename() == "shared" && it->is_regular_file(ec)) n += it->file_size(ec);
  return n;
}

// Regression (issue 12): a full local disk while a failover restores the RocksDB state
// ended the job at once ("failed while restoring state, not retrying", exit 3): every
// restore error but Corruption/NotFound was turned into "incompatible". An I/O error is a
// task failure: the restart strategy retries, and once there is space again the job
// recovers with exact counts. The log names the local file and the OS reason.
TEST_F(Checkpoints, AFullLocalDiskDuringARestoreIsRetriedAndTheJobRecoversWithExactCounts) {
  SmallFilesystem small(tmp / "local", "64m");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): no full local disk to restore on";
  // Distinct random words: the state (and what a restore downloads) grows with the input
  // by ~50 bytes a line, compressed. "to" and "be" count every line: exactly-once state.
  fs::path in = tmp / "distinct.txt";
  const std::string text = distinctWords(200000, 12);
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-D", "state.local.dir=" + small.dir.string(),
                                   "-D", "restart-strategy.type=fixed-delay", "-D",
                                   "restart-strategy.fixed-delay.attempts=50", "-D",
                                   "restart-strategy.fixed-delay.delay=200ms"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "20000"});
  Process p(jobhost(args), tmp / "enospc.out", tmp / "enospc.err");
  // A checkpoint whose restore needs far more than the slack the filler leaves (a new
  // RocksDB instance fits in it; the download of the checkpoint's files does not).
  constexpr uint64_t kSlack = 1u << 20, kState = 4u << 20;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  // Read once per look: the shared files shrink again when a compaction's checkpoint
  // subsumes older SSTs, so a second reading could be below the first (2026-12-07: the
  // test failed 3 s in, reporting "still running after 120 s" with 2.9 MiB).
  uint64_t held = 0;
  while ((held = sharedBytes(ckdir())) < kState && p.running() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (held < kState) {
    // Seen once in CI (14:00 on 2026-12-05): the job ended 0.4 s after its start with
    // nothing in its log. Say how it ended (128 + signal if killed).
    const std::string how = p.running() ? std::string("still running after 120 s")
                                        : "ended with exit status " + std::to_string(p.wait().exitCode);
    FAIL() << "the job " << how << " before its checkpoints held " << kState << " bytes (" << held
           << "):\n" << readFile(tmp / "enospc.err") << "\nstdout:\n" << readFile(tmp / "enospc.out");
  }
  DiskFiller filler(small.dir, kSlack);
  filler.waitFull();
  // Fail over: kill the worker (the supervisor restarts it); its working directory stays.
  std::vector<pid_t> workers;
  {
    std::ifstream children("/proc/" + std::to_string(p.pid()) + "/task/" + std::to_string(p.pid()) + "/children");
    pid_t c;
    while (children >> c) workers.push_back(c);
  }
  // (Unless the full disk already failed it: then a worker may be between attempts.)
  ASSERT_LE(workers.size(), 1u) << "one worker process";
  if (!workers.empty()) kill(workers[0], SIGKILL);
  // The next attempt's restore runs out of space; once that is logged, free the disk.
  until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (readFile(tmp / "enospc.err").find("No space left on device") == std::string::npos && p.running() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  filler.stop();
  Result r = p.wait(std::chrono::seconds(300));
  EXPECT_EQ(r.exitCode, 0) << "an I/O error while restoring is retried:\n" << r.err;
  EXPECT_EQ(r.err.find("not retrying"), std::string::npos) << r.err;
  // The failed attempt names what it could not restore, the local file and the errno text.
  std::string failed;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    if (line.find("No space left on device") != std::string::npos && line.find("failed") != std::string::npos) {
      failed = line;
      break;
    }
  ASSERT_FALSE(failed.empty()) << r.err;
  EXPECT_NE(failed.find("cannot restore state of operator 'counts'"), std::string::npos) << failed;
  EXPECT_NE(failed.find(small.dir.string() + "/"), std::string::npos) << "names the local file: " << failed;
  EXPECT_NE(failed.find("the job waits"), std::string::npos) << failed;  // waited out, not counted
  EXPECT_EQ(finalCounts(r.out), expectedCounts(text));
}

// Issue 31: the local disk under the RocksDB state fills while the job runs. RocksDB stops
// writing (a flush met ENOSPC) and every state write fails from then on; on 6959f2b that
// was a task failure for the restart strategy, so with restart-strategy none the job
// ended (exit 1). Now it is waited out like a store outage: the attempt ends, the job
// waits for space (not counted), restores the latest checkpoint and ends with exact counts.
// Write access to the checkpoint directory lost while the job runs (a file system
// remounted read-only after a disk error, an owner or mode changed) failed the attempt —
// with tolerable-failed-checkpoints 0 at the first checkpoint — and rewound the job to a
// checkpoint it then could not write either, where a full disk was waited out. Now both
// are outages of the store: declined, not counted, and checkpoints resume once it is
// writable again. (The job runs without CAP_DAC_OVERRIDE, so the mode bits hold for it
// although the tests run as root; a read-only remount is refused while the job holds its
// lock file open for writing.)
TEST_F(Checkpoints, ACheckpointDirectoryThatBecomesReadOnlyIsWaitedOutNotCounted) {
  if (std::system("/usr/bin/setpriv --bounding-set=-dac_override,-dac_read_search true 2>/dev/null") != 0)
    GTEST_SKIP() << "setpriv (util-linux) cannot drop CAP_DAC_OVERRIDE here";
  fs::path in = input(60);
  const fs::path err = tmp / "ro.err";
  auto before = jobDirs();
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "restart-strategy.type=none", "-D",
                                   "execution.checkpointing.tolerable-failed-checkpoints=0"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "300"});
  std::vector<std::string> command = jobhost(args);
  command.insert(command.begin(), {"/usr/bin/setpriv", "--bounding-set=-dac_override,-dac_read_search"});
  Process p(command, tmp / "ro.out", err);
  ASSERT_TRUE(waitForCheckpoint(p, 2)) << readFile(err);
  fs::path jobDir;
  for (const auto& d : jobDirs())
    if (std::find(before.begin(), before.end(), d) == before.end()) jobDir = d;
  ASSERT_FALSE(jobDir.empty()) << readFile(err);
  fs::permissions(jobDir, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                  fs::perm_options::remove);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (readFile(err).find("was declined (store unavailable)") == std::string::npos && p.running() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a few more declined
  const std::string during = readFile(err);
  fs::permissions(jobDir, fs::perms::owner_write, fs::perm_options::add);
  ASSERT_TRUE(p.running()) << "the job ended while its checkpoint directory was not writable:\n" << during;
  Result r = p.wait(std::chrono::seconds(120));
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(during.find("was declined (store unavailable)"), std::string::npos) << during;
  EXPECT_NE(during.find("Permission denied"), std::string::npos) << during;
  EXPECT_EQ(r.err.find("tolerable-failed-checkpoints = 0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("attempt 1 failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("answers again"), std::string::npos) << "checkpoints did not resume:\n" << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(readFile(in)));
}

// The same lost write access when the job starts is a mistake to say at once, not an
// outage to wait out: on 5c45ef9 a job whose directory existed (a stable --job-id, as a
// container restarts with) started, declined every checkpoint as "store unavailable" and
// finished with exit 0 and no checkpoint. Now it ends at once with exit 2 naming the
// directory, before the job runs, and the directory is as it was.
TEST_F(Checkpoints, ACheckpointDirectoryNotWritableWhenTheJobStartsIsAnErrorAtOnce) {
  if (std::system("/usr/bin/setpriv --bounding-set=-dac_override,-dac_read_search true 2>/dev/null") != 0)
    GTEST_SKIP() << "setpriv (util-linux) cannot drop CAP_DAC_OVERRIDE here";
  fs::path in = input(2);
  auto command = [&](bool restore) {
    std::vector<std::string> args = {"run", "-c", "WordCount", "--job-id", "read-only-start"};
    if (restore) args.insert(args.end(), {"--restore", "latest"});
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "100"});
    std::vector<std::string> c = jobhost(args);
    c.insert(c.begin(), {"/usr/bin/setpriv", "--bounding-set=-dac_override,-dac_read_search"});
    return c;
  };
  Result first = run(command(false), tmp.path, std::chrono::seconds(60));
  ASSERT_EQ(first.exitCode, 0) << first.err;
  ASSERT_NE(first.err.find("completed checkpoint"), std::string::npos) << first.err;
  const fs::path jobDir = ckdir() / "read-only-start";
  ASSERT_TRUE(fs::is_directory(jobDir / "shared")) << first.err;
  auto checkpoints = [&] {
    auto sums = treeChecksums(jobDir);
    sums.erase(".lock");  // names its last holder
    return sums;
  };
  const auto before = checkpoints();
  const auto noWrite = fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write;
  for (const fs::path& readOnly : {jobDir, jobDir / "shared"}) {
    fs::permissions(readOnly, noWrite, fs::perm_options::remove);
    Result r = run(command(true), tmp.path, std::chrono::seconds(60));
    fs::permissions(readOnly, fs::perms::owner_write, fs::perm_options::add);
    EXPECT_EQ(r.exitCode, 2) << r.err;
    EXPECT_NE(r.err.find("error: cannot write to the checkpoint directory " + readOnly.string() + ": Permission denied"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("(WordCount) starting"), std::string::npos) << "the job ran:\n" << r.err;
    EXPECT_EQ(checkpoints(), before) << "a refused start changed the job directory";
  }
  Result again = run(command(true), tmp.path, std::chrono::seconds(60));
  EXPECT_EQ(again.exitCode, 0) << again.err;
  EXPECT_NE(again.err.find("restoring " + (jobDir / "chk-").string()), std::string::npos) << again.err;
}

TEST_F(Checkpoints, AFullLocalDiskWhileTheJobRunsIsWaitedOutNotCounted) {
  SmallFilesystem small(tmp / "local", "64m");
  if (!small.mounted) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): no local disk to fill";
  fs::path in = tmp / "distinct.txt";
  const std::string text = distinctWords(120000, 31);
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-D", "state.local.dir=" + small.dir.string(),
                                   "-D", "restart-strategy.type=none"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "15000"});
  const fs::path err = tmp / "full.err";
  Process p(jobhost(args), tmp / "full.out", err);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (readFile(err).find("completed checkpoint 3 ") == std::string::npos && p.running() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(p.running()) << readFile(err);
  DiskFiller filler(small.dir, 0);
  filler.waitFull();
  until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (readFile(err).find("the job waits for free space on the local disk") == std::string::npos && p.running() &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string during = readFile(err);
  filler.stop();
  Result r = p.wait(std::chrono::seconds(300));
  ASSERT_EQ(r.exitCode, 0) << "a full local disk while running is waited out:\n" << r.err;
  // The attempt ends with the backend's error naming the directory; or — RocksDB 7.8 can
  // abort on a failed write instead of returning it — the worker dies while the disk is
  // full, which the supervisor reports with the directory too.
  const bool backendSaidIt = during.find("the local disk of the RocksDB state is full (" + small.dir.string()) != std::string::npos;
  const bool supervisorSawIt = during.find("with the local disk of its state (" + small.dir.string()) != std::string::npos;
  EXPECT_TRUE(backendSaidIt || supervisorSawIt) << during;
  EXPECT_NE(during.find("the job waits for free space on the local disk"), std::string::npos) << during;
  EXPECT_NE(r.err.find("there is free space on the local disk again"), std::string::npos) << r.err;
  EXPECT_EQ(finalCounts(r.out), expectedCounts(text));
}

}  // namespace

namespace {

TEST_F(Checkpoints, NoClaimNeverTouchesTheRestoredSnapshotAndClaimDeletesItAfterTheFirstOwnCheckpoint) {
  fs::path chk = checkpointOf("WordCountIncremental");
  fs::path sourceJob = chk.parent_path();
  auto before = treeChecksums(sourceJob);
  fs::path in = input(300);
  auto restore = [&](const std::string& mode) {
    std::vector<std::string> args = {"run", "-s", chk.string(), "-c", "WordCountIncremental", "--restore-mode", mode};
    for (auto& f : ckFlags("50ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "3000"});
    return cli(args);
  };
  Result noClaim = restore("no-claim");
  ASSERT_EQ(noClaim.exitCode, 0) << noClaim.err;
  EXPECT_GE(std::count(noClaim.err.begin(), noClaim.err.end(), '\n'), 3);
  EXPECT_NE(noClaim.err.find("completed checkpoint"), std::string::npos) << noClaim.err;
  EXPECT_EQ(treeChecksums(sourceJob), before) << "no-claim must leave the snapshot byte for byte as it was";

  Result claim = restore("claim");
  ASSERT_EQ(claim.exitCode, 0) << claim.err;
  EXPECT_NE(claim.err.find("deleted the claimed snapshot"), std::string::npos) << claim.err;
  EXPECT_FALSE(fs::exists(chk / "_metadata"));
  // The new job's own checkpoints restore without the claimed files.
  fs::path newest;
  for (const auto& d : jobDirs())
    if (d != sourceJob && !completed(d).empty() && claim.err.find(d.filename().string()) != std::string::npos) newest = d;
  ASSERT_FALSE(newest.empty());
  Result check = cli({"check", "-s", newest.string(), "-c", "WordCountIncremental", kPlugin, "--input", in.string()});
  EXPECT_EQ(check.exitCode, 0) << check.err;
}

TEST_F(Checkpoints, CancellingDeletesCheckpointsOnlyWithDeleteOnCancellation) {
  for (const std::string retention : {"DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION"}) {
    fs::remove_all(ckdir());
    std::vector<std::string> args = {"run", "-c", "WordCount", "-D",
                                     "execution.checkpointing.externalized-checkpoint-retention=" + retention};
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "1000"});
    Process p(jobhost(args), tmp / "cancel.out", tmp / "cancel.err");
    ASSERT_TRUE(waitForCheckpoint(p, 1)) << readFile(tmp / "cancel.err");
    fs::path jobDir = jobDirs().at(0);
    Result c = cli({"cancel", jobDir.filename().string()});
    EXPECT_EQ(c.exitCode, 0) << c.err << c.out;
    Result r = p.wait(std::chrono::seconds(60));
    EXPECT_EQ(r.exitCode, 0) << r.err;
    if (retention == "DELETE_ON_CANCELLATION")
      EXPECT_FALSE(fs::exists(jobDir)) << "checkpoints of a cancelled job are deleted";
    else
      EXPECT_FALSE(completed(jobDir).empty()) << "checkpoints of a cancelled job are kept";
  }
}

TEST_F(Checkpoints, ACheckpointDirectoryGivenAsAFileUriWorksAndOtherSchemesAreRefused) {
  Result ok = cli({"run", "-c", "WordCount", "-D", "state.checkpoints.dir=file://" + ckdir().string(), kPlugin,
                   "--input", kWords});
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_EQ(jobDirs().size(), 1u);
  Result bad = cli({"run", "-c", "WordCount", "-D", "state.checkpoints.dir=hdfs://nn:8020/ck", kPlugin, "--input", kWords});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("storage scheme 'hdfs' is not supported; use a local path, file:/// or s3://bucket/prefix"),
            std::string::npos)
      << bad.err;
  // s3:// is supported (tests/s3/): without credentials (none in this test's environment),
  // one error saying where to put them.
  if (std::getenv("AWS_ACCESS_KEY_ID") == nullptr && std::getenv("AWS_SECRET_ACCESS_KEY") == nullptr) {
    Result noKeys = cli({"run", "-c", "WordCount", "-D", "state.checkpoints.dir=s3://bucket/ck", "-D",
                         "execution.checkpointing.interval=1s", kPlugin, "--input", kWords});
    EXPECT_EQ(noKeys.exitCode, 2) << noKeys.err;
    EXPECT_NE(noKeys.err.find("state.checkpoints.dir = 's3://bucket/ck': no S3 credentials"), std::string::npos) << noKeys.err;
  }
}

// The S3 storage's HTTP client (libcurl and the ~30 libraries it needs) is a module
// loaded on first use (state/src/s3_http.h): jobhost itself must not need libcurl, and a
// missing module is one error naming it and the fix, before the job starts.
TEST_F(Checkpoints, TheS3ClientIsAModuleLoadedOnFirstUseAndAMissingOneIsOneClearError) {
  Result libs = run({"/usr/bin/env", "LD_TRACE_LOADED_OBJECTS=1", kJobhost}, tmp.path);
  EXPECT_TRUE(contains(libs.out, "libstdc++")) << "the loader's list of libraries: " << libs.out << libs.err;
  EXPECT_FALSE(contains(libs.out, "libcurl")) << libs.out;

  fs::create_directories(tmp / "no-modules");
  Result r = run({"/usr/bin/env", "JOBHOST_MODULE_DIR=" + (tmp / "no-modules").string(), "AWS_ACCESS_KEY_ID=k",
                  "AWS_SECRET_ACCESS_KEY=s", kJobhost, "run", "-c", "WordCount", "-D",
                  "state.checkpoints.dir=s3://bucket/ck", "-D", "execution.checkpointing.interval=1s", kPlugin,
                  "--input", kWords},
                 tmp.path);
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "state.checkpoints.dir = 's3://bucket/ck': cannot load jobhost's S3 module "
                              "libjobhost_s3_http.so, which s3:// locations need (tried " +
                                  (tmp / "no-modules" / "libjobhost_s3_http.so").string() + " (no such file))"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "set JOBHOST_MODULE_DIR")) << r.err;
  EXPECT_TRUE(jobDirs().empty()) << "nothing was written";
}

// A module that is there but not ours to call: one of another jobhost build (its
// interface differs: never called, it would abort) or a library that is no S3 module.
// Each is one error naming the file and why, before the job starts.
TEST_F(Checkpoints, AnS3ModuleOfAnotherBuildOrNoModuleAtAllIsRefusedWithOneClearError) {
  struct Case {
    std::string dir, why;
  };
  fs::create_directories(tmp / "not-a-module");
  fs::copy_file(JOBHOST_NOT_A_MODULE, tmp / "not-a-module" / "libjobhost_s3_http.so");
  const std::vector<Case> cases = {
      {JOBHOST_FOREIGN_MODULE_DIR, "(a module of another jobhost build: its interface differs)"},
      {(tmp / "not-a-module").string(), "(not a jobhost S3 module)"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dir);
    Result r = run({"/usr/bin/env", "JOBHOST_MODULE_DIR=" + c.dir, "AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s",
                    kJobhost, "run", "-c", "WordCount", "-D", "state.checkpoints.dir=s3://bucket/ck", "-D",
                    "execution.checkpointing.interval=1s", kPlugin, "--input", kWords},
                   tmp.path);
    EXPECT_EQ(r.exitCode, 2) << r.err;
    EXPECT_TRUE(contains(r.err, "cannot load jobhost's S3 module libjobhost_s3_http.so, which s3:// locations need (tried " +
                                    (fs::path(c.dir) / "libjobhost_s3_http.so").string() + " " + c.why + ")"))
        << r.err;
    EXPECT_FALSE(contains(r.err, "Aborted")) << r.err;
    EXPECT_TRUE(jobDirs().empty()) << "nothing was written";
  }
}

}  // namespace

namespace {

// Regression (review finding): a savepoint that fails in one subtask must not crash the
// others (the storage outlived its requester), at any parallelism; the job keeps running.
TEST_F(Checkpoints, AFailedSavepointAtParallelismFourLeavesTheJobRunning) {
  std::vector<std::string> args = {"run", "-c", "WordCount", "-p", "4"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  // 37 s of input: the job must still run when the savepoints come, however slowly a
  // loaded machine starts it (with 4 s of input it once finished first under CI).
  args.insert(args.end(), {kPlugin, "--input", input(4000).string(), "--rate", "1500"});
  Process p(jobhost(args), tmp / "sp.out", tmp / "sp.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1)) << readFile(tmp / "sp.err");
  std::string id = jobDirs().at(0).filename().string();
  writeFile(tmp / "afile", "x");
  for (int i = 0; i < 3; ++i) {
    Result sp = cli({"savepoint", id, (tmp / "afile" / "sub").string()});
    EXPECT_EQ(sp.exitCode, 1) << sp.out << sp.err;
  }
  Result ok = cli({"savepoint", id, (tmp / "savepoints").string()});
  EXPECT_EQ(ok.exitCode, 0) << ok.out << ok.err;
  p.signal(SIGTERM);
  Result r = p.wait(std::chrono::seconds(60));
  EXPECT_EQ(r.exitCode, 130) << r.err;
  EXPECT_EQ(r.err.find("killed by"), std::string::npos) << "the worker crashed: " << r.err;
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
}

}  // namespace
