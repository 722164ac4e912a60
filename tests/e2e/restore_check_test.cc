// End-to-end tests of the restore preflight, `check`, `inspect` and `convert`: every
// mismatch is reported before any state is touched, with the fix, exit code 3, and the
// snapshot left byte-for-byte as it was.
#include "cli_fixture.h"

using namespace e2e;

namespace {

class RestoreCheck : public Cli {};

TEST_F(RestoreCheck, TheSeedScenarioFailsAtOnceNamingBothClassesBackendsHandlesAndTheFix) {
  fs::path chk = checkpointOf("WordCountIncremental");
  auto before = treeChecksums(chk.parent_path());
  Result r = cli({"run", "-s", chk.string(), "-c", "WordCount", kPlugin, "--input", kWords});
  EXPECT_EQ(r.exitCode, 3) << r.err;
  for (const std::string& needle :
       {chk.string(), std::string("written by class WordCountIncremental"), std::string("libwordcount_jobs.so"),
        std::string("you selected WordCount (backend hashmap)"), std::string("backend rocksdb, incremental"),
        std::string("IncrementalRemoteKeyedStateHandle"), std::string("restores only KeyGroupsStateHandle"),
        std::string("operator 'counts'"), std::string("-c WordCountIncremental"),
        std::string("state.backend.type=rocksdb -D state.backend.incremental=true"), std::string("jobhost convert")})
    EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << r.err;
  // The class is named first: it is the most likely cause.
  EXPECT_LT(r.err.find("most likely cause"), r.err.find("[backend]")) << r.err;
  EXPECT_EQ(r.out, "") << "no record may be processed";
  EXPECT_EQ(jobDirs().size(), 1u) << "no job may start";
  EXPECT_EQ(treeChecksums(chk.parent_path()), before);
}

TEST_F(RestoreCheck, FollowingEitherSuggestedFixRestores) {
  fs::path chk = checkpointOf("WordCountIncremental");
  // Restore with the input the checkpoint was taken on (its read position is in it).
  const std::string same = input(400).string();
  Result byClass = cli({"run", "-s", chk.string(), "-c", "WordCountIncremental", kPlugin, "--input", same});
  EXPECT_EQ(byClass.exitCode, 0) << byClass.err;
  Result byBackend = cli({"run", "-s", chk.string(), "-c", "WordCount", "-D", "state.backend.type=rocksdb", "-D",
                          "state.backend.incremental=true", kPlugin, "--input", same});
  EXPECT_EQ(byBackend.exitCode, 0) << byBackend.err;
  EXPECT_NE(byBackend.err.find("written by class WordCountIncremental"), std::string::npos)
      << "a different class alone is a warning: " << byBackend.err;
}

TEST_F(RestoreCheck, CheckAndDryRunOnlyReportAndExitZeroWhenCompatible) {
  fs::path chk = checkpointOf("WordCount");
  auto before = treeChecksums(chk.parent_path());
  Result ok = cli({"check", "-s", chk.string(), "-c", "WordCount", kPlugin, "--input", kWords});
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_NE(ok.out.find("is compatible"), std::string::npos) << ok.out;
  Result dry = cli({"run", "--dry-run", "-s", chk.string(), "-c", "WordCount", kPlugin, "--input", kWords});
  EXPECT_EQ(dry.exitCode, 0) << dry.err;
  EXPECT_EQ(dry.out.find("(to,"), std::string::npos) << "a dry run processes nothing";
  Result bad = cli({"check", "-s", chk.string(), "-c", "RunningAverage", kPlugin});
  EXPECT_EQ(bad.exitCode, 3) << bad.err;
  EXPECT_EQ(treeChecksums(chk.parent_path()), before);
}

TEST_F(RestoreCheck, AnOperatorUidMissingFromTheNewPlanFailsUnlessAllowed) {
  fs::path chk = checkpointOf("WordCount");
  Result r = cli({"check", "-s", chk.string(), "-c", "DistinctWords", kPlugin});
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_NE(r.err.find("operator uid 'counts'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'distinct'"), std::string::npos) << "the message lists the new plan's uids: " << r.err;
  EXPECT_NE(r.err.find("--allow-non-restored-state"), std::string::npos) << r.err;
  Result allowed = cli({"check", "-n", "-s", chk.string(), "-c", "DistinctWords", kPlugin});
  EXPECT_EQ(allowed.exitCode, 0) << allowed.err;
}

TEST_F(RestoreCheck, ChangedMaxParallelismIsRefusedWithTheValueToUse) {
  fs::path chk = checkpointOf("WordCount");
  Result r = cli({"check", "-s", chk.string(), "-c", "WordCount", "-D", "pipeline.max-parallelism=64", kPlugin});
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_NE(r.err.find("128 key groups"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-D pipeline.max-parallelism=128"), std::string::npos) << r.err;
}

TEST_F(RestoreCheck, AMissingSharedFileIsNamedWithTheCheckpointThatWroteIt) {
  fs::path chk = checkpointOf("WordCountIncremental");
  fs::path shared = chk.parent_path() / "shared";
  std::vector<fs::path> ssts;
  for (const auto& e : fs::directory_iterator(shared)) ssts.push_back(e.path());
  ASSERT_FALSE(ssts.empty());
  std::sort(ssts.begin(), ssts.end());
  fs::remove(ssts.front());
  Result r = cli({"check", "-s", chk.string(), "-c", "WordCountIncremental", kPlugin});
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_NE(r.err.find("file " + ssts.front().string() + ", which the snapshot's _metadata references, does not exist"), std::string::npos) << r.err;
}

TEST_F(RestoreCheck, AMissingSharedKeyGroupFileOfAHashmapIncrementalCheckpointIsNamedAndNothingIsTouched) {
  // Slowly, so that later checkpoints reference key-group files of earlier ones.
  auto before = jobDirs();
  std::vector<std::string> args = {"run", "-c", "WordCount", "-D", "state.backend.incremental=true"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(400).string(), "--rate", "20"});
  Process p(jobhost(args), tmp / "slow.out", tmp / "slow.err");
  ASSERT_TRUE(waitForCheckpoint(p, 4, std::chrono::seconds(60))) << readFile(tmp / "slow.err");
  p.signal(SIGTERM);
  ASSERT_EQ(p.wait(std::chrono::seconds(60)).exitCode, 130);
  fs::path chk;
  for (const auto& d : jobDirs())
    if (std::find(before.begin(), before.end(), d) == before.end()) chk = completed(d).back();
  ASSERT_FALSE(chk.empty());
  Result ins = cli({"inspect", "--json", chk.string()});
  ASSERT_EQ(ins.exitCode, 0) << ins.err;
  EXPECT_NE(ins.out.find("\"handle\":\"IncrementalKeyGroupsStateHandle\""), std::string::npos) << ins.out;
  // The oldest shared file this checkpoint still reads.
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(chk.parent_path() / "shared"))
    if (ins.out.find(e.path().filename().string()) != std::string::npos) files.push_back(e.path());
  ASSERT_FALSE(files.empty()) << ins.out;
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    auto id = [](const fs::path& f) { return std::stoull(f.stem().string().substr(f.stem().string().rfind('-') + 1)); };
    return id(a) < id(b);
  });
  const std::string writtenBy = files.front().stem().string().substr(files.front().stem().string().rfind('-') + 1);
  fs::remove(files.front());
  auto sums = treeChecksums(chk.parent_path());
  Result r = cli({"run", "-s", chk.string(), "-c", "WordCount", kPlugin, "--input", kWords});
  EXPECT_EQ(r.exitCode, 3) << r.err;
  EXPECT_NE(r.err.find("file " + files.front().string() + ", which the snapshot's _metadata references, does not exist"), std::string::npos) << r.err;
  if (chk.filename().string() != "chk-" + writtenBy) {
    EXPECT_NE(r.err.find("(first written by checkpoint " + writtenBy + ")"), std::string::npos) << r.err;
  }
  EXPECT_EQ(r.out, "") << "no record may be processed";
  EXPECT_EQ(treeChecksums(chk.parent_path()), sums) << "a refused restore touches nothing";
}

