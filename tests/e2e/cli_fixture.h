// tests/e2e/cli_fixture.h — the fixture of the end-to-end tests: a temp directory, the
// paths of the built binary and plugin, and helpers to run and kill jobs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "process.h"

namespace e2e {
inline const std::string kJobhost = JOBHOST_BIN;
inline const std::string kPlugin = JOBHOST_PLUGIN;
inline const std::string kWords = JOBHOST_WORDS;

class Cli : public ::testing::Test {
 protected:
  TempDir tmp;
  fs::path ckdir() const { return tmp / "checkpoints"; }

  std::vector<std::string> jobhost(std::vector<std::string> args) const {
    args.insert(args.begin(), kJobhost);
    return args;
  }
  Result cli(std::vector<std::string> args, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    return run(jobhost(std::move(args)), tmp.path, timeout);
  }
  /// The bundled input repeated `times` times.
  fs::path input(int times) {
    fs::path p = tmp / ("input-" + std::to_string(times) + ".txt");
    std::string words = readFile(kWords), all;
    for (int i = 0; i < times; ++i) all += words;
    writeFile(p, all);
    return p;
  }
  std::vector<fs::path> jobDirs() const {
    std::vector<fs::path> out;
    if (!fs::exists(ckdir())) return out;
    for (const auto& e : fs::directory_iterator(ckdir())) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::vector<fs::path> completed(const fs::path& jobDir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(jobDir))
      if (e.path().filename().string().rfind("chk-", 0) == 0 && fs::exists(e.path() / "_metadata")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  /// Waits until some job directory has a completed checkpoint.
  /// The highest N of a completed chk-N (its _metadata written) in any job directory; 0 if none.
  int latestCheckpointNumber() const {
    int n = 0;
    for (const auto& d : jobDirs())
      for (const auto& e : fs::directory_iterator(d))
        if (e.path().filename().string().rfind("chk-", 0) == 0 && fs::exists(e.path() / "_metadata"))
          n = std::max(n, std::stoi(e.path().filename().string().substr(4)));
    return n;
  }
  bool waitForCheckpoint(Process& p, int minCount = 1, std::chrono::seconds timeout = std::chrono::seconds(30)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until && p.running()) {
      if (latestCheckpointNumber() >= minCount) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::vector<std::string> ckFlags(const std::string& interval = "200ms") const {
    return {"-D", "state.checkpoints.dir=" + ckdir().string(), "-D", "execution.checkpointing.interval=" + interval};
  }
  /// Runs `cls` on a long throttled input until its first checkpoint completes, then
  /// stops it (SIGTERM: checkpoints are retained), and returns that checkpoint's
  /// directory. Independent of how fast the machine is.
  fs::path checkpointOf(const std::string& cls, int parallelism = 1, std::vector<std::string> extra = {}) {
    auto before = jobDirs();
    std::vector<std::string> args = {"run", "-c", cls, "-p", std::to_string(parallelism)};
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "1500"});
    Process p(jobhost(args), tmp / "checkpointOf.out", tmp / "checkpointOf.err");
    EXPECT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "checkpointOf.err");
    p.signal(SIGTERM);
    Result r = p.wait(std::chrono::seconds(60));
    EXPECT_EQ(r.exitCode, 130) << r.err;
    for (const auto& d : jobDirs()) {
      if (std::find(before.begin(), before.end(), d) != before.end()) continue;
      auto c = completed(d);
      if (!c.empty()) return c.back();
    }
    ADD_FAILURE() << "no checkpoint written: " << r.err;
    return {};
  }
  /// Runs `cls` on `in` slowly, kills it with SIGKILL after `killAfterCheckpoints`
  /// checkpoints (plus a random delay), then restores from its job directory and runs to
  /// the end. Returns both outputs concatenated.
  std::string killAndRestore(const std::string& cls, const fs::path& in, int parallelism, int killAfterCheckpoints,
                             int extraDelayMs, std::vector<std::string> restoreFlags = {}) {
    std::vector<std::string> args = {"run", "-c", cls, "-p", std::to_string(parallelism)};
    for (auto& f : ckFlags()) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "2000"});
    std::string out1;
    {
      Process p(jobhost(args), tmp / "kill-out.txt", tmp / "kill-err.txt");
      EXPECT_TRUE(waitForCheckpoint(p, killAfterCheckpoints)) << readFile(tmp / "kill-err.txt");
      std::this_thread::sleep_for(std::chrono::milliseconds(extraDelayMs));
      p.signal(SIGKILL);
      Result r = p.wait();
      EXPECT_EQ(r.exitCode, 128 + SIGKILL) << "the job ended before it could be killed: " << r.err;
      out1 = r.out;
    }
    auto dirs = jobDirs();
    EXPECT_EQ(dirs.size(), 1u);
    std::vector<std::string> restore = {"run", "-s", dirs.at(0).string(), "-c", cls, "-p", std::to_string(parallelism)};
    for (auto& f : ckFlags()) restore.push_back(f);
    restore.insert(restore.end(), restoreFlags.begin(), restoreFlags.end());
    restore.insert(restore.end(), {kPlugin, "--input", in.string()});
    Result r2 = cli(restore);
    EXPECT_EQ(r2.exitCode, 0) << r2.err;
    EXPECT_NE(r2.err.find("using the latest complete checkpoint"), std::string::npos) << r2.err;
    return out1 + r2.out;
  }
};

}  // namespace e2e
