// End-to-end on a real Ceph RGW (tests/s3/rgw_environment.h): `jobhost run` with
// checkpoints on s3://, kill -9, restore from the job's checkpoint directory on s3://,
// exact counts; the object-store job-directory lease; clear errors from commands that do
// not read s3:// yet.
#include <signal.h>

#include <chrono>
#include <ctime>
#include <sstream>
#include <fstream>
#include <thread>

#include "checkpoint/job_directory_lock.h"
#include "e2e/cli_fixture.h"
#include "jobhost/state/checkpoint_layout.h"
#include "jobhost/state/s3_storage.h"
#include "s3/fault_proxy.h"
#include "s3/rgw_environment.h"

namespace js = jobhost::state;
using e2e::kPlugin;
using s3test::FaultProxy;
namespace fs = std::filesystem;

namespace {

class S3Job : public e2e::Cli {
 protected:
  void SetUp() override {
    const auto& r = s3test::rgw();
    if (!r.started) {
      if (s3test::requireS3()) FAIL() << "JOBHOST_REQUIRE_S3=1 but no S3 store: " << r.skipReason;
      GTEST_SKIP() << "no S3 store, skipping (set JOBHOST_REQUIRE_S3=1 to fail instead): " << r.skipReason;
    }
    // The jobs get the credentials from the standard variables, the rest from -D.
    ::setenv("AWS_ACCESS_KEY_ID", r.accessKey.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", r.secretKey.c_str(), 1);
    prefix_ = std::string("e2e/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
              std::to_string(::getpid());
    root_ = "s3://" + r.bucket + "/" + prefix_;
    js::S3Options o;
    o.endpoint = r.endpoint;
    o.pathStyleAccess = true;
    o.accessKey = r.accessKey;
    o.secretKey = r.secretKey;
    js::setDefaultS3Options(o);  // for JobDirectoryLock in this process
    storage_ = js::openS3Storage(root_, o).value();
  }

  std::vector<std::string> s3Flags() const {
    return {"-D", "state.checkpoints.dir=" + root_, "-D", "execution.checkpointing.interval=150ms", "-D",
            "s3.endpoint=" + s3test::rgw().endpoint, "-D", "s3.path.style.access=true"};
  }

  // Job ids under the root with a complete checkpoint.
  std::vector<std::string> jobsWithCheckpoint() {
    std::vector<js::FileEntry> files;
    std::vector<std::string> jobs;
    if (!storage_->list("", &files).ok()) return jobs;
    for (const auto& f : files) {
      auto slash = f.path.find('/');
      if (f.path.ends_with("/_metadata") && f.path.find("/chk-") != std::string::npos) {
        std::string job = f.path.substr(0, slash);
        if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) jobs.push_back(job);
      }
    }
    return jobs;
  }

  std::string prefix_, root_;
  std::unique_ptr<js::CheckpointStorage> storage_;
};

// WordCount (heap) and WordCountIncremental (rocksdb incremental) at p=2 checkpointing to
// S3: kill -9 after a checkpoint, restore from the job directory on S3, exact counts; for
// rocksdb also a savepoint to S3, moved to another prefix with awscli, restored at p=1.
TEST_F(S3Job, WordCountAndIncrementalRocksDbAtParallelism2KilledAndRestoredFromS3KeepExactCounts) {
  fs::path in = input(900);  // 4 s at 3000 lines/s: the job outlives the savepoint on a loaded machine
  const auto expected = e2e::expectedCounts(e2e::readFile(in));
  std::vector<std::string> jobsBefore;
  for (std::string cls : {"WordCount", "WordCountIncremental"}) {
    SCOPED_TRACE(cls);
    std::vector<std::string> args = {"run", "-c", cls, "-p", "2"};
    for (auto& f : s3Flags()) args.push_back(f);
    args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "3000"});
    e2e::Process p(jobhost(args), tmp / (cls + "-1.out"), tmp / (cls + "-1.err"));
    std::string job;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until && p.running() && job.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      for (const auto& j : jobsWithCheckpoint())
        if (std::find(jobsBefore.begin(), jobsBefore.end(), j) == jobsBefore.end()) job = j;
    }
    ASSERT_FALSE(job.empty()) << e2e::readFile(tmp / (cls + "-1.err"));
    jobsBefore.push_back(job);
    // A savepoint into S3 through the job's control socket (rocksdb: native format).
    std::string savepoint;
    if (cls == "WordCountIncremental") {
      e2e::Result sp = cli({"savepoint", job, root_ + "/savepoints"});
      ASSERT_EQ(sp.exitCode, 0) << sp.out << sp.err;
      size_t at = sp.out.find("Path: ");
      ASSERT_NE(at, std::string::npos) << sp.out;
      savepoint = sp.out.substr(at + 6, sp.out.find('\n', at) - at - 6);
      EXPECT_EQ(savepoint.rfind(root_ + "/savepoints/savepoint-", 0), 0u) << savepoint;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a few more checkpoints
    }
    p.signal(SIGKILL);
    e2e::Result r1 = p.wait();
    ASSERT_EQ(r1.exitCode, 128 + SIGKILL) << "the first run ended before it was killed: " << r1.err;
    // Killed: its lease object is left behind (until it expires or is taken over).
    EXPECT_TRUE(storage_->exists(job + "/" + js::kLockFileName));