TEST_F(RestoreCheck, CorruptOrForeignSnapshotsGiveOneClearErrorEach) {
  fs::path chk = checkpointOf("WordCount");
  fs::path copy = tmp / "copy";
  fs::create_directories(copy);
  std::string meta = readFile(chk / "_metadata");
  struct Case {
    std::string name;
    std::string bytes;
    std::string expected;
  };
  std::vector<Case> cases = {
      {"truncated", meta.substr(0, meta.size() / 2), "truncated or corrupt"},
      {"empty", "", "not a jobhost checkpoint"},
      {"foreign", "PK\x03\x04 a zip file, not metadata", "not a jobhost checkpoint"},
      {"newer version", meta.substr(0, 8) + std::string("\x09\x00\x00\x00", 4) + meta.substr(12), "format version 9"},
  };
  for (const auto& c : cases) {
    fs::path d = copy / c.name;
    fs::create_directories(d);
    writeFile(d / "_metadata", c.bytes);
    Result r = cli({"check", "-s", d.string(), "-c", "WordCount", kPlugin});
    EXPECT_EQ(r.exitCode, 3) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.name << ": " << r.err;
  }
  Result notSnapshot = cli({"check", "-s", tmp.path.string(), "-c", "WordCount", kPlugin});
  EXPECT_EQ(notSnapshot.exitCode, 3);
  EXPECT_NE(notSnapshot.err.find("is not a snapshot"), std::string::npos) << notSnapshot.err;
  Result aFile = cli({"check", "-s", kWords, "-c", "WordCount", kPlugin});
  EXPECT_EQ(aFile.exitCode, 3);
  EXPECT_NE(aFile.err.find("is a file, not a snapshot"), std::string::npos) << aFile.err;
}

