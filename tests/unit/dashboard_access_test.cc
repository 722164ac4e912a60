// Unit tests for host/ui/dashboard_access and dashboard_record: which Host, Origin and
// token a request to `jobhost ui` needs, the login exchange, and the runtime-directory
// record --print-url reads. tests/e2e/ui_test.cc sends the same through real sockets.
#include "ui/dashboard_access.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>

#include "ui/dashboard_record.h"
#include "../support/contains.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;

const std::string kToken(64, 'a');

DashboardAccess access(std::string address = "127.0.0.1", int port = 8081, std::vector<std::string> allowed = {},
                       std::string token = kToken) {
  return DashboardAccess({std::move(address), port, std::move(allowed), std::move(token)});
}

DashboardAccess::Request get(const std::string& target, std::vector<HttpHeader> headers) {
  return {"GET", target, std::move(headers)};
}

std::string headerOf(const HttpReply& r, const std::string& name) {
  for (const auto& [n, v] : r.headers)
    if (n == name) return v;
  return "";
}

TEST(NewDashboardToken, Has256RandomBitsAsHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string t = newDashboardToken();
    ASSERT_EQ(t.size(), 64u);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    EXPECT_TRUE(seen.insert(t).second) << "a token repeated: " << t;
  }
}

TEST(TokensEqual, ComparesWholeStrings) {
  EXPECT_TRUE(tokensEqual(kToken, kToken));
  EXPECT_FALSE(tokensEqual(kToken, kToken.substr(1)));
  EXPECT_FALSE(tokensEqual(kToken, kToken + "a"));
  EXPECT_FALSE(tokensEqual(kToken, std::string(63, 'a') + "b"));
  EXPECT_FALSE(tokensEqual(kToken, ""));
}

TEST(IsLoopbackAddress, AcceptsLiteralsAndLocalhostOnlyNeverAPrefix) {
  for (const char* a : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"}) EXPECT_TRUE(isLoopbackAddress(a)) << a;
  // The old check accepted any name starting with "127." (issue 13).
  for (const char* a : {"127.0.0.1.evil.test", "127.evil.test", "localhost.evil.test", "0.0.0.0", "::", "10.0.0.1",
                        "128.0.0.1", "", "[::2]", "::ffff:127.0.0.1x"})
    EXPECT_FALSE(isLoopbackAddress(a)) << a;
}

TEST(DashboardAccess, AcceptsExactlyTheServedHostNamesWithThePort) {
  auto a = access();
  for (const char* h : {"127.0.0.1:8081", "localhost:8081", "LocalHost:8081", "[::1]:8081"}) {
    auto r = a.check(get("/", {{"Host", h}}));
    EXPECT_FALSE(r) << h << ": " << r->body;
  }
  // DNS rebinding: a name that resolves to us but is not ours; a wrong or missing port.
  for (const char* h : {"127.0.0.1.evil.test:8081", "localhost.evil.test:8081", "evil.test:8081", "127.0.0.1",
                        "127.0.0.1:8082", "127.0.0.1:80810", "localhost", "127.0.0.2:8081", "[::1]", "::1:8081",
                        "127.0.0.1:8081.evil.test", " 127.0.0.1 :8081"}) {
    auto r = a.check(get("/api/jobs", {{"Host", h}, {"Authorization", "Bearer " + kToken}}));
    ASSERT_TRUE(r) << h;
    EXPECT_EQ(r->status, 403) << h;
    EXPECT_TRUE(contains(r->body, "--allowed-host")) << r->body;
  }
}

TEST(DashboardAccess, RefusesNoHostAndTwoHosts) {
  auto a = access();
  auto none = a.check(get("/", {}));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 400);
  EXPECT_TRUE(contains(none->body, "no Host header")) << none->body;
  EXPECT_EQ(a.check(get("/", {{"Host", ""}}))->status, 400);
  auto two = a.check(get("/", {{"Host", "127.0.0.1:8081"}, {"Host", "evil.test:8081"}}));
  ASSERT_TRUE(two);
  EXPECT_EQ(two->status, 400);
  EXPECT_TRUE(contains(two->body, "more than one Host")) << two->body;
  // kj joins a repeated Host header with ", ".
  EXPECT_EQ(a.check(get("/", {{"Host", "127.0.0.1:8081, 127.0.0.1:8081"}}))->status, 400);
}