    // Restore from the job's checkpoint directory: its newest complete checkpoint.
    std::vector<std::string> args2 = {"run", "-c", cls, "-p", "2", "-s", root_ + "/" + job};
    for (auto& f : s3Flags()) args2.push_back(f);
    args2.insert(args2.end(), {kPlugin, "--input", in.string()});
    e2e::Result r2 = cli(args2);
    ASSERT_EQ(r2.exitCode, 0) << r2.err;
    EXPECT_NE(r2.err.find("using the latest complete checkpoint in " + root_ + "/" + job), std::string::npos) << r2.err;
    EXPECT_NE(r2.err.find("restoring from snapshot " + root_ + "/" + job + "/chk-"), std::string::npos) << r2.err;
    EXPECT_EQ(e2e::finalCounts(r1.out + r2.out), expected);

    // inspect reads the checkpoint the restore used, on S3 (endpoint from the environment).
    size_t at = r2.err.find("restoring from snapshot ");
    ASSERT_NE(at, std::string::npos);
    std::string snapshot = r2.err.substr(at + 24, r2.err.find('\n', at) - at - 24);
    ::setenv("AWS_ENDPOINT_URL", s3test::rgw().endpoint.c_str(), 1);
    e2e::Result inspected = cli({"inspect", snapshot});
    EXPECT_EQ(inspected.exitCode, 0) << inspected.err;
    EXPECT_NE(inspected.out.find(cls), std::string::npos) << inspected.out;
    // state ls reads it on S3 too.
    e2e::Result states = cli({"state", "ls", snapshot});
    EXPECT_EQ(states.exitCode, 0) << states.err;
    EXPECT_NE(states.out.find("counts"), std::string::npos) << states.out;
    // convert writes a canonical savepoint onto S3 too, and refuses a prefix with objects.
    std::string converted = root_ + "/converted-" + cls;
    e2e::Result conv = cli({"convert", snapshot, converted});
    EXPECT_EQ(conv.exitCode, 0) << conv.out << conv.err;
    EXPECT_TRUE(storage_->exists("converted-" + cls + "/_metadata"));
    e2e::Result again = cli({"convert", snapshot, converted});
    EXPECT_EQ(again.exitCode, 2) << again.out << again.err;
    EXPECT_NE(again.err.find("already holds objects"), std::string::npos) << again.err;
    std::vector<std::string> fromConverted = {"run", "-c", cls, "-p", "2", "-s", converted};
    for (auto& f : s3Flags()) fromConverted.push_back(f);
    fromConverted.insert(fromConverted.end(), {kPlugin, "--input", in.string()});
    e2e::Result rc = cli(fromConverted);
    ASSERT_EQ(rc.exitCode, 0) << rc.err;
    EXPECT_EQ(e2e::finalCounts(r1.out + rc.out), expected);
    // checkpoints lists the killed job's checkpoints on S3, the one restored among them.
    e2e::Result listed = cli({"checkpoints", root_ + "/" + job});
    EXPECT_EQ(listed.exitCode, 0) << listed.err;
    EXPECT_NE(listed.out.find("COMPLETED"), std::string::npos) << listed.out;
    EXPECT_NE(listed.out.find(snapshot), std::string::npos) << listed.out;
    // gc of the killed job's directory: the lease it left names a pid of this host that no
    // longer runs, so gc takes it over at once (and releases it) — or, on a machine slow
    // enough that the 30 s lease ran out since the kill, takes it over as expired.
    e2e::Result gc = cli({"gc", "--dry-run", root_ + "/" + job});
    EXPECT_EQ(gc.exitCode, 0) << gc.out << gc.err;
    EXPECT_TRUE(gc.err.find("that process no longer runs on this host") != std::string::npos ||
                gc.err.find("replacing the expired lease") != std::string::npos)
        << gc.err;
    EXPECT_FALSE(storage_->exists(job + "/" + js::kLockFileName));
    ::unsetenv("AWS_ENDPOINT_URL");

    if (!savepoint.empty()) {
      // The savepoint, moved to another prefix by an independent client, restores there.
      std::string moved = root_ + "/moved/" + savepoint.substr(savepoint.rfind('/') + 1);
      int status = 0;
      std::string cp = "env AWS_ACCESS_KEY_ID=" + s3test::rgw().accessKey + " AWS_SECRET_ACCESS_KEY=" +
                       s3test::rgw().secretKey + " AWS_DEFAULT_REGION=us-east-1 " +
                       (fs::exists("/usr/bin/aws") ? "/usr/bin/aws" : "aws") + " --endpoint-url " +
                       s3test::rgw().endpoint + " s3 mv --recursive --only-show-errors " + savepoint + " " + moved + " 2>&1";
      std::string cpOut = s3test::run(cp, &status);
      ASSERT_EQ(status, 0) << cp << "\n" << cpOut;
      std::vector<std::string> args3 = {"run", "-c", cls, "-p", "1", "-s", moved};
      for (auto& f : s3Flags()) args3.push_back(f);
      args3.insert(args3.end(), {kPlugin, "--input", in.string()});
      e2e::Result r3 = cli(args3);
      ASSERT_EQ(r3.exitCode, 0) << r3.err;
      EXPECT_NE(r3.err.find("restoring from snapshot " + moved), std::string::npos) << r3.err;
      EXPECT_EQ(e2e::finalCounts(r1.out + r3.out), expected);
      // savepoint -d disposes of it on S3: every object of it goes.
      ::setenv("AWS_ENDPOINT_URL", s3test::rgw().endpoint.c_str(), 1);
      e2e::Result disposed = cli({"savepoint", "-d", moved});
      ::unsetenv("AWS_ENDPOINT_URL");
      EXPECT_EQ(disposed.exitCode, 0) << disposed.out << disposed.err;
      EXPECT_NE(disposed.out.find("Savepoint '" + moved + "' disposed"), std::string::npos) << disposed.out;
      std::vector<js::FileEntry> left;
      ASSERT_TRUE(storage_->list(moved.substr(root_.size() + 1), &left).ok());
      EXPECT_TRUE(left.empty()) << left.size() << " objects left, e.g. " << (left.empty() ? "" : left[0].path);
    }
  }
  // The restored runs finished and gc took the killed runs' leases over: none is left.
  std::vector<js::FileEntry> files;
  ASSERT_TRUE(storage_->list("", &files).ok());
  std::vector<std::string> leases;
  for (const auto& f : files)
    if (f.path.ends_with("/.lock")) leases.push_back(f.path);
  EXPECT_EQ(leases, std::vector<std::string>{});
}

