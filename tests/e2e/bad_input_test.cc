// End-to-end tests of bad input (issue 6, item 3): damaged or foreign snapshots, files
// that are not plugins, plugins that cannot load, job arguments the job rejects. Each
// gives one clear error naming what is wrong and a documented exit code (README "Exit
// codes": 2 for plugins and arguments, 3 for snapshots) — never a crash, a hang (every
// run has a timeout), a stack trace, or a retry by the restart strategy.
//
// The snapshots damaged here are copies of the committed compatibility snapshots
// (tests/compat/v1/, see tests/compat/README.md): real files with a fixed layout.
#include <algorithm>
#include <fstream>

#include "cli_fixture.h"

using namespace e2e;

namespace {

const fs::path kCompat = JOBHOST_COMPAT_DIR;  // tests/compat/v1
const std::string kMissingDepPlugin = JOBHOST_MISSING_DEP_PLUGIN;
constexpr auto kTimeout = std::chrono::seconds(60);

/// Restarts that would retry a failure several times: a restore failure must not use them.
const std::vector<std::string> kRetrying = {"-D", "restart-strategy.type=fixed-delay",
                                            "-D", "restart-strategy.fixed-delay.attempts=3",
                                            "-D", "restart-strategy.fixed-delay.delay=100ms"};

class BadInput : public Cli {
 protected:
  /// A fresh copy of a committed snapshot (the committed files are never touched).
  fs::path copyOf(const std::string& name) {
    fs::path dst = tmp / ("copy-" + std::to_string(++copies_) + "-" + name);
    fs::copy(kCompat / name, dst, fs::copy_options::recursive);
    return dst;
  }
  /// The chk-<n> directory inside a copied job directory.
  static fs::path chkIn(const fs::path& jobDirParent) {
    for (const auto& job : fs::directory_iterator(jobDirParent)) {
      auto c = completed(job.path());
      if (!c.empty()) return c.back();
    }
    ADD_FAILURE() << "no completed checkpoint under " << jobDirParent;
    return {};
  }
  /// Runs jobhost with a timeout; the result must be a clean failure with `code`.
  Result failing(const std::string& what, std::vector<std::string> args, int code) {
    Result r = cli(std::move(args), kTimeout);
    expectCleanFailure(what, r, code);
    return r;
  }
  static void expectCleanFailure(const std::string& what, const Result& r, int code) {
    EXPECT_NE(r.exitCode, -2) << what << ": timed out (hang)";
    EXPECT_EQ(r.exitCode, code) << what << ":\n" << r.err;
    EXPECT_FALSE(r.err.empty()) << what << ": no message at all";
    for (const char* trace : {"terminate called", "what():", "Segmentation", "core dumped", "Aborted", "AddressSanitizer",
                              "runtime error:", "Stack trace", "stack trace", "#0 0x", "kj/", "capnp/", "std::"})
      EXPECT_EQ(r.err.find(trace), std::string::npos) << what << ": looks like a crash or stack trace ('" << trace
                                                      << "'):\n" << r.err;
    EXPECT_EQ(r.out, "") << what << ": no record may be processed";
    // One clear error: a short report, not pages of log.
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 20) << what << ":\n" << r.err;
  }
  static void expectHas(const std::string& what, const Result& r, const std::string& needle) {
    EXPECT_NE(r.err.find(needle), std::string::npos) << what << ": missing '" << needle << "' in:\n" << r.err;
  }
  /// `run -s snapshot -c cls` with a retrying restart strategy: must fail with exit 3,
  /// without restarting.
  Result restoreFails(const std::string& what, const fs::path& snapshot, const std::string& cls,
                      std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run", "-s", snapshot.string(), "-c", cls};
    args.insert(args.end(), kRetrying.begin(), kRetrying.end());
    for (auto& f : ckFlags("100ms")) args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {kPlugin, "--input", kWords});
    Result r = failing(what, args, 3);
    EXPECT_EQ(r.err.find("restarting"), std::string::npos) << what << ": a restore failure must not be retried:\n"
                                                           << r.err;
    EXPECT_EQ(r.err.find("attempt 1 failed"), std::string::npos) << what << ":\n" << r.err;
    return r;
  }

 private:
  int copies_ = 0;
};