TEST(DashboardAccess, AllowedHostsAndTheListenAddressAreAccepted) {
  auto a = access("0.0.0.0", 9000, {"dash.example.com", "proxy.example.com:443"});
  for (const char* h : {"0.0.0.0:9000", "dash.example.com:9000", "proxy.example.com:443", "127.0.0.1:9000"})
    EXPECT_FALSE(a.check(get("/", {{"Host", h}}))) << h;
  for (const char* h : {"dash.example.com", "proxy.example.com:9000", "dash.example.com.evil.test:9000"})
    EXPECT_EQ(a.check(get("/", {{"Host", h}}))->status, 403) << h;
  auto v6 = access("::1", 80);
  EXPECT_FALSE(v6.check(get("/", {{"Host", "[::1]"}})));  // port 80: browsers leave it out
  EXPECT_FALSE(v6.check(get("/", {{"Host", "[::1]:80"}})));
  EXPECT_EQ(v6.url(), "http://[::1]:80/?token=" + kToken);
}

TEST(DashboardAccess, PostNeedsTheServedOrigin) {
  auto a = access();
  auto post = [&](std::vector<HttpHeader> extra) {
    std::vector<HttpHeader> h = {{"Host", "127.0.0.1:8081"}, {"Authorization", "Bearer " + kToken}};
    h.insert(h.end(), extra.begin(), extra.end());
    return a.check({"POST", "/api/jobs/ab/cancel", h});
  };
  EXPECT_FALSE(post({{"Origin", "http://127.0.0.1:8081"}}));
  for (std::vector<HttpHeader> bad :
       {std::vector<HttpHeader>{}, {{"Origin", "http://evil.test"}}, {{"Origin", "http://127.0.0.1.evil.test:8081"}},
        {{"Origin", "http://localhost:8081"}},  // another origin than the Host this request names
        {{"Origin", "null"}}, {{"Origin", "http://127.0.0.1:8081"}, {"Origin", "http://evil.test"}}}) {
    auto r = post(bad);
    ASSERT_TRUE(r) << (bad.empty() ? "no Origin" : bad[0].value);
    EXPECT_EQ(r->status, 403) << r->body;
  }
}

TEST(DashboardAccess, ApiNeedsTheCookieOrTheBearerToken) {
  auto a = access();
  const HttpHeader host{"Host", "127.0.0.1:8081"};
  auto none = a.check(get("/api/jobs", {host}));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_TRUE(contains(none->contentType, "application/json"));
  EXPECT_TRUE(contains(none->body, "\"error\"")) << none->body;
  EXPECT_TRUE(contains(none->body, "--print-url")) << none->body;
  EXPECT_EQ(headerOf(*none, "WWW-Authenticate"), "Bearer realm=\"jobhost\"");
  for (std::vector<HttpHeader> wrong : {std::vector<HttpHeader>{{"Authorization", "Bearer " + std::string(64, 'b')}},
                                        {{"Authorization", "Basic " + kToken}},
                                        {{"Cookie", "jobhost_token_8081=" + std::string(64, 'b')}},
                                        {{"Cookie", "jobhost_token_8082=" + kToken}},  // another dashboard's
                                        {{"Cookie", "jobhost_token_8081=" + kToken.substr(1)}}}) {
    wrong.insert(wrong.begin(), host);
    auto r = a.check(get("/api/jobs", wrong));
    ASSERT_TRUE(r) << wrong[1].value;
    EXPECT_EQ(r->status, 401) << wrong[1].value;
  }
  EXPECT_TRUE(contains(a.check(get("/api/jobs", {host, {"Authorization", "Bearer x"}}))->body, "wrong token"));
  for (std::vector<HttpHeader> right : {std::vector<HttpHeader>{{"Authorization", "Bearer " + kToken}},
                                        {{"authorization", "bearer " + kToken}},
                                        {{"Cookie", "jobhost_token_8081=" + kToken}},
                                        {{"Cookie", "a=b; jobhost_token_8081=" + kToken + "; c=d"}}}) {
    right.insert(right.begin(), host);
    auto r = a.check(get("/api/jobs/abc/checkpoints", right));
    EXPECT_FALSE(r) << right[1].value << ": " << r->body;
  }
  // Not only /api: anything but the public page and its assets.
  for (const char* t : {"/api", "/API/jobs", "/favicon.ico", "/index.html/", "//api/jobs", "/./api/jobs"})
    EXPECT_EQ(a.check(get(t, {host}))->status, 401) << t;
  for (const char* t : {"/", "/index.html", "/app.js", "/app.css"}) EXPECT_FALSE(a.check(get(t, {host}))) << t;
}