// Issue 17, item 5 on RGW: `run --job-id NAME --restore latest` with the checkpoints on
// S3, killed twice and started again each time — the stable directory s3://…/NAME, the
// killed run's lease taken over (its pid is dead on this host), exact counts; a second
// instance is refused while one runs.
TEST_F(S3Job, RestoreLatestFromS3AfterKillNineTwiceContinuesExactly) {
  fs::path in = input(2000);  // ~9 s at the rate below: still running when killed
  auto args = [&](bool throttled) {
    std::vector<std::string> a = {"run", "--job-id", "wc", "--restore", "latest", "-c", "WordCount", "-p", "2"};
    for (auto& f : s3Flags()) a.push_back(f);
    a.insert(a.end(), {kPlugin, "--input", in.string()});
    if (throttled) a.insert(a.end(), {"--rate", "3000"});
    return a;
  };
  auto newest = [&] {
    std::vector<js::FileEntry> files;
    int n = 0;
    if (!storage_->list("wc", &files).ok()) return 0;
    for (const auto& f : files)
      if (f.path.ends_with("/_metadata")) {
        auto id = js::parseCheckpointDirName(f.path.substr(3, f.path.size() - 3 - 10));
        if (id) n = std::max(n, static_cast<int>(*id));
      }
    return n;
  };
  std::string out;
  int restored = 0;
  for (int run = 1; run <= 2; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const fs::path err = tmp / ("wc-" + std::to_string(run) + ".err");
    e2e::Process p(jobhost(args(true)), tmp / ("wc-" + std::to_string(run) + ".out"), err);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until && p.running() && newest() <= restored + 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_GT(newest(), restored + 1) << e2e::readFile(err);
    if (run == 2) {
      e2e::Result twin = cli(args(true));
      EXPECT_EQ(twin.exitCode, 2) << twin.err;
      EXPECT_NE(twin.err.find("in use by job wc (WordCount"), std::string::npos) << twin.err;
    }
    p.signal(SIGKILL);
    e2e::Result r = p.wait();
    ASSERT_EQ(r.exitCode, 128 + SIGKILL) << "ended before it was killed: " << r.err;
    if (run == 1) {
      EXPECT_NE(r.err.find("starting without state"), std::string::npos) << r.err;
    } else {
      EXPECT_NE(r.err.find("--restore latest: restoring " + root_ + "/wc/chk-" + std::to_string(restored)),
                std::string::npos)
          << r.err;
    }
    out += r.out;
    restored = newest();
  }
  e2e::Result last = cli(args(false));
  ASSERT_EQ(last.exitCode, 0) << last.err;
  EXPECT_NE(last.err.find("--restore latest: restoring " + root_ + "/wc/chk-" + std::to_string(restored)),
            std::string::npos)
      << last.err;
  EXPECT_EQ(e2e::finalCounts(out + last.out), e2e::expectedCounts(e2e::readFile(in)));
  // Everything of the job is under the one prefix named by its id.
  EXPECT_EQ(jobsWithCheckpoint(), std::vector<std::string>{"wc"});
}

// Preflight on S3 names a missing shared object by its s3:// location and the checkpoint
// that first wrote it, before anything is restored, and touches nothing (issue 17, item 4).
TEST_F(S3Job, PreflightNamesAMissingSharedObjectAndTheCheckpointThatWroteIt) {
  std::vector<std::string> args = {"run", "--job-id", "inc", "-c", "WordCountIncremental"};
  for (auto& f : s3Flags()) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(2000).string(), "--rate", "2000"});
  e2e::Process p(jobhost(args), tmp / "inc.out", tmp / "inc.err");
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && p.running() && !storage_->exists("inc/chk-3/_metadata"))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(storage_->exists("inc/chk-3/_metadata")) << e2e::readFile(tmp / "inc.err");
  p.signal(SIGTERM);  // retained checkpoints stay
  e2e::Result r = p.wait(std::chrono::seconds(60));
  ASSERT_EQ(r.exitCode, 130) << r.err;
  std::vector<js::FileEntry> files;
  ASSERT_TRUE(storage_->list("inc/shared", &files).ok());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) ASSERT_TRUE(storage_->remove(f.path).ok()) << f.path;
  std::vector<js::FileEntry> before;
  ASSERT_TRUE(storage_->list("", &before).ok());
  std::vector<std::string> check = {"check", "-s", root_ + "/inc", "-c", "WordCountIncremental"};
  for (auto& f : s3Flags()) check.push_back(f);
  check.push_back(kPlugin);
  e2e::Result c = cli(check);
  EXPECT_EQ(c.exitCode, 3) << c.out << c.err;
  const std::string all = c.out + c.err;
  EXPECT_NE(all.find("file " + root_ + "/inc/shared/"), std::string::npos) << all;
  EXPECT_NE(all.find("which the snapshot's _metadata references, does not exist"), std::string::npos) << all;
  EXPECT_NE(all.find("(first written by checkpoint "), std::string::npos) << all;
  std::vector<js::FileEntry> after;
  ASSERT_TRUE(storage_->list("", &after).ok());
  EXPECT_EQ(after, before) << "check changed the snapshot";
}