TEST_F(BadInput, EveryTruncationOfARealMetadataFileIsRefusedNamingTheFile) {
  for (const std::string snapshot : {"hashmap-keygroups", "rocksdb-incremental"}) {
    fs::path chk = snapshot == "hashmap-keygroups" ? copyOf(snapshot) : chkIn(copyOf(snapshot));
    const std::string meta = readFile(chk / "_metadata");
    ASSERT_GT(meta.size(), 256u);
    for (size_t len = 0; len < meta.size(); len += 64) {
      writeFile(chk / "_metadata", meta.substr(0, len));
      const std::string what = snapshot + " _metadata truncated to " + std::to_string(len) + " of " +
                               std::to_string(meta.size()) + " bytes";
      Result r = failing(what, {"check", "-s", chk.string(), "-c", "WordCount", kPlugin}, 3);
      expectHas(what, r, (chk / "_metadata").string());
      EXPECT_TRUE(r.err.find("truncated or corrupt") != std::string::npos ||
                  r.err.find("not a jobhost checkpoint") != std::string::npos)
          << what << ":\n" << r.err;
    }
    // And the restore itself (not only `check`) refuses it, once, without retrying.
    writeFile(chk / "_metadata", meta.substr(0, meta.size() / 2));
    Result r = restoreFails(snapshot + " half _metadata, run", chk,
                            snapshot == "hashmap-keygroups" ? "WordCount" : "WordCountIncremental");
    expectHas("half _metadata, run", r, "truncated or corrupt");
  }
}

TEST_F(BadInput, CorruptBytesInTheMiddleOfMetadataAreRefusedAtRestore) {
  fs::path chk = copyOf("hashmap-keygroups");
  std::string meta = readFile(chk / "_metadata");
  // The middle of this file is the handle's key-group offsets: the metadata still parses,
  // and the key-group reader must notice that the offsets do not fit the file.
  std::string bad = meta;
  for (size_t i = bad.size() / 2 - 32; i < bad.size() / 2 + 32; ++i) bad[i] = '\xff';
  writeFile(chk / "_metadata", bad);
  Result r = restoreFails("_metadata with 64 bytes of 0xff in the middle", chk, "WordCount");
  expectHas("corrupt middle", r, "corrupt");
  expectHas("corrupt middle", r, (chk / "counts-0.kg").string());

  // Structural damage near the start (the message's segment table and root pointer).
  bad = meta;
  for (size_t i = 12; i < 28; ++i) bad[i] = '\xff';
  writeFile(chk / "_metadata", bad);
  r = restoreFails("_metadata with a corrupt segment table", chk, "WordCount");
  expectHas("corrupt segment table", r, (chk / "_metadata").string());
  expectHas("corrupt segment table", r, "truncated or corrupt");

  // Anywhere else: whatever the damage, a clean outcome (0 if it hit only data the check
  // does not judge, such as a timestamp), never a crash or a hang.
  for (size_t off = 12; off + 8 <= meta.size(); off += 40) {
    bad = meta;
    for (size_t i = off; i < off + 8; ++i) bad[i] = '\xff';
    writeFile(chk / "_metadata", bad);
    Result c = cli({"check", "-s", chk.string(), "-c", "WordCount", kPlugin}, kTimeout);
    EXPECT_TRUE(c.exitCode == 0 || c.exitCode == 3) << "0xff at " << off << ": exit " << c.exitCode << "\n" << c.err;
    EXPECT_EQ(c.err.find("terminate called"), std::string::npos) << c.err;
  }
}

/// The real hashmap `_metadata` with its operator list replaced by a list of `count`
/// empty structs: 8 more bytes on disk, `count` operators for a reader that trusts it.
/// (Found by tests/fuzz/metadata_fuzz.cc.) Cap'n Proto layout: 12-byte jobhost header,
/// segment table (u32 count-1 = 0, u32 size in words), then the segment: root struct
/// pointer, root struct data, its pointers (jobId, writer, backend, operators, stats).
std::string metadataClaimingOperators(const std::string& real, uint32_t count) {
  auto u32 = [](const std::string& s, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<uint8_t>(s[at + i])) << (8 * i);
    return v;
  };
  auto put32 = [](std::string& s, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string m = real;
  const size_t seg = 20;  // first word of the segment
  EXPECT_EQ(u32(m, 12), 0u) << "one segment expected";
  const uint32_t words = u32(m, 16);
  EXPECT_EQ(m.size(), seg + size_t(words) * 8);
  const uint32_t dataWords = u32(m, seg + 4) & 0xffff;          // root struct data size
  const size_t operatorsPtr = 1 + dataWords + 3;                 // word index of the pointer
  const uint32_t offset = words - static_cast<uint32_t>(operatorsPtr + 1);  // to the new tag word
  put32(m, seg + operatorsPtr * 8, offset << 2 | 1);             // list pointer...
  put32(m, seg + operatorsPtr * 8 + 4, 0u << 3 | 7);             // ...inline composite, 0 words
  std::string tag(8, '\0');
  put32(tag, 0, count << 2);                                     // count elements of 0 data, 0 pointers
  m += tag;
  put32(m, 16, words + 1);
  return m;
}