TEST_F(RestoreCheck, InspectShowsTheWriterHandlesAndFiles) {
  fs::path chk = checkpointOf("WordCountIncremental", 2);
  Result r = cli({"inspect", chk.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("WordCountIncremental"), std::string::npos);
  EXPECT_NE(r.out.find("IncrementalRemoteKeyedStateHandle"), std::string::npos);
  EXPECT_NE(r.out.find("0-63"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64-127"), std::string::npos) << r.out;
  Result j = cli({"inspect", "--json", chk.string()});
  ASSERT_EQ(j.exitCode, 0) << j.err;
  EXPECT_NE(j.out.find("\"jobClass\":\"WordCountIncremental\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"keyGroups\":[64,127]"), std::string::npos) << j.out;
}

TEST_F(RestoreCheck, ConvertTurnsAnIncrementalCheckpointIntoACanonicalSavepointTheHeapRestores) {
  fs::path in = input(400);
  std::vector<std::string> args = {"run", "-c", "WordCountIncremental", "-p", "2"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "2000"});
  std::string out1;
  {
    Process p(jobhost(args), tmp / "c-out.txt", tmp / "c-err.txt");
    ASSERT_TRUE(waitForCheckpoint(p, 2));
    p.signal(SIGKILL);
    out1 = p.wait().out;
  }
  fs::path jobDir = jobDirs().at(0);
  auto before = treeChecksums(jobDir);
  fs::path sp = tmp / "canonical";
  Result conv = cli({"convert", jobDir.string(), sp.string()});
  ASSERT_EQ(conv.exitCode, 0) << conv.err;
  EXPECT_EQ(treeChecksums(jobDir), before) << "convert must only read its source";
  Result check = cli({"check", "-s", sp.string(), "-c", "WordCount", "-p", "1", kPlugin});
  EXPECT_EQ(check.exitCode, 0) << check.err;
  Result r = cli({"run", "-s", sp.string(), "-c", "WordCount", "-p", "1", kPlugin, "--input", in.string()});
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(finalCounts(out1 + r.out), expectedCounts(readFile(in)));
  Result again = cli({"convert", jobDir.string(), sp.string()});
  EXPECT_EQ(again.exitCode, 2) << "convert refuses to overwrite: " << again.err;
}

}  // namespace

namespace {

const std::string kRestorePlugin = JOBHOST_RESTORE_PLUGIN;

// Regression (issue 12): `check` said compatible for a snapshot operator without state
// whose uid the class lacks (here the position-less source "ticks"), then `run` failed
// the restore with "the snapshot has state for operator uid 'ticks', which this job does
// not have" (exit 3): the two decided the mapping separately. Both now follow one.
TEST_F(RestoreCheck, CheckAndRunAgreeThatAStatelessOperatorMissingFromTheClassIsFine) {
  fs::path in = input(400);
  std::vector<std::string> args = {"run", "-c", "UnreplayableWordCount"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kRestorePlugin, "--input", in.string(), "--rate", "1500"});
  std::string out1;
  {
    Process p(jobhost(args), tmp / "ticks.out", tmp / "ticks.err");
    ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "ticks.err");
    p.signal(SIGTERM);
    Result r = p.wait(std::chrono::seconds(60));
    ASSERT_EQ(r.exitCode, 130) << r.err;
    out1 = r.out;
  }
  ASSERT_EQ(jobDirs().size(), 1u);
  fs::path chk = completed(jobDirs()[0]).back();

  Result check = cli({"check", "-s", chk.string(), "-c", "FileWordCount", kRestorePlugin, "--input", kWords});
  EXPECT_EQ(check.exitCode, 0) << check.out << check.err;
  EXPECT_NE(check.out.find("is compatible"), std::string::npos) << check.out;

  Result run = cli({"run", "-s", chk.string(), "-c", "FileWordCount", kRestorePlugin, "--input", kWords});
  EXPECT_EQ(run.exitCode, 0) << "check said compatible, so run must restore:\n" << run.err;
  EXPECT_EQ(run.err.find("'ticks'"), std::string::npos) << run.err;
  // The counts continue from the checkpoint: at least the new input's, at most that plus
  // what the first run had counted when it was stopped.
  auto restored = finalCounts(run.out), first = finalCounts(out1);
  auto added = expectedCounts(readFile(kWords));
  EXPECT_GE(restored.size(), added.size());
  for (const auto& [word, n] : added) {
    EXPECT_GE(restored[word], n) << word;
    EXPECT_LE(restored[word], n + first[word]) << word;
  }
}

}  // namespace