TEST_F(S3Job, TheObjectStoreLeaseAdmitsOneHolderAndNamesIt) {
  std::string dir = root_ + "/job-a";
  jobhost::host::LockHolder me{static_cast<int>(::getpid()), "job-a", "WordCount", "running job"};
  auto first = jobhost::host::JobDirectoryLock::acquire(dir, me);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(storage_->exists("job-a/.lock"));
  std::optional<jobhost::host::LockHolder> heldBy;
  auto second = jobhost::host::JobDirectoryLock::acquire(dir, {1, "", "", "gc"}, &heldBy);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use by job job-a (WordCount, pid " + std::to_string(::getpid())),
            std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("expires in"), std::string::npos) << second.status();
  ASSERT_TRUE(heldBy.has_value());
  EXPECT_EQ(heldBy->jobId, "job-a");
  auto h = jobhost::host::JobDirectoryLock::holder(dir);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->purpose, "running job");
  first->release();
  EXPECT_FALSE(storage_->exists("job-a/.lock"));
  auto third = jobhost::host::JobDirectoryLock::acquire(dir, {1, "", "", "gc"});
  EXPECT_TRUE(third.ok()) << third.status();

  // A live-looking lease of another host is refused until it expires, naming it.
  ASSERT_TRUE(storage_->put("job-f/.lock", "pid 1\njob other\nclass WordCount\nhost elsewhere\nowner elsewhere:1:x\n"
                                           "expires " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch()).count() + 20000) +
                                           "\n").ok());
  auto foreign = jobhost::host::JobDirectoryLock::acquire(root_ + "/job-f", me);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("in use by job other (WordCount, pid 1) on host elsewhere"), std::string::npos)
      << foreign.status();
  EXPECT_NE(foreign.status().message().find("retry after the lease expires"), std::string::npos) << foreign.status();
  // A lease whose holder stopped renewing it (killed) is replaced once it has expired.
  ASSERT_TRUE(storage_->put("job-b/.lock", "pid 1\njob old\nowner gone:1:x\nexpires 1000\n").ok());
  auto stale = jobhost::host::JobDirectoryLock::acquire(root_ + "/job-b", me);
  EXPECT_TRUE(stale.ok()) << stale.status();
  std::string text;
  ASSERT_TRUE(storage_->get("job-b/.lock", &text).ok());
  EXPECT_NE(text.find("job job-a"), std::string::npos) << text;
}