// A file of 1.7 KB must not make jobhost allocate gigabytes: refused at once, exit 3.
// (Regression: parseMetadata() used to allow a traversal of 64 Mi words whatever the
// file's size, so this file parsed into 60 million OperatorSnapshot objects, ~7 GB, and
// ended in std::bad_alloc — "terminate called", SIGABRT — or the OOM killer.) The run is
// confined to 4 GiB of address space so that a regression cannot take the machine down.
TEST_F(BadInput, AMetadataFileThatClaimsMillionsOfOperatorsIsRefusedQuickly) {
  fs::path chk = copyOf("hashmap-keygroups");
  writeFile(chk / "_metadata", metadataClaimingOperators(readFile(chk / "_metadata"), 60'000'000));
  const auto t0 = std::chrono::steady_clock::now();
  Result r = run({"/bin/sh", "-c", "ulimit -v 4194304 && exec \"$0\" \"$@\"", kJobhost, "check", "-s", chk.string(), "-c",
                  "WordCount", kPlugin},
                 tmp.path, std::chrono::seconds(60));
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expectCleanFailure("a 1.7 KB _metadata claiming 60 million operators", r, 3);
  expectHas("60 million operators", r, (chk / "_metadata").string());
  EXPECT_LT(seconds, 5.0) << "took " << seconds << " s:\n" << r.err;

  // A million operators fit in memory: still not a plausible snapshot, and must not be
  // reported as compatible (it used to be: exit 0, "is compatible", after ~1.5 s).
  writeFile(chk / "_metadata", metadataClaimingOperators(readFile(kCompat / "hashmap-keygroups" / "_metadata"), 1'000'000));
  r = failing("a _metadata claiming a million empty operators", {"check", "-s", chk.string(), "-c", "WordCount", kPlugin}, 3);
  expectHas("a million operators", r, (chk / "_metadata").string());
}

TEST_F(BadInput, ANewerMetadataFormatVersionNamesBothVersions) {
  fs::path chk = copyOf("hashmap-keygroups");
  std::string meta = readFile(chk / "_metadata");
  ASSERT_EQ(meta.substr(0, 8), std::string("JHMETA\r\n", 8));
  const uint32_t current = static_cast<uint8_t>(meta[8]) | static_cast<uint8_t>(meta[9]) << 8;
  ASSERT_GE(current, 1u);
  // Far newer than any this jobhost reads (a v1 snapshot + 1 is version 2, which it reads).
  const uint32_t newer = current + 98;
  meta[8] = static_cast<char>(newer & 0xff);
  meta[9] = static_cast<char>((newer >> 8) & 0xff);
  writeFile(chk / "_metadata", meta);
  Result r = restoreFails("newer format version", chk, "WordCount");
  expectHas("newer format version", r, "format version " + std::to_string(newer));
  expectHas("newer format version", r, "reads versions 1 to");
  expectHas("newer format version", r, (chk / "_metadata").string());
  Result i = failing("inspect, newer format version", {"inspect", chk.string()}, 3);
  expectHas("inspect, newer format version", i, "format version " + std::to_string(newer));
}

TEST_F(BadInput, AMissingSharedFileFailsTheRestoreAtOnceNamingTheFile) {
  fs::path chk = chkIn(copyOf("rocksdb-incremental"));
  std::vector<fs::path> ssts;
  for (const auto& e : fs::directory_iterator(chk.parent_path() / "shared")) ssts.push_back(e.path());
  ASSERT_FALSE(ssts.empty());
  std::sort(ssts.begin(), ssts.end());
  fs::remove(ssts.front());
  Result r = restoreFails("missing shared file", chk, "WordCountIncremental");
  expectHas("missing shared file", r, ssts.front().string());
}

