// Unit tests for host/ui/dashboard: routing and validation of request targets (nothing
// from a URL becomes a path), the restore command's quoting, and answers about jobs that
// exist only on disk. No HTTP here (tests/e2e/ui_test.cc drives the real server).
#include "ui/dashboard.h"
#include "../support/contains.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;

class DashboardTest : public ::testing::Test {
 protected:
  fs::path dir;
  std::optional<std::string> oldXdg;
  void SetUp() override {
    std::random_device rd;
    dir = fs::temp_directory_path() / ("jobhost-dashboard-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(dir / "ck");
    fs::create_directories(dir / "rt");
    fs::permissions(dir / "rt", fs::perms::owner_all, fs::perm_options::replace);
    if (const char* x = std::getenv("XDG_RUNTIME_DIR")) oldXdg = x;
    setenv("XDG_RUNTIME_DIR", (dir / "rt").c_str(), 1);  // no running jobs
  }
  void TearDown() override {
    if (oldXdg) setenv("XDG_RUNTIME_DIR", oldXdg->c_str(), 1);
    else unsetenv("XDG_RUNTIME_DIR");
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Dashboard make(bool readOnly = false) { return Dashboard({(dir / "ck").string(), readOnly}); }
};

TEST_F(DashboardTest, ServesTheEmbeddedPageAndAssetsOnly) {
  Dashboard d = make();
  for (const char* t : {"/", "/index.html", "/?x=1"}) {
    auto r = d.quick("GET", t);
    ASSERT_TRUE(r) << t;
    EXPECT_EQ(r->status, 200) << t;
    EXPECT_TRUE(contains(r->contentType, "text/html")) << t;
    EXPECT_TRUE(contains(r->body, "/app.js")) << t;
  }
  EXPECT_EQ(d.quick("GET", "/app.js")->status, 200);
  EXPECT_EQ(d.quick("GET", "/app.css")->status, 200);
  EXPECT_EQ(d.quick("POST", "/")->status, 405);
  for (const char* t : {"/etc/passwd", "/../etc/passwd", "/app.js/../../etc/passwd", "//etc/passwd", "/assets/app.js"})
    EXPECT_EQ(d.quick("GET", t)->status, 404) << t;
  EXPECT_EQ(d.quick("GET", "relative")->status, 400);
  EXPECT_EQ(d.quick("GET", "http://example.com/")->status, 400);
}

TEST_F(DashboardTest, JobIdsMustBeJobIdsAndRoutesExact) {
  Dashboard d = make();
  const std::string id = "0123456789abcdef0123456789abcdef";
  for (const std::string& t : std::vector<std::string>{"/api/jobs/..", "/api/jobs/%2e%2e", "/api/jobs/-x",
                              "/api/jobs/..%2f..%2fetc%2fpasswd/checkpoints", "/api/jobs/a.b", "/api/jobs/ab cd",
                              "/api/jobs/" + std::string(65, 'a')}) {
    auto r = d.quick("GET", t);
    ASSERT_TRUE(r) << t;
    EXPECT_EQ(r->status, 400) << t;
    EXPECT_TRUE(contains(r->body, "invalid job id")) << r->body;
  }
  // A run --job-id NAME is a job id too: these are well-formed (past the quick checks),
  // and unknown.
  for (const std::string& t : std::vector<std::string>{"/api/jobs/not-hex", "/api/jobs/" + id + "0", "/api/jobs/g123"}) {
    EXPECT_FALSE(d.quick("GET", t)) << t;
    auto r = d.handle("GET", t, "");
    EXPECT_EQ(r.status, 404) << t;
    EXPECT_TRUE(contains(r.body, "no job with id")) << r.body;
  }
  for (const std::string& t : std::vector<std::string>{"/api/jobs/../../etc/passwd", "/api/jobs/" + id + "/../../../etc/passwd",
                              "/api/jobs/" + id + "/checkpoints/x", "/api/jobs/" + id + "/metrics", "/api", "/api/x"}) {
    auto r = d.quick("GET", t);
    ASSERT_TRUE(r) << t;
    EXPECT_EQ(r->status, 404) << t;
  }
  EXPECT_FALSE(d.quick("GET", "/api/jobs"));
  EXPECT_FALSE(d.quick("GET", "/api/jobs/"));
  EXPECT_FALSE(d.quick("GET", "/api/jobs/" + id));
  EXPECT_FALSE(d.quick("GET", "/api/jobs/0123AB/checkpoints"));
  EXPECT_FALSE(d.quick("POST", "/api/jobs/" + id + "/savepoints"));
  EXPECT_EQ(d.quick("GET", "/api/jobs/" + id + "/savepoints")->status, 405);
  EXPECT_EQ(d.quick("POST", "/api/jobs/" + id + "/checkpoints")->status, 405);
  EXPECT_EQ(d.quick("DELETE", "/api/jobs")->status, 405);
}

TEST_F(DashboardTest, ReadOnlyRefusesEveryPost) {
  Dashboard d = make(/*readOnly=*/true);
  const std::string id = "0123456789abcdef0123456789abcdef";
  for (const char* what : {"/savepoints", "/cancel"}) {
    auto r = d.quick("POST", "/api/jobs/" + id + what);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
    EXPECT_TRUE(contains(r->body, "read-only")) << r->body;
    EXPECT_EQ(d.handle("POST", "/api/jobs/" + id + what, "{}").status, 403);
  }
  EXPECT_FALSE(d.quick("GET", "/api/jobs/" + id + "/checkpoints"));
}

TEST_F(DashboardTest, TheStateRoutesTakeADecimalCheckpointIdAndNamesThatOnlySelect) {
  Dashboard d = make();
  const std::string id = "0123456789abcdef0123456789abcdef";
  const std::string chk = "/api/jobs/" + id + "/checkpoints/";
  EXPECT_FALSE(d.quick("GET", chk + "12/state"));
  EXPECT_FALSE(d.quick("GET", chk + "12/state/counts/reduce?limit=5"));
  EXPECT_FALSE(d.quick("GET", chk + "12/state/counts/a%20b%2Fc"));
  EXPECT_EQ(d.quick("GET", chk + "x/state")->status, 400);
  EXPECT_EQ(d.quick("GET", chk + "-1/state")->status, 400);
  EXPECT_EQ(d.quick("GET", chk + "12/state/counts/%zz")->status, 400);
  EXPECT_EQ(d.quick("GET", chk + "12/state/counts/%00")->status, 400);
  EXPECT_EQ(d.quick("GET", chk + "12/state/counts")->status, 404);
  EXPECT_EQ(d.quick("GET", chk + "12/stats")->status, 404);
  EXPECT_EQ(d.quick("GET", "/api/jobs/not.an.id/checkpoints/12/state")->status, 400);
  EXPECT_EQ(d.quick("POST", chk + "12/state")->status, 405);
  EXPECT_EQ(d.handle("GET", chk + "12/state", "").status, 404);  // no such job
  EXPECT_EQ(d.handle("GET", chk + "12/state/counts/reduce", "").status, 404);
}

TEST_F(DashboardTest, UnknownJobsAre404AndBodiesMayOnlyChooseTheFormat) {
  Dashboard d = make();
  const std::string id = "0123456789abcdef0123456789abcdef";
  auto r = d.handle("GET", "/api/jobs/" + id, "");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(d.handle("GET", "/api/jobs/" + id + "/checkpoints", "").status, 404);
  EXPECT_EQ(d.handle("POST", "/api/jobs/" + id + "/savepoints", "{\"targetDir\":\"/tmp/x\"}").status, 400);
  EXPECT_EQ(d.handle("POST", "/api/jobs/" + id + "/savepoints", "{\"format\":\"tar\"}").status, 400);
  EXPECT_EQ(d.handle("POST", "/api/jobs/" + id + "/savepoints", "not json").status, 400);
  EXPECT_EQ(d.handle("POST", "/api/jobs/" + id + "/savepoints", "{\"format\":\"native\"}").status, 404);
  EXPECT_FALSE(fs::exists("/tmp/x/_metadata"));
  auto list = d.handle("GET", "/api/jobs", "");
  EXPECT_EQ(list.status, 200);
  EXPECT_TRUE(contains(list.body, "\"jobs\":[]")) << list.body;
  EXPECT_TRUE(contains(list.body, "\"checkpointDir\":\"" + (dir / "ck").string() + "\"")) << list.body;
}

TEST_F(DashboardTest, AJobDirectoryWithoutACompleteCheckpointIsNotListedAndOtherNamesAreIgnored) {
  Dashboard d = make();
  const std::string id = "0123456789abcdef0123456789abcdef";
  fs::create_directories(dir / "ck" / id / "chk-1");  // never completed: no _metadata
  fs::create_directories(dir / "ck" / "not-a-job" / "chk-1");
  auto list = d.handle("GET", "/api/jobs", "");
  EXPECT_TRUE(contains(list.body, "\"jobs\":[]")) << list.body;
  EXPECT_EQ(d.handle("GET", "/api/jobs/" + id, "").status, 404);
  // A prefix that matches more than one known job is ambiguous.
  fs::create_directories(dir / "ck" / "0123456789abcdef0123456789abcdee");
  EXPECT_EQ(d.handle("GET", "/api/jobs/0123", "").status, 400);
}

TEST(DashboardRestoreCommand, QuotesOnlyWhatTheShellWouldSplit) {
  EXPECT_EQ(Dashboard::restoreCommand("/ck/0123/chk-7", "WordCount", "/p/libwordcount_jobs.so"),
            "jobhost run -s /ck/0123/chk-7 -c WordCount /p/libwordcount_jobs.so");
  EXPECT_EQ(Dashboard::restoreCommand("/my ck/it's/chk-7", "WordCount", "/p/lib.so"),
            "jobhost run -s '/my ck/it'\\''s/chk-7' -c WordCount /p/lib.so");
  EXPECT_EQ(Dashboard::restoreCommand("/ck/$(rm -rf ~)/chk-1", "A;B", "/p/x.so"),
            "jobhost run -s '/ck/$(rm -rf ~)/chk-1' -c 'A;B' /p/x.so");
}

}  // namespace
}  // namespace jobhost::host