TEST_F(S3Job, GcOnS3RemovesWhatNoCheckpointNeedsAndRefusesASnapshot) {
  ::setenv("AWS_ENDPOINT_URL", s3test::rgw().endpoint.c_str(), 1);
  // A job directory whose chk-2 never completed (no _metadata) and a stray shared file.
  ASSERT_TRUE(storage_->put("job-d/chk-2/counts-0.kg", "partial").ok());
  ASSERT_TRUE(storage_->put("job-d/shared/orphan.sst", "orphan").ok());
  // And a multipart upload a crashed job left unfinished (started by the independent client).
  int status = 0;
  std::string aws = "env AWS_ACCESS_KEY_ID=" + s3test::rgw().accessKey + " AWS_SECRET_ACCESS_KEY=" +
                    s3test::rgw().secretKey + " AWS_DEFAULT_REGION=us-east-1 " +
                    (fs::exists("/usr/bin/aws") ? "/usr/bin/aws" : "aws") + " --endpoint-url " + s3test::rgw().endpoint +
                    " s3api ";
  std::string created = s3test::run(aws + "create-multipart-upload --bucket " + s3test::rgw().bucket + " --key " + prefix_ +
                                        "/job-d/chk-2/counts-1.kg 2>&1",
                                    &status);
  ASSERT_EQ(status, 0) << created;
  e2e::Result dry = cli({"gc", "--dry-run", root_ + "/job-d"});
  EXPECT_EQ(dry.exitCode, 0) << dry.out << dry.err;
  EXPECT_NE(dry.out.find("would remove 3 files"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("unfinished upload"), std::string::npos) << dry.out;
  EXPECT_TRUE(storage_->exists("job-d/chk-2/counts-0.kg"));
  e2e::Result gc = cli({"gc", root_ + "/job-d"});
  EXPECT_EQ(gc.exitCode, 0) << gc.out << gc.err;
  EXPECT_FALSE(storage_->exists("job-d/chk-2/counts-0.kg"));
  EXPECT_FALSE(storage_->exists("job-d/shared/orphan.sst"));
  EXPECT_FALSE(storage_->exists("job-d/.lock"));  // gc's own lease is gone again
  std::string uploads = s3test::run(aws + "list-multipart-uploads --bucket " + s3test::rgw().bucket + " --prefix " +
                                        prefix_ + "/ --query Uploads[].Key --output text 2>&1",
                                    &status);
  EXPECT_EQ(uploads, "None\n");
  ASSERT_TRUE(storage_->put("job-e/chk-1/_metadata", "x").ok());
  e2e::Result single = cli({"gc", root_ + "/job-e/chk-1"});
  EXPECT_EQ(single.exitCode, 2) << single.out << single.err;
  EXPECT_NE(single.err.find("is a single snapshot"), std::string::npos) << single.err;
  ::unsetenv("AWS_ENDPOINT_URL");
}

TEST_F(S3Job, SlowDownAnswersAreRetriedAndAFailedUploadDeclinesOnlyItsCheckpoint) {
  fs::path in = input(300);
  const auto expected = e2e::expectedCounts(e2e::readFile(in));
  struct Case {
    std::string rule;
    bool declines;
  };
  for (const Case& c : {Case{"slowdown-every-4", false}, Case{"forbid-put-/chk-3/", true}}) {
    SCOPED_TRACE(c.rule);
    FaultProxy proxy(tmp.path, c.rule);
    ASSERT_FALSE(proxy.endpoint().empty()) << "the proxy did not start";
    std::vector<std::string> args = {"run", "-c", "WordCount", "-p", "2"};
    for (auto& f : s3Flags()) args.push_back(f);
    for (auto& a : args)
      if (a.rfind("s3.endpoint=", 0) == 0) a = "s3.endpoint=" + proxy.endpoint();
    args.insert(args.end(), {"-D", "execution.checkpointing.interval=100ms", "-D",
                             "execution.checkpointing.tolerable-failed-checkpoints=5", kPlugin, "--input", in.string(),
                             "--rate", "2000"});
    e2e::Result r = cli(args);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(e2e::finalCounts(r.out), expected);
    EXPECT_GT(proxy.injected(), 0u) << "no fault was injected; the job's log:\n" << r.err;
    if (c.declines) {
      EXPECT_NE(r.err.find("checkpoint 3 failed and was discarded"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("HTTP 403 AccessDenied"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("completed checkpoint 4"), std::string::npos) << r.err;  // and the job went on
    } else {
      EXPECT_EQ(r.err.find("failed and was discarded"), std::string::npos) << r.err;  // retries absorbed them
      EXPECT_NE(r.err.find("completed checkpoint"), std::string::npos) << r.err;
    }
  }
}

// Issue 31: the outage that ended a job for good on cb865b1. WordCount -p 2, checkpoints
// every 500 ms, tolerable-failed-checkpoints = 0, and the store answers every request
// (HEAD included) with 503 SlowDown for 12 s: the job keeps processing, declines the
// checkpoints meanwhile without counting them, says since when, completes checkpoints
// again once the store is back, and ends with exact counts (exit 0).
//
// JOBHOST_S3_OUTAGE_SECONDS sets another length (issue 31's "a 60 s outage": run by hand
// with 60; the input grows with it).
TEST_F(S3Job, ATwelveSecondOutageOfTheStoreIsWaitedOutAndCheckpointsResume) {
  const int outageSeconds = std::getenv("JOBHOST_S3_OUTAGE_SECONDS") ? std::atoi(std::getenv("JOBHOST_S3_OUTAGE_SECONDS")) : 12;
  fs::path in = input(1800 * (outageSeconds + 13) / 25);  // ~25 s at the rate below for 12 s
  FaultProxy proxy(tmp.path, "none", tmp / "outage");
  ASSERT_FALSE(proxy.endpoint().empty()) << "the proxy did not start";
  std::vector<std::string> args = {"run", "-c", "WordCount", "-p", "2"};
  for (auto& f : s3Flags()) args.push_back(f);
  for (auto& a : args)
    if (a.rfind("s3.endpoint=", 0) == 0) a = "s3.endpoint=" + proxy.endpoint();
  args.insert(args.end(), {"-D", "execution.checkpointing.interval=500ms", "-D",
                           "execution.checkpointing.tolerable-failed-checkpoints=0", kPlugin, "--input", in.string(),
                           "--rate", "1000"});
  const fs::path err = tmp / "outage.err";
  e2e::Process p(jobhost(args), tmp / "outage.out", err);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && p.running() &&
         e2e::readFile(err).find("completed checkpoint 2") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(p.running()) << e2e::readFile(err);
  proxy.setOutage("503");
  std::this_thread::sleep_for(std::chrono::seconds(outageSeconds));
  EXPECT_TRUE(p.running()) << "the job ended during the outage:\n" << e2e::readFile(err);
  const std::string during = e2e::readFile(err);
  proxy.setOutage("up");
  e2e::Result r = p.wait();
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(e2e::finalCounts(r.out), e2e::expectedCounts(e2e::readFile(in)));
  EXPECT_GT(proxy.injected(), 0u);
  EXPECT_NE(during.find("unavailable since"), std::string::npos) << during;
  EXPECT_EQ(r.err.find("failed and was discarded"), std::string::npos) << r.err;  // declined, not counted
  EXPECT_EQ(r.err.find("restarting"), std::string::npos) << r.err;                // no restart either
  EXPECT_NE(r.err.find("answers again"), std::string::npos) << r.err;
  // A checkpoint completed after the outage (the log line of the store's return names it).
  const auto back = r.err.find("answers again");
  ASSERT_NE(back, std::string::npos);
  EXPECT_NE(r.err.find("completed checkpoint", back > 200 ? back - 200 : 0), std::string::npos) << r.err;
}

// Issue 31: the CI failure of the test above (1 run in 4 on a loaded machine). A subsumed
// checkpoint's deletion that met the outage held the coordinator's lock for the ~10 s its
// requests were retried: no checkpoint was triggered or declined meanwhile, and status went
// stale. Here only chk-1's objects fail (every other request goes through): while its
// deletion is retried, checkpoints 3, 4 and 5 must complete.
TEST_F(S3Job, ASubsumedCheckpointsDeletionThatMeetsAnOutageHoldsUpNoCheckpoint) {
  fs::path in = input(1200);  // ~15 s at the rate below
  FaultProxy proxy(tmp.path, "none", tmp / "outage");
  ASSERT_FALSE(proxy.endpoint().empty()) << "the proxy did not start";
  std::vector<std::string> args = {"run", "--job-id", "subsume", "-c", "WordCount", "-p", "1"};
  for (auto& f : s3Flags()) args.push_back(f);
  for (auto& a : args)
    if (a.rfind("s3.endpoint=", 0) == 0) a = "s3.endpoint=" + proxy.endpoint();
  args.insert(args.end(), {"-D", "execution.checkpointing.interval=300ms", kPlugin, "--input", in.string(), "--rate",
                           "800"});
  const fs::path err = tmp / "subsume.err";
  e2e::Process p(jobhost(args), tmp / "subsume.out", err);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && p.running() &&
         e2e::readFile(err).find("completed checkpoint 1 ") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(p.running()) << e2e::readFile(err);
  proxy.setOutage("503:/chk-1/");
  e2e::Result r = p.wait();
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(e2e::finalCounts(r.out), e2e::expectedCounts(e2e::readFile(in)));
  const auto gaveUp = r.err.find("could not fully remove subsumed checkpoint 1");
  ASSERT_NE(gaveUp, std::string::npos) << "chk-1's deletion met no fault:\n" << r.err;
  const auto fifth = r.err.find("completed checkpoint 5 ");
  ASSERT_NE(fifth, std::string::npos) << r.err;
  EXPECT_LT(fifth, gaveUp) << "no checkpoint completed while chk-1's deletion was retried:\n" << r.err;
}

// Issue 31: a restart that meets the outage. The job is killed while the store is down
// and started again with --restore latest: it waits for the store (it does not take the
// unanswered reads for a missing or truncated snapshot, exit 3 on cb865b1), restores the
// newest checkpoint once the store answers, and the counts are exact.
TEST_F(S3Job, ARestoreDuringAnOutageWaitsForTheStoreInsteadOfCallingTheSnapshotDamaged) {
  fs::path in = input(3000);
  FaultProxy proxy(tmp.path, "none", tmp / "outage");
  ASSERT_FALSE(proxy.endpoint().empty()) << "the proxy did not start";
  auto args = [&](bool throttled) {
    std::vector<std::string> a = {"run", "--job-id", "wc", "--restore", "latest", "-c", "WordCount", "-p", "2"};
    for (auto& f : s3Flags()) a.push_back(f);
    for (auto& x : a)
      if (x.rfind("s3.endpoint=", 0) == 0) x = "s3.endpoint=" + proxy.endpoint();
    a.insert(a.end(), {kPlugin, "--input", in.string()});
    if (throttled) a.insert(a.end(), {"--rate", "2000"});
    return a;
  };
  const fs::path err1 = tmp / "first.err";
  e2e::Process first(jobhost(args(true)), tmp / "first.out", err1);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && first.running() &&
         e2e::readFile(err1).find("completed checkpoint 3") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(first.running()) << e2e::readFile(err1);
  proxy.setOutage("503");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  first.signal(SIGKILL);
  e2e::Result killed = first.wait();
  ASSERT_EQ(killed.exitCode, 128 + SIGKILL) << killed.err;

  const fs::path err2 = tmp / "second.err";
  e2e::Process second(jobhost(args(false)), tmp / "second.out", err2);
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_TRUE(second.running()) << "gave up during the outage:\n" << e2e::readFile(err2);
  proxy.setOutage("up");
  e2e::Result r = second.wait();
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find("--restore latest: restoring"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("truncated or replaced"), std::string::npos) << r.err;
  EXPECT_EQ(e2e::finalCounts(killed.out + r.out), e2e::expectedCounts(e2e::readFile(in)));
}

// "2026-12-04 07:07:28.650": the time format of the job's log (spdlog, local time).
std::string logTime(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  char out[40];
  std::snprintf(out, sizeof out, "%s.%03d", buf, static_cast<int>(ms));
  return out;
}

// The times of the log lines that contain `what` (their first 23 characters).
std::vector<std::string> linesAt(const std::string& log, const std::string& what) {
  std::vector<std::string> times;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find(what) != std::string::npos && line.size() > 23) times.push_back(line.substr(0, 23));
  return times;
}

// Issue 31, item 3: fencing. Instance A of job `fence` cannot renew its lease (the proxy
// answers 503 to the lease object only, so A could still write everything else); after
// the lease expired, instance B of the same --job-id takes it over, restores A's newest
// checkpoint and runs to the end. A publishes no checkpoint from half a lease after its
// last renewal on; once the store answers again it finds the lease gone, acquires it
// again and restarts from the newest checkpoint (B's), not from its own stale state. The
// counts are exact.
TEST_F(S3Job, TwoInstancesOfOneJobIdNeverBothPublishWhileTheLeaseCannotBeRenewed) {
  ::setenv("JOBHOST_LEASE_SECONDS", "6", 1);  // inherited by both instances
  fs::path in = input(2500);                   // A alone: ~35 s at its rate
  FaultProxy proxy(tmp.path, "none", tmp / "outage");
  ASSERT_FALSE(proxy.endpoint().empty()) << "the proxy did not start";
  auto args = [&](const std::string& endpoint, bool throttled) {
    std::vector<std::string> a = {"run", "--job-id", "fence", "--restore", "latest", "-c", "WordCount", "-p", "1"};
    for (auto& f : s3Flags()) a.push_back(f);
    for (auto& x : a)
      if (x.rfind("s3.endpoint=", 0) == 0) x = "s3.endpoint=" + endpoint;
    a.insert(a.end(), {"-D", "execution.checkpointing.interval=300ms", kPlugin, "--input", in.string()});
    if (throttled) a.insert(a.end(), {"--rate", "1000"});
    return a;
  };
  const fs::path errA = tmp / "a.err";
  e2e::Process a(jobhost(args(proxy.endpoint(), true)), tmp / "a.out", errA);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && a.running() &&
         e2e::readFile(errA).find("completed checkpoint 2") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(a.running()) << e2e::readFile(errA);
  proxy.setOutage("503:/.lock");
  const auto outage = std::chrono::system_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(8));  // A's lease (6 s) has expired by now
  ASSERT_TRUE(a.running()) << e2e::readFile(errA);
  const std::string fencedLog = e2e::readFile(errA);
  EXPECT_NE(fencedLog.find("cannot renew the lease"), std::string::npos) << fencedLog;
  EXPECT_NE(fencedLog.find("not publishing"), std::string::npos) << fencedLog;

  e2e::Result b = cli(args(s3test::rgw().endpoint, false));  // B: straight to the store
  ASSERT_EQ(b.exitCode, 0) << b.err;
  EXPECT_NE(b.err.find("--restore latest: restoring"), std::string::npos) << b.err;
  const auto bEnded = std::chrono::system_clock::now();
  // A published nothing from half a lease after its last renewal (at most 3 s after the
  // outage began, +1 s for the renewal in flight) until B had ended.
  const std::string fenceFrom = logTime(outage + std::chrono::seconds(4)), fenceTo = logTime(bEnded);
  for (const std::string& t : linesAt(e2e::readFile(errA), "completed checkpoint"))
    EXPECT_FALSE(t > fenceFrom && t < fenceTo) << "A published a checkpoint at " << t << " while fenced (from "
                                               << fenceFrom << " to " << fenceTo << ")";

  proxy.setOutage("up");
  e2e::Result ra = a.wait();
  ::unsetenv("JOBHOST_LEASE_SECONDS");
  ASSERT_EQ(ra.exitCode, 0) << ra.err;
  EXPECT_NE(ra.err.find("acquired it again"), std::string::npos) << ra.err;
  EXPECT_NE(ra.err.find("restarting from the newest checkpoint"), std::string::npos) << ra.err;
  EXPECT_EQ(e2e::finalCounts(ra.out + b.out), e2e::expectedCounts(e2e::readFile(in)));
}

// Issue 31, item 3, the other ending: instance B still holds the lease when A's store
// answers again. A learns at its next renewal that the lease is B's and stops with exit 1
// ("lost the lease … to …"), publishing nothing more; B restored A's newest checkpoint
// and ends with exact counts.
TEST_F(S3Job, AnInstanceWhoseLeaseWasTakenOverStopsWithExit1AndPublishesNothingMore) {
  ::setenv("JOBHOST_LEASE_SECONDS", "6", 1);  // inherited by both instances
  fs::path in = input(1500);
  FaultProxy proxy(tmp.path, "none", tmp / "outage");
  ASSERT_FALSE(proxy.endpoint().empty()) << "the proxy did not start";
  auto args = [&](const std::string& endpoint, const std::string& rate) {
    std::vector<std::string> a = {"run", "--job-id", "taken", "--restore", "latest", "-c", "WordCount", "-p", "1"};
    for (auto& f : s3Flags()) a.push_back(f);
    for (auto& x : a)
      if (x.rfind("s3.endpoint=", 0) == 0) x = "s3.endpoint=" + endpoint;
    a.insert(a.end(), {"-D", "execution.checkpointing.interval=300ms", kPlugin, "--input", in.string(), "--rate", rate});
    return a;
  };
  const fs::path errA = tmp / "a.err", errB = tmp / "b.err";
  e2e::Process a(jobhost(args(proxy.endpoint(), "1000")), tmp / "a.out", errA);
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && a.running() &&
         e2e::readFile(errA).find("completed checkpoint 2 ") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(a.running()) << e2e::readFile(errA);
  proxy.setOutage("503:/.lock");
  std::this_thread::sleep_for(std::chrono::seconds(8));  // A's lease (6 s) has expired by now
  ASSERT_TRUE(a.running()) << e2e::readFile(errA);
  e2e::Process b(jobhost(args(s3test::rgw().endpoint, "2000")), tmp / "b.out", errB);
  until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && b.running() &&
         e2e::readFile(errB).find("completed checkpoint") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(b.running()) << e2e::readFile(errB);
  proxy.setOutage("up");
  e2e::Result ra = a.wait(std::chrono::seconds(60));
  e2e::Result rb = b.wait(std::chrono::seconds(120));
  ::unsetenv("JOBHOST_LEASE_SECONDS");
  EXPECT_EQ(ra.exitCode, 1) << ra.err;
  EXPECT_NE(ra.err.find("lost the lease"), std::string::npos) << ra.err;
  EXPECT_EQ(ra.err.find("acquired it again"), std::string::npos) << ra.err;
  ASSERT_EQ(rb.exitCode, 0) << rb.err;
  EXPECT_NE(rb.err.find("--restore latest: restoring"), std::string::npos) << rb.err;
  // A published nothing after it lost the lease: every checkpoint of A's log is older than
  // B's start (B numbers its checkpoints on from A's).
  const std::vector<std::string> bTimes = linesAt(rb.err, "completed checkpoint");
  ASSERT_FALSE(bTimes.empty()) << rb.err;
  for (const std::string& t : linesAt(ra.err, "completed checkpoint"))
    EXPECT_LT(t, bTimes.front()) << "A published a checkpoint at " << t << " after B's first (" << bTimes.front()
                                 << ")";
  EXPECT_EQ(e2e::finalCounts(ra.out + rb.out), e2e::expectedCounts(e2e::readFile(in)));
}

TEST_F(S3Job, StopWithASavepointOntoS3AndRestoreFromItKeepsExactCounts) {
  fs::path in = input(300);
  std::vector<std::string> args = {"run", "-c", "WordCount", "-p", "2"};
  for (auto& f : s3Flags()) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", in.string(), "--rate", "3000"});
  e2e::Process p(jobhost(args), tmp / "stop.out", tmp / "stop.err");
  std::string job;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until && p.running() && job.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto jobs = jobsWithCheckpoint();
    if (!jobs.empty()) job = jobs[0];
  }
  ASSERT_FALSE(job.empty()) << e2e::readFile(tmp / "stop.err");
  e2e::Result stop = cli({"stop", "-p", root_ + "/stopped", job});
  ASSERT_EQ(stop.exitCode, 0) << stop.out << stop.err;
  size_t at = stop.out.find("Path: ");
  ASSERT_NE(at, std::string::npos) << stop.out;
  std::string savepoint = stop.out.substr(at + 6, stop.out.find('\n', at) - at - 6);
  EXPECT_EQ(savepoint.rfind(root_ + "/stopped/savepoint-", 0), 0u) << savepoint;
  e2e::Result r1 = p.wait();
  EXPECT_EQ(r1.exitCode, 0) << r1.err;
  std::vector<std::string> args2 = {"run", "-c", "WordCount", "-p", "2", "-s", savepoint};
  for (auto& f : s3Flags()) args2.push_back(f);
  args2.insert(args2.end(), {kPlugin, "--input", in.string()});
  e2e::Result r2 = cli(args2);
  ASSERT_EQ(r2.exitCode, 0) << r2.err;
  EXPECT_EQ(e2e::finalCounts(r1.out + r2.out), e2e::expectedCounts(e2e::readFile(in)));
}