TEST_F(BadInput, ATruncatedSharedFileFailsTheRestoreAtOnceNamingTheFile) {
  fs::path chk = chkIn(copyOf("rocksdb-incremental"));
  std::vector<fs::path> ssts;
  for (const auto& e : fs::directory_iterator(chk.parent_path() / "shared")) ssts.push_back(e.path());
  ASSERT_FALSE(ssts.empty());
  std::sort(ssts.begin(), ssts.end());
  fs::path sst = ssts.back();
  fs::resize_file(sst, fs::file_size(sst) / 2);
  Result r = restoreFails("truncated shared file", chk, "WordCountIncremental");
  expectHas("truncated shared file", r, sst.string());
}

// Same size, garbage inside: the size check passes and RocksDB finds the damage when it
// opens the restored instance. The message must name the snapshot's file (the one the
// user can look at or replace), not only the temporary working copy RocksDB opened
// (regression: it used to say only "... Corruption: block checksum mismatch ... in
// /tmp/jobhost-<id>-1/counts-0/db/000011.sst").
TEST_F(BadInput, AGarbledSharedFileFailsTheRestoreAtOnceNamingTheSnapshotsFile) {
  fs::path chk = chkIn(copyOf("rocksdb-incremental"));
  std::vector<fs::path> ssts;
  for (const auto& e : fs::directory_iterator(chk.parent_path() / "shared")) ssts.push_back(e.path());
  ASSERT_FALSE(ssts.empty());
  std::sort(ssts.begin(), ssts.end());
  fs::path sst = ssts.back();
  std::string bytes = readFile(sst);
  ASSERT_GT(bytes.size(), 400u);
  for (size_t i = 200; i < bytes.size() - 100; ++i) bytes[i] = '\xff';
  writeFile(sst, bytes);
  Result r = restoreFails("garbled shared file", chk, "WordCountIncremental");
  expectHas("garbled shared file", r, "orrupt");
  expectHas("garbled shared file", r, sst.string());
}

// A few bytes changed inside an SST's data block leave its footer and index intact:
// RocksDB opened it, the restore succeeded, and the damage surfaced only when the job read
// that block (a task failure, restarted from the same checkpoint for ever) or was copied
// into the new job's own checkpoints. Each block's checksum is now verified at restore.
TEST_F(BadInput, AFewChangedBytesInsideAnSstFailTheRestoreAtOnceNamingTheSnapshotsFile) {
  fs::path chk = chkIn(copyOf("rocksdb-incremental"));
  std::vector<fs::path> ssts;
  for (const auto& e : fs::directory_iterator(chk.parent_path() / "shared")) ssts.push_back(e.path());
  ASSERT_FALSE(ssts.empty());
  for (const auto& sst : ssts) {  // the first data block starts at offset 0
    std::string bytes = readFile(sst);
    ASSERT_GT(bytes.size(), 64u);
    for (size_t i = 20; i < 28; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x20);
    writeFile(sst, bytes);
  }
  Result r = restoreFails("changed bytes in an sst", chk, "WordCountIncremental");
  expectHas("changed bytes in an sst", r, "orrupt");
  expectHas("changed bytes in an sst", r, (chk.parent_path() / "shared").string());
}

TEST_F(BadInput, ATruncatedOrGarbledKeyGroupFileFailsTheRestoreAtOnceNamingTheFile) {
  fs::path chk = copyOf("hashmap-keygroups");
  fs::path kg = chk / "counts-0.kg";
  std::string bytes = readFile(kg);
  fs::resize_file(kg, bytes.size() / 2);
  Result r = restoreFails("truncated key-group file", chk, "WordCount");
  expectHas("truncated key-group file", r, kg.string());
  // Same size, garbage inside: the reader, not the size check, must catch it.
  std::string garbled = bytes;
  for (size_t i = garbled.size() / 2; i < garbled.size(); ++i) garbled[i] = '\xff';
  writeFile(kg, garbled);
  r = restoreFails("garbled key-group file", chk, "WordCount");
  expectHas("garbled key-group file", r, kg.string());
  expectHas("garbled key-group file", r, "corrupt");
}