TEST(DashboardAccess, TheTokenInTheUrlBecomesACookieAndARedirectWithoutIt) {
  auto a = access();
  const HttpHeader host{"Host", "localhost:8081"};
  auto r = a.check(get("/?token=" + kToken, {host}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 303);
  EXPECT_EQ(headerOf(*r, "Location"), "/");
  EXPECT_EQ(headerOf(*r, "Set-Cookie"), "jobhost_token_8081=" + kToken + "; HttpOnly; SameSite=Strict; Path=/");
  EXPECT_EQ(headerOf(*a.check(get("/index.html?x=1&token=" + kToken, {host})), "Location"), "/index.html");
  auto wrong = a.check(get("/?token=" + std::string(64, 'b'), {host}));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(headerOf(*wrong, "Set-Cookie"), "");
  // The token is not accepted in an API URL (it would end up in logs): use the header.
  EXPECT_EQ(a.check(get("/api/jobs?token=" + kToken, {host}))->status, 401);
}

TEST(DashboardAccess, NoAuthChecksHostAndOriginOnly) {
  auto a = access("127.0.0.1", 8081, {}, "");
  EXPECT_FALSE(a.authenticates());
  EXPECT_EQ(a.url(), "http://127.0.0.1:8081/");
  EXPECT_FALSE(a.check(get("/api/jobs", {{"Host", "127.0.0.1:8081"}})));
  EXPECT_EQ(a.check(get("/api/jobs", {{"Host", "127.0.0.1.evil.test:8081"}}))->status, 403);
  EXPECT_EQ(a.check({"POST", "/api/jobs/ab/cancel", {{"Host", "127.0.0.1:8081"}}})->status, 403);
}

TEST(AllowedHostProblem, NamesWhatIsWrong) {
  EXPECT_FALSE(allowedHostProblem("dash.example.com"));
  EXPECT_FALSE(allowedHostProblem("dash.example.com:443"));
  EXPECT_FALSE(allowedHostProblem("[fe80::1]:8081"));
  EXPECT_TRUE(contains(*allowedHostProblem("https://dash.example.com"), "URL"));
  EXPECT_TRUE(allowedHostProblem(""));
  EXPECT_TRUE(allowedHostProblem("a b"));
  EXPECT_TRUE(allowedHostProblem("a,b"));
}

class DashboardRecordTest : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    std::random_device rd;
    dir = fs::temp_directory_path() / ("jobhost-record-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

TEST_F(DashboardRecordTest, ARecordIsPrivateAndTellsARunningDashboardFromAKilledOne) {
  DashboardRecord mine{getpid(), processStartTicks(getpid()), 8081, "http://127.0.0.1:8081/?token=" + kToken, ""};
  ASSERT_GT(mine.startTicks, 0u);
  auto path = writeDashboardRecord(dir.string(), mine);
  ASSERT_TRUE(path.ok()) << path.status().message();
  struct stat st {};
  ASSERT_EQ(lstat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // The same pid with another start time: a reused pid, not the dashboard that wrote it.
  DashboardRecord reused = mine;
  reused.pid = getppid();
  reused.startTicks = 1;
  ASSERT_TRUE(writeDashboardRecord(dir.string(), reused).ok());
  fs::create_symlink("/etc/passwd", dir / "dashboard-1");
  DashboardRecords found = findDashboardRecords(dir.string());
  ASSERT_EQ(found.running.size(), 1u);
  EXPECT_EQ(found.running[0].url, mine.url);
  EXPECT_EQ(found.running[0].port, 8081);
  EXPECT_EQ(found.running[0].path, *path);
  ASSERT_EQ(found.stale.size(), 1u);
  EXPECT_EQ(found.stale[0].pid, getppid());
  ASSERT_EQ(found.problems.size(), 1u) << "the symlink is refused";
  EXPECT_TRUE(contains(found.problems[0], "dashboard-1")) << found.problems[0];
  EXPECT_EQ(processStartTicks(0), 0u);
}

}  // namespace
}  // namespace jobhost::host