TEST_F(S3Job, BadS3LocationsAreOneClearErrorBeforeTheJobStarts) {
  struct Case {
    std::string dir, messagePart;
  };
  for (const Case& c : std::vector<Case>{
           {"s3://", "state.checkpoints.dir = 's3://': invalid S3 URI 's3://': no bucket"},
           {root_ + "/a//b", "empty path component"},
           {"s3://no-such-bucket-here/x", "HTTP 404 NoSuchBucket"}}) {
    SCOPED_TRACE(c.dir);
    std::vector<std::string> args = {"run", "-c", "WordCount"};
    for (auto& f : s3Flags()) args.push_back(f);
    args[4] = "state.checkpoints.dir=" + c.dir;
    args.insert(args.end(), {kPlugin, "--input", e2e::kWords});
    e2e::Result r = cli(args, std::chrono::seconds(60));
    EXPECT_EQ(r.exitCode, 2) << r.err;
    EXPECT_NE(r.err.find(c.messagePart), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");  // the job did not run
  }
}

// The dashboard over a checkpoint directory on S3: a job that was killed (named with
// --job-id) is listed from the object store with its checkpoints, through the API and
// its token.
TEST_F(S3Job, TheDashboardListsAJobAndItsCheckpointsFromS3) {
  std::vector<std::string> args = {"run", "--job-id", "dash", "-c", "WordCount"};
  for (auto& f : s3Flags()) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", input(2000).string(), "--rate", "2000"});
  {
    e2e::Process p(jobhost(args), tmp / "dash.out", tmp / "dash.err");
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until && p.running() && !storage_->exists("dash/chk-2/_metadata"))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(storage_->exists("dash/chk-2/_metadata")) << e2e::readFile(tmp / "dash.err");
    p.signal(SIGKILL);
    p.wait();
  }
  e2e::Process ui(jobhost({"ui", "--port", "0", "--checkpoint-dir", root_, "-D", "s3.endpoint=" + s3test::rgw().endpoint,
                           "-D", "s3.path.style.access=true"}),
                  tmp / "ui.out", tmp / "ui.err");
  std::string url;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until && ui.running() && url.empty()) {
    std::string out = e2e::readFile(tmp / "ui.out");
    auto pos = out.find("Dashboard: http://");
    auto eol = pos == std::string::npos ? std::string::npos : out.find('\n', pos);
    if (eol != std::string::npos) url = out.substr(pos + 11, eol - pos - 11);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(url.empty()) << e2e::readFile(tmp / "ui.out") << e2e::readFile(tmp / "ui.err");
  const auto tokenAt = url.find("/?token=");
  ASSERT_NE(tokenAt, std::string::npos) << url;
  const std::string base = url.substr(0, tokenAt), token = url.substr(tokenAt + 8);
  auto get = [&](const std::string& path) {
    int status = 0;
    std::string body = s3test::run("python3 -c 'import sys,urllib.request as u; r=u.urlopen(u.Request(sys.argv[1], "
                                   "headers={\"Authorization\": \"Bearer \"+sys.argv[2]})); print(r.read().decode())' " +
                                       base + path + " " + token + " 2>&1",
                                   &status);
    EXPECT_EQ(status, 0) << path << ": " << body;
    return body;
  };
  std::string jobs = get("/api/jobs");
  EXPECT_NE(jobs.find("\"dash\""), std::string::npos) << jobs;
  EXPECT_NE(jobs.find(root_ + "/dash"), std::string::npos) << jobs;
  std::string chks = get("/api/jobs/dash/checkpoints");
  EXPECT_NE(chks.find("COMPLETED"), std::string::npos) << chks;
  EXPECT_NE(chks.find(root_ + "/dash/chk-"), std::string::npos) << chks;
  ui.signal(SIGTERM);
  ui.wait(std::chrono::seconds(30));
}

}  // namespace