// One flipped bit in a count: a key-group file of format version 1 parsed it as another
// count and the job went on with it (exit 0, wrong output). Version 2 (the key-group files
// every jobhost writes since 2026-12-07) sums each key group: the restore fails at once.
TEST_F(BadInput, AFlippedBitInAKeyGroupFileFailsTheRestoreNamingTheFileAndTheKeyGroup) {
  fs::path job = tmp / "kg2";
  fs::copy(kCompat.parent_path() / "v1-kg2" / "hashmap-keygroups", job, fs::copy_options::recursive);
  fs::path kg = job / "counts-0.kg";
  std::string bytes = readFile(kg);
  // The last entry's value, just before the last group's end (varint 0 and 8-byte sum).
  const size_t at = bytes.size() - 1 - 8 - 1;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x04);
  writeFile(kg, bytes);
  Result r = restoreFails("flipped bit", job, "WordCount");
  expectHas("flipped bit", r, kg.string());
  expectHas("flipped bit", r, "does not match its bytes");
}

// The file source's position in the snapshot (operator 'lines', 8 bytes: the byte offset
// after the last checkpointed line) replaced by garbage: a restore failure like any other
// damaged state — exit 3 at once, not an "operator failed to open" task failure that the
// restart strategy retries (each attempt restores the same position and fails the same
// way), ending in exit 1 "Recovery is suppressed".
TEST_F(BadInput, AGarbledSourcePositionFailsTheRestoreAtOnce) {
  fs::path chk = copyOf("hashmap-keygroups");
  std::string meta = readFile(chk / "_metadata");
  // v1/hashmap-keygroups was checkpointed at byte 484 of words.txt (tests/compat/README.md).
  const std::string position("\xe4\x01\0\0\0\0\0\0", 8);
  const size_t at = meta.find(position);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(meta.find(position, at + 1), std::string::npos) << "the position must be unambiguous";
  meta.replace(at, 8, std::string(8, '\xff'));
  writeFile(chk / "_metadata", meta);
  Result r = restoreFails("garbled source position", chk, "WordCount");
  EXPECT_TRUE(r.err.find("'lines'") != std::string::npos || r.err.find("Text File Source") != std::string::npos)
      << "the message must name the source: " << r.err;
}

TEST_F(BadInput, ADirectoryThatIsNotASnapshotIsNamedAsSuch) {
  fs::path empty = tmp / "empty-dir";
  fs::create_directories(empty);
  Result r = restoreFails("empty directory", empty, "WordCount");
  expectHas("empty directory", r, "is not a snapshot");
  expectHas("empty directory", r, empty.string());

  fs::path other = tmp / "some-project";
  fs::create_directories(other / "src");
  writeFile(other / "README.md", "# not a checkpoint\n");
  writeFile(other / "src" / "main.cc", "int main() {}\n");
  r = restoreFails("directory of other files", other, "WordCount");
  expectHas("directory of other files", r, "is not a snapshot");

  // A job directory whose only checkpoint never completed (no _metadata).
  fs::path job = tmp / "incomplete-job";
  fs::create_directories(job / "chk-1");
  writeFile(job / "chk-1" / "counts-0.kg", "partial");
  r = restoreFails("job directory without a completed checkpoint", job, "WordCount");
  expectHas("job directory without a completed checkpoint", r, "no completed chk-<n>");

  // A slip of the finger: the root directory. It used to be read as a job's checkpoint
  // directory, every file below it listed, until "cannot list //proc/1/task/1/fdinfo".
  r = restoreFails("the root directory", "/", "WordCount");
  expectHas("the root directory", r, "'/' is not a snapshot");
}

