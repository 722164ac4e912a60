// End-to-end tests of what a job class declares (issue 14, "While you are in the SDK"):
// the backend has one source of truth, JOBHOST_JOB; and `jobhost check` builds a class's
// plan without its job arguments' inputs.
#include "cli_fixture.h"

using namespace e2e;

namespace {

const std::string kDeclPlugin = JOBHOST_DECLARATION_PLUGIN;

class Declaration : public Cli {
 protected:
  /// The row of `jobhost info` for `cls`.
  std::string infoRow(const std::string& cls) {
    Result r = cli({"info", kDeclPlugin});
    EXPECT_EQ(r.exitCode, 0) << r.err;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(cls + " ", 0) == 0) return line;
    ADD_FAILURE() << "no row for " << cls << " in:\n" << r.out;
    return {};
  }
};

TEST_F(Declaration, ABackendDeclaredOnlyInJobhostJobIsTheOneTheClassRunsOn) {
  // Before: DECLARED rocksdb, EFFECTIVE hashmap.
  std::string row = infoRow("DeclaredRocks");
  EXPECT_NE(row.find("rocksdb (full)"), std::string::npos) << row;
  EXPECT_EQ(row.find("hashmap"), std::string::npos) << row;

  std::vector<std::string> args = {"run", "-c", "DeclaredRocks"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kDeclPlugin, "--records", "100000", "--rate", "2000"});
  Process p(jobhost(args), tmp / "run.out", tmp / "run.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "run.err");
  p.signal(SIGTERM);
  Result r = p.wait(std::chrono::seconds(60));
  EXPECT_EQ(r.exitCode, 130) << r.err;
  ASSERT_EQ(jobDirs().size(), 1u);
  auto chks = completed(jobDirs().front());
  ASSERT_FALSE(chks.empty());
  Result inspect = cli({"inspect", "--json", chks.back().string()});
  ASSERT_EQ(inspect.exitCode, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("\"rocksdb\""), std::string::npos) << inspect.out;
  EXPECT_EQ(inspect.out.find("\"hashmap\""), std::string::npos) << inspect.out;
}

TEST_F(Declaration, TheConfigurationFileDoesNotOverrideTheDeclarationButDashDDoes) {
  fs::path conf = tmp / "conf.yaml";
  writeFile(conf, "state.backend.type: hashmap\n");
  Result fromFile = cli({"info", "--config", conf.string(), kDeclPlugin});
  ASSERT_EQ(fromFile.exitCode, 0) << fromFile.err;
  EXPECT_NE(fromFile.out.find("rocksdb (full)"), std::string::npos) << fromFile.out;
  Result fromD = cli({"run", "--dry-run", "-c", "DeclaredRocks", "-D", "state.backend.type=hashmap", kDeclPlugin});
  EXPECT_EQ(fromD.exitCode, 0) << fromD.err;
}

TEST_F(Declaration, AConfigureThatContradictsTheDeclarationIsRefusedNamingBoth) {
  for (const auto& [cls, key] : std::vector<std::pair<std::string, std::string>>{
           {"Contradicts", "state.backend.type = rocksdb"},
           {"ContradictsIncremental", "state.backend.incremental = true"}}) {
    Result r = cli({"run", "-c", cls, "-D", "state.checkpoints.dir=" + ckdir().string(), kDeclPlugin});
    EXPECT_EQ(r.exitCode, 2) << cls << ": " << r.err;
    EXPECT_NE(r.err.find("class " + cls + " is declared with JOBHOST_JOB(" + cls), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(key), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "nothing may run";
    EXPECT_FALSE(fs::exists(ckdir())) << "no job directory may be created";
    // info shows the problem in the class's row instead of a wrong backend
    EXPECT_NE(infoRow(cls).find("error: class " + cls), std::string::npos) << infoRow(cls);
  }
}

TEST_F(Declaration, AnUnknownDeclaredBackendIsOneClearError) {
  Result r = cli({"run", "-c", "UnknownBackend", kDeclPlugin});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("declares the state backend 'rocks' in JOBHOST_JOB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"hashmap\" or \"rocksdb\""), std::string::npos) << r.err;
}

TEST_F(Declaration, CheckBuildsThePlanWithoutTheJobsInputs) {
  // A checkpoint of NeedsInput, then moving the input away: the check must not need it.
  fs::path in = tmp / "lines.txt";
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line" + std::to_string(i % 50) + "\n";
  writeFile(in, text);
  std::vector<std::string> args = {"run", "-c", "NeedsInput"};
  for (auto& f : ckFlags("100ms")) args.push_back(f);
  args.insert(args.end(), {kDeclPlugin, "--input", in.string(), "--rate", "2000"});
  Process p(jobhost(args), tmp / "run.out", tmp / "run.err");
  ASSERT_TRUE(waitForCheckpoint(p, 1, std::chrono::seconds(60))) << readFile(tmp / "run.err");
  p.signal(SIGTERM);
  p.wait(std::chrono::seconds(60));
  fs::path chk = completed(jobDirs().front()).back();
  auto before = treeChecksums(chk.parent_path());

  Result check = cli({"check", "-s", chk.string(), "-c", "NeedsInput", kDeclPlugin});
  EXPECT_EQ(check.exitCode, 0) << check.err;  // before: "cannot read input file ''"
  EXPECT_EQ(check.err.find("cannot read input file"), std::string::npos) << check.err;
  Result dry = cli({"run", "--dry-run", "-s", chk.string(), "-c", "NeedsInput", kDeclPlugin});
  EXPECT_EQ(dry.exitCode, 0) << dry.err;

  // A class whose build() itself rejects missing arguments: the message says where they go.
  Result needs = cli({"check", "-s", chk.string(), "-c", "RequiresInputArgument", kDeclPlugin});
  EXPECT_EQ(needs.exitCode, 2) << needs.err;
  EXPECT_NE(needs.err.find("--input FILE is required"), std::string::npos) << needs.err;
  EXPECT_NE(needs.err.find("job arguments given after the plugin path"), std::string::npos) << needs.err;
  EXPECT_NE(needs.err.find("-c RequiresInputArgument " + kDeclPlugin + " <job arguments>"), std::string::npos)
      << needs.err;
  EXPECT_EQ(treeChecksums(chk.parent_path()), before) << "a check never changes the snapshot";

  // A real run still refuses a missing input, at once and clearly.
  Result run = cli({"run", "-c", "NeedsInput", kDeclPlugin, "--input", (tmp / "missing.txt").string()});
  EXPECT_EQ(run.exitCode, 2) << run.err;
  EXPECT_NE(run.err.find("cannot read input file"), std::string::npos) << run.err;
}

}  // namespace