TEST_F(BadInput, DashSPointingAtAFileOfAnotherKindIsRefused) {
  fs::path inc = copyOf("rocksdb-incremental");
  fs::path chk = chkIn(inc);
  fs::path sst;
  for (const auto& e : fs::directory_iterator(chk.parent_path() / "shared")) sst = e.path();
  Result r = restoreFails("-s an .sst file", sst, "WordCountIncremental");
  expectHas("-s an .sst file", r, "is a file, not a snapshot");
  expectHas("-s an .sst file", r, sst.string());

  fs::path kg = copyOf("hashmap-keygroups") / "counts-0.kg";
  r = restoreFails("-s a key-group file", kg, "WordCount");
  expectHas("-s a key-group file", r, "is a file, not a snapshot");

  // A file of another kind under the name _metadata.
  fs::path fake = tmp / "fake-chk";
  fs::create_directories(fake);
  fs::copy_file(sst, fake / "_metadata");
  r = restoreFails("an .sst named _metadata", fake, "WordCount");
  expectHas("an .sst named _metadata", r, "not a jobhost checkpoint or savepoint metadata file");
  r = restoreFails("an .sst named _metadata, given as the file", fake / "_metadata", "WordCount");
  expectHas("an .sst named _metadata, given as the file", r, "not a jobhost checkpoint or savepoint metadata file");
}

TEST_F(BadInput, FilesThatAreNotUsablePluginsGiveOneLineAndExitCodeTwo) {
  writeFile(tmp / "notes.so", "this is a text file, not a library\n");
  // The real plugin patched to say it is for aarch64 (e_machine, offset 18, = 183).
  fs::path arm = tmp / "libwordcount_jobs_aarch64.so";
  fs::copy_file(kPlugin, arm);
  {
    std::fstream f(arm, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(18);
    const char em[2] = {static_cast<char>(183), 0};
    f.write(em, 2);
  }
  // A real shared library that is not a jobhost plugin.
  std::string systemLib;
  for (const char* p : {"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                        "/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6"})
    if (fs::exists(p)) {
      systemLib = p;
      break;
    }
  ASSERT_FALSE(systemLib.empty()) << "no system library to use";

  struct Case {
    std::string name;
    std::string plugin;
    std::vector<std::string> expected;
  };
  std::vector<Case> cases = {
      {"a shared library that is not a jobhost plugin", systemLib, {systemLib, "not a jobhost plugin", "JOBHOST_JOB"}},
      {"not a shared library", (tmp / "notes.so").string(), {"notes.so", "not a shared library"}},
      {"for another architecture", arm.string(), {arm.string(), "aarch64", "x86_64"}},
      {"depends on a missing library", kMissingDepPlugin,
       {kMissingDepPlugin, "libjhtest_throwaway.so", "LD_LIBRARY_PATH"}},
  };
  for (const auto& c : cases) {
    for (const std::string cmd : {"run", "info", "check"}) {
      std::vector<std::string> args = {cmd};
      if (cmd == "check") args.insert(args.end(), {"-s", (kCompat / "hashmap-keygroups").string()});
      if (cmd != "info") args.insert(args.end(), {"-c", "WordCount"});
      args.push_back(c.plugin);
      if (cmd == "run") args.insert(args.end(), {"--input", kWords});
      const std::string what = cmd + ": " + c.name;
      // `info` reads the file without loading it: a missing dependency is not its concern.
      if (cmd == "info" && c.name == "depends on a missing library") continue;
      Result r = failing(what, args, 2);
      for (const auto& e : c.expected) expectHas(what, r, e);
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": one line:\n" << r.err;
    }
  }
}

TEST_F(BadInput, ABadRocksDbOptionIsExitCodeTwoWithOneLineNamingTheKey) {
  for (const std::string cmd : {"run", "info"}) {
    std::vector<std::string> args = {cmd};
    if (cmd == "run") args.insert(args.end(), {"-c", "WordCountIncremental"});
    args.insert(args.end(), {"-D", "state.backend.rocksdb.writebuffer.size=huge", kPlugin});
    if (cmd == "run") {
      args.insert(args.end(), {"--input", kWords});
      Result r = failing(cmd, args, 2);
      expectHas(cmd, r, "state.backend.rocksdb.writebuffer.size");
      expectHas(cmd, r, "'huge'");
      expectHas(cmd, r, "64mb");
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line:\n" << r.err;
    } else {
      // info shows the error in the class's row instead of its settings.
      Result r = cli(args, kTimeout);
      EXPECT_EQ(r.exitCode, 0) << r.err;
      EXPECT_NE(r.out.find("error: state.backend.rocksdb.writebuffer.size = 'huge'"), std::string::npos) << r.out;
    }
  }
}

TEST_F(BadInput, AJobArgumentTheJobRejectsIsExitCodeTwoNamingTheArgument) {
  // WordCount without --input reads a socket; --port must be a number.
  Result r = failing("--port notanumber", {"run", "-c", "WordCount", kPlugin, "--port", "notanumber"}, 2);
  expectHas("--port notanumber", r, "--port");
  expectHas("--port notanumber", r, "notanumber");
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;
  r = failing("--rate 10x", {"run", "-c", "WordCount", kPlugin, "--input", kWords, "--rate", "10x"}, 2);
  expectHas("--rate 10x", r, "--rate");
  // Also when restoring: the argument is judged before the snapshot is touched.
  fs::path chk = copyOf("hashmap-keygroups");
  auto before = treeChecksums(chk);
  r = failing("--port notanumber with -s", {"run", "-s", chk.string(), "-c", "WordCount", kPlugin, "--port", "x"}, 2);
  expectHas("--port notanumber with -s", r, "--port");
  EXPECT_EQ(treeChecksums(chk), before);
}

TEST_F(BadInput, AJobArgumentTheJobDoesNotReadIsNamedWithWhatItMeant) {
  // A typo next to --input: the job runs on its input, and says once what it ignored.
  Result r = cli({"run", "-c", "WordCount", kPlugin, "--input", kWords, "--outptu", "x"}, kTimeout);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  const std::string warning = "job argument --outptu x is not read by WordCount: it has no effect (did you mean --output?)";
  expectHas("--outptu", r, warning);
  EXPECT_EQ(r.err.find(warning), r.err.rfind(warning)) << "said more than once:\n" << r.err;
  // A positional input (the --input forgotten) and jobhost's -p after the plugin path:
  // named before WordCount would read its socket (`check` builds the plan only, so
  // nothing waits for a socket here).
  const std::string chk = copyOf("hashmap-keygroups").string();
  r = cli({"check", "-s", chk, "-c", "WordCount", kPlugin, kWords, "-p", "2"}, kTimeout);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  expectHas("positional", r, "job argument '" + kWords + "' is not read by WordCount: it takes no positional arguments");
  expectHas("-p", r, "job argument -p 2 is not read by WordCount: it has no effect");
  expectHas("-p", r, "-p is also a jobhost option, but jobhost's options go before the plugin path");
  // Arguments the job reads: no warning.
  r = cli({"check", "-s", chk, "-c", "WordCount", kPlugin, "--input", kWords}, kTimeout);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.err.find("job argument"), std::string::npos) << r.err;
  // check's -s after the plugin path: check says where it goes.
  r = failing("check -s late", {"check", "-c", "WordCount", kPlugin, "-s", chk}, 2);
  expectHas("check -s late", r, "check needs -s <snapshot> before the plugin path");
}

// Two options that were accepted and then silently did nothing the user asked for: a
// claim without a snapshot to claim, and an empty checkpoint directory (which meant the
// default one, somewhere else). Each is one error, exit 2, before the job starts.
TEST_F(BadInput, AClaimWithoutASnapshotAndAnEmptyCheckpointDirectoryAreRefused) {
  Result r = failing("claim without -s", {"run", "--restore-mode", "claim", "-c", "WordCount", kPlugin, "--input", kWords}, 2);
  expectHas("claim without -s", r, "--restore-mode claim applies to a restore from -s");
  EXPECT_TRUE(r.out.empty()) << "the job ran:\n" << r.out;
  r = failing("empty checkpoint dir", {"run", "-c", "WordCount", "-D", "state.checkpoints.dir=", kPlugin, "--input", kWords}, 2);
  expectHas("empty checkpoint dir", r, "state.checkpoints.dir (from -D) is empty: name a directory");
  EXPECT_TRUE(r.out.empty()) << "the job ran:\n" << r.out;
  // Each still works as meant.
  r = cli({"run", "--restore-mode", "no-claim", "-c", "WordCount", kPlugin, "--input", kWords}, kTimeout);
  EXPECT_EQ(r.exitCode, 0) << r.err;
}

TEST_F(BadInput, AStateDumpLimitOfZeroIsOneShortLine) {
  // CLI11's PositiveNumber printed the range up to DBL_MAX: 310 digits.
  Result r = failing("--limit 0", {"state", "dump", "--limit", "0", "/nonexistent", "uid", "state"}, 2);
  expectHas("--limit 0", r, "--limit: Value 0 not in range 1 to");
  EXPECT_LT(r.err.size(), 200u) << r.err;
}

}  // namespace
