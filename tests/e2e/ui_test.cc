// End-to-end tests of `jobhost ui` (issue 9): the REST API through a real HTTP client (a
// raw HTTP/1.1 socket) against a real running job, the security rules (no path from a
// request is ever read, traversal attempts get 400/404, read-only refuses POSTs), and the
// page in headless Chromium.
//
// The browser test needs Debian's `chromium`; without it the test is skipped with a
// message (it fails instead when JOBHOST_REQUIRE_CHROMIUM is set). CI (.ci/run) installs
// it (`apt-get install -y chromium`) after the README's test command and runs the browser
// test again with JOBHOST_REQUIRE_CHROMIUM=1. The screenshot is kept in
// build/tests/artifacts/ui.png.
//
// Waits poll with generous deadlines (a loaded 2-core machine); nothing sleeps and hopes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <cstring>
#include <optional>
#include <set>

#include "cli_fixture.h"
#include "http_json.h"
#include "../support/contains.h"

using namespace e2e;

namespace {

/// The token of the dashboard on each port (from the URL it printed; see Ui::startUi).
std::map<int, std::string>& tokens() {
  static std::map<int, std::string> t;
  return t;
}

/// A request as a browser of the dashboard's own page sends it: Host 127.0.0.1:<port>,
/// the token (as a Bearer header) unless `extraHeaders` brings its own Authorization or
/// Cookie, and for a POST the page's Origin unless `extraHeaders` has one.
HttpResponse http(int port, const std::string& method, const std::string& target, const std::string& body = "",
                  const std::string& extraHeaders = "", std::chrono::seconds timeout = std::chrono::seconds(120)) {
  std::string auth;
  if (tokens().count(port) && extraHeaders.find("Authorization:") == std::string::npos &&
      extraHeaders.find("Cookie:") == std::string::npos)
    auth = "Authorization: Bearer " + tokens()[port] + "\r\n";
  std::string origin;
  if (method == "POST" && extraHeaders.find("Origin:") == std::string::npos)
    origin = "Origin: http://127.0.0.1:" + std::to_string(port) + "\r\n";
  return sendRaw(port,
                  method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                      "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + auth + origin +
                      extraHeaders + "\r\n" + body,
                  timeout);
}

/// The same without any credentials.
HttpResponse anonymous(int port, const std::string& method, const std::string& target, const std::string& extraHeaders = "") {
  return sendRaw(port, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                            "\r\nConnection: close\r\nContent-Length: 0\r\n" + extraHeaders + "\r\n");
}

/// The value of response header `name` (case-insensitive), or "".
std::string headerValue(const HttpResponse& r, const std::string& name) {
  std::string lower = r.headers, want = "\r\n" + name + ":";
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::transform(want.begin(), want.end(), want.begin(), [](unsigned char c) { return std::tolower(c); });
  auto pos = lower.find(want);
  if (pos == std::string::npos) return "";
  pos += want.size();
  auto end = r.headers.find("\r\n", pos);
  std::string v = r.headers.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  return v.substr(v.find_first_not_of(' ') == std::string::npos ? v.size() : v.find_first_not_of(' '));
}

const std::string kJson = "Content-Type: application/json\r\n";

class Ui : public Cli {
 protected:
  std::optional<std::string> oldXdg_;
  std::vector<std::unique_ptr<Process>> procs_;

  fs::path runtime() const { return tmp / "r"; }

  void SetUp() override {
    fs::create_directories(runtime());
    fs::permissions(runtime(), fs::perms::owner_all, fs::perm_options::replace);
    if (const char* x = std::getenv("XDG_RUNTIME_DIR")) oldXdg_ = x;
    setenv("XDG_RUNTIME_DIR", runtime().c_str(), 1);  // only this test's jobs are visible
  }
  void TearDown() override {
    for (auto& p : procs_)
      if (p->running()) p->signal(SIGKILL);
    procs_.clear();
    if (oldXdg_) setenv("XDG_RUNTIME_DIR", oldXdg_->c_str(), 1);
    else unsetenv("XDG_RUNTIME_DIR");
  }

  Process& launch(const std::vector<std::string>& args, const std::string& name) {
    procs_.push_back(std::make_unique<Process>(jobhost(args), tmp / (name + ".out"), tmp / (name + ".err")));
    return *procs_.back();
  }

  /// A slow word count (incremental rocksdb, checkpoints every 100 ms, `retained` kept)
  /// that runs for minutes unless stopped.
  Process& startJob(int retained = 2, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"run", "-c", "WordCountIncremental"};
    for (auto& f : ckFlags("100ms")) a.push_back(f);
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {"-D", "state.savepoints.dir=" + (tmp / "sp").string(), "-D", "state.checkpoints.num-retained=" + std::to_string(retained),
                       kPlugin, "--input", input(1000).string(), "--rate", "100", "--output-file", (tmp / "job-out.txt").string()});
    return launch(a, "job");
  }

  /// Starts `jobhost ui --port 0 ...` and returns its port once it prints its URL; the
  /// URL is kept in urls_ and its token in tokens().
  int startUi(std::vector<std::string> extra, const std::string& name = "ui") {
    std::vector<std::string> a = {"ui", "--port", "0", "--checkpoint-dir", ckdir().string()};
    a.insert(a.end(), extra.begin(), extra.end());
    Process& p = launch(a, name);
    const std::string prefix = "Dashboard: http://";
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < until && p.running()) {
      std::string out = readFile(tmp / (name + ".out"));
      auto pos = out.find(prefix);
      auto eol = pos == std::string::npos ? std::string::npos : out.find('\n', pos);
      if (eol != std::string::npos) {
        std::string url = out.substr(pos + 11, eol - pos - 11);
        auto colon = url.rfind(':', url.find('/', 7));
        int port = std::stoi(url.substr(colon + 1));
        urls_[port] = url;
        if (auto t = url.find("/?token="); t != std::string::npos) tokens()[port] = url.substr(t + 8);
        else tokens().erase(port);
        return port;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "jobhost ui did not print its address:\n" << readFile(tmp / (name + ".out")) << readFile(tmp / (name + ".err"));
    return -1;
  }
  std::map<int, std::string> urls_;

  /// Polls GET `target` until `pred` holds on the parsed answer (or the deadline).
  std::optional<Json> waitFor(int port, const std::string& target, const std::function<bool(const Json&)>& pred,
                              std::chrono::seconds timeout = std::chrono::seconds(90)) {
    auto until = std::chrono::steady_clock::now() + timeout;
    HttpResponse last;
    while (std::chrono::steady_clock::now() < until) {
      last = http(port, "GET", target);
      if (last.status == 200) {
        Json j = last.json();
        if (pred(j)) return j;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "GET " << target << " never matched; last: " << last.status << " " << last.error << "\n"
                  << last.body.substr(0, 2000) << "\njob stderr:\n"
                  << readFile(tmp / "job.err").substr(0, 4000);
    return std::nullopt;
  }

  /// The running job's id once /api/jobs lists it RUNNING.
  std::string waitForJob(int port) {
    std::string id;
    waitFor(port, "/api/jobs", [&](const Json& j) {
      for (const auto& job : j["jobs"].a)
        if (job["running"].b && job["status"].s == "RUNNING" && job["jobClass"].s == "WordCountIncremental") {
          id = job["id"].s;
          return true;
        }
      return false;
    });
    return id;
  }

  /// A restorable COMPLETED checkpoint from /api/jobs/<id>/checkpoints.
  std::optional<Json> waitForRestorableCheckpoint(int port, const std::string& id) {
    std::optional<Json> found;
    waitFor(port, "/api/jobs/" + id + "/checkpoints", [&](const Json& j) {
      for (const auto& c : j["checkpoints"].a)
        if (c["status"].s == "COMPLETED" && c["restorable"].b && c["kind"].s == "checkpoint") found = c;
      return found.has_value();
    });
    return found;
  }
};

TEST_F(Ui, RestApiListsTheRunningJobItsCheckpointsTakesASavepointAndRefusesTraversal) {
  Process& job = startJob();
  ASSERT_TRUE(waitForCheckpoint(job, 3)) << readFile(tmp / "job.err");
  const int port = startUi({});
  ASSERT_GT(port, 0);

  // GET /api/jobs lists the running job with its status.
  const std::string id = waitForJob(port);
  ASSERT_EQ(id.size(), 32u);
  {
    Json list = http(port, "GET", "/api/jobs").json();
    EXPECT_FALSE(list["readOnly"].b);
    EXPECT_EQ(list["checkpointDir"].s, ckdir().string());
    const Json* j = nullptr;
    for (const auto& x : list["jobs"].a)
      if (x["id"].s == id) j = &x;
    ASSERT_NE(j, nullptr);
    EXPECT_EQ((*j)["pluginPath"].s, fs::absolute(kPlugin).string());
    EXPECT_EQ((*j)["backend"].s, "rocksdb (incremental)");
    EXPECT_EQ((*j)["source"].s, "control");
    EXPECT_GT((*j)["startTimeMs"].n, 1.6e12);
    EXPECT_EQ((*j)["checkpointDir"].s, (ckdir() / id).string());
  }

  // GET /api/jobs/<prefix>: the status and the configuration in effect.
  {
    HttpResponse r = http(port, "GET", "/api/jobs/" + id.substr(0, 10));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_TRUE(contains(r.headers, "Content-Type: application/json")) << r.headers;
    Json d = r.json();
    EXPECT_EQ(d["job"]["id"].s, id);
    bool interval = false, backend = false;
    for (const auto& e : d["configuration"].a) {
      interval |= e["key"].s == "execution.checkpointing.interval" && e["value"].s == "100ms";
      backend |= e["key"].s == "state.backend.type" && e["value"].s == "rocksdb";
    }
    EXPECT_TRUE(interval && backend) << r.body.substr(0, 2000);
  }

  // GET /api/jobs/<id>/checkpoints: a COMPLETED checkpoint whose path `jobhost check`
  // accepts, with the exact restore command; incremental ones name their dependencies.
  std::optional<Json> chk = waitForRestorableCheckpoint(port, id);
  ASSERT_TRUE(chk);
  const std::string path = (*chk)["path"].s;
  EXPECT_EQ(path.rfind((ckdir() / id).string() + "/chk-", 0), 0u) << path;
  EXPECT_EQ((*chk)["restoreCommand"].s,
            "jobhost run -s " + path + " -c WordCountIncremental " + fs::absolute(kPlugin).string());
  EXPECT_EQ((*chk)["type"].s, "incremental");
  EXPECT_GT((*chk)["totalBytes"].n, 0);
  EXPECT_GE((*chk)["durationMs"].n, (*chk)["syncDurationMs"].n);
  // (`jobhost check` of this path comes once the job has ended: retention may delete it
  // any moment now.)
  {
    // With num-retained 2 and checkpoints every 100 ms, older ones are subsumed; the
    // history keeps them, and later incremental checkpoints depend on older ones.
    std::optional<Json> h = waitFor(port, "/api/jobs/" + id + "/checkpoints", [](const Json& j) {
      bool subsumed = false, depends = false;
      for (const auto& c : j["checkpoints"].a) {
        subsumed |= c["subsumed"].b && !c["restorable"].b && c["restoreCommand"].s.empty();
        depends |= !c["dependsOn"].a.empty() && c["dependencies"].a.size() == c["dependsOn"].a.size();
      }
      return subsumed && depends;
    });
    EXPECT_TRUE(h);
  }

  // POST savepoints: into the job's state.savepoints.dir; the body only picks the format.
  {
    HttpResponse r = http(port, "POST", "/api/jobs/" + id.substr(0, 8) + "/savepoints", "{\"format\":\"canonical\"}", kJson);
    ASSERT_EQ(r.status, 200) << r.body;
    std::string sp = r.json()["path"].s;
    EXPECT_EQ(sp.rfind((tmp / "sp" / ("savepoint-" + id.substr(0, 6) + "-")).string(), 0), 0u) << r.body;
    EXPECT_TRUE(fs::exists(fs::path(sp) / "_metadata")) << r.body;
    EXPECT_EQ(r.json()["restoreCommand"].s, "jobhost run -s " + sp + " -c WordCountIncremental " + fs::absolute(kPlugin).string());
    Result ck = cli({"check", "-s", sp, "-c", "WordCount", kPlugin});  // canonical: the heap backend restores it too
    EXPECT_EQ(ck.exitCode, 0) << ck.out << ck.err;
    // The savepoint appears in the history.
    EXPECT_TRUE(waitFor(port, "/api/jobs/" + id + "/checkpoints", [&](const Json& j) {
      for (const auto& c : j["checkpoints"].a)
        if (c["kind"].s == "savepoint" && c["path"].s == sp && c["status"].s == "COMPLETED" && c["restorable"].b) return true;
      return false;
    }));
  }
  // A body that names a directory is refused, and nothing is written there.
  {
    const fs::path evil = tmp / "evil";
    HttpResponse r = http(port, "POST", "/api/jobs/" + id + "/savepoints",
                          "{\"format\":\"canonical\",\"targetDir\":\"" + evil.string() + "\"}", kJson);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_FALSE(fs::exists(evil));
    EXPECT_EQ(http(port, "POST", "/api/jobs/" + id + "/savepoints", "{\"format\":\"zip\"}", kJson).status, 400);
    EXPECT_EQ(http(port, "POST", "/api/jobs/" + id + "/savepoints", "format=native",
                   "Content-Type: application/x-www-form-urlencoded\r\n").status, 415);
    EXPECT_EQ(http(port, "POST", "/api/jobs/" + id + "/savepoints", "{}", kJson + "Origin: http://evil.example\r\n").status, 403);
    EXPECT_EQ(http(port, "GET", "/api/jobs/" + id + "/savepoints").status, 405);
  }

  // Traversal attempts and bad ids: 400/404, never a file's content.
  for (const std::string& target :
       {std::string("/api/jobs/../../etc/passwd"), std::string("/api/jobs/%2e%2e/%2e%2e/etc/passwd"),
        std::string("/api/jobs/%2e%2e%2f%2e%2e%2fetc%2fpasswd"), std::string("/api/jobs/not-hex"),
        std::string("/api/jobs/..%2f..%2fetc%2fpasswd/checkpoints"), "/api/jobs/" + id + "/../../../../etc/passwd",
        "/api/jobs/" + id + "/checkpoints/../../../etc/passwd", std::string("/../../../../etc/passwd"),
        std::string("/app.js/../../../etc/passwd"), std::string("/etc/passwd"), std::string("//etc/passwd"),
        "/api/jobs/" + id + "0", std::string("/api/jobs/0123456789abcdef0123456789abcdef0"),
        std::string("/api/jobs/ffffffffffffffffffffffffffffffff")}) {
    HttpResponse r = http(port, "GET", target);
    EXPECT_TRUE(r.status == 400 || r.status == 404) << target << " -> " << r.status << " " << r.error;
    EXPECT_FALSE(contains(r.body, "root:")) << target;
  }
  EXPECT_EQ(http(port, "GET", "/api/jobs/not.an.id").status, 400);
  EXPECT_EQ(http(port, "GET", "/api/jobs/not-hex").status, 404);  // a well-formed --job-id NAME, unknown
  EXPECT_EQ(http(port, "GET", "/api/jobs/ffffffffffffffffffffffffffffffff").status, 404);

  // The page and its embedded script.
  {
    HttpResponse page = http(port, "GET", "/");
    ASSERT_EQ(page.status, 200);
    EXPECT_TRUE(contains(page.headers, "text/html")) << page.headers;
    EXPECT_TRUE(contains(page.body, "<script src=\"/app.js\"></script>")) << page.body;
    EXPECT_TRUE(contains(page.headers, "Content-Security-Policy:")) << page.headers;
    HttpResponse js = http(port, "GET", "/app.js");
    ASSERT_EQ(js.status, 200);
    EXPECT_TRUE(contains(js.headers, "text/javascript")) << js.headers;
    EXPECT_TRUE(contains(js.body, "data-restore-command")) << js.body.substr(0, 300);
    EXPECT_TRUE(contains(js.body, "/api/jobs")) << js.body.substr(0, 300);
    EXPECT_EQ(http(port, "GET", "/app.css").status, 200);
    EXPECT_EQ(http(port, "GET", "/favicon.ico").status, 404);
  }

  // Once the job has ended, it is still listed (from its checkpoint directory) with a
  // restorable checkpoint.
  job.signal(SIGTERM);
  Result ended = job.wait(std::chrono::seconds(120));
  EXPECT_EQ(ended.exitCode, 130) << ended.err;
  std::optional<Json> after = waitFor(port, "/api/jobs", [&](const Json& j) {
    for (const auto& x : j["jobs"].a)
      if (x["id"].s == id) return !x["running"].b && x["source"].s == "disk";
    return false;
  });
  ASSERT_TRUE(after);
  std::optional<Json> finalChk = waitForRestorableCheckpoint(port, id);
  ASSERT_TRUE(finalChk);
  Result check2 = cli({"check", "-s", (*finalChk)["path"].s, "-c", "WordCountIncremental", kPlugin});
  EXPECT_EQ(check2.exitCode, 0) << check2.out << check2.err;
  EXPECT_EQ(http(port, "POST", "/api/jobs/" + id + "/savepoints", "{}", kJson).status, 409);
  EXPECT_EQ(http(port, "POST", "/api/jobs/" + id + "/cancel", "{}", kJson).status, 409);
}

TEST_F(Ui, ReadOnlyRefusesSavepointAndCancel) {
  Process& job = startJob();
  ASSERT_TRUE(waitForCheckpoint(job, 1)) << readFile(tmp / "job.err");
  const int ro = startUi({"--read-only"}, "ui-ro");
  const int roConfig = startUi({"-D", "ui.read-only=true"}, "ui-ro-config");
  ASSERT_GT(ro, 0);
  ASSERT_GT(roConfig, 0);
  const std::string id = waitForJob(ro);
  ASSERT_EQ(id.size(), 32u);
  for (int port : {ro, roConfig}) {
    EXPECT_TRUE(http(port, "GET", "/api/jobs").json()["readOnly"].b);
    HttpResponse sp = http(port, "POST", "/api/jobs/" + id + "/savepoints", "{}", kJson);
    EXPECT_EQ(sp.status, 403) << sp.body;
    EXPECT_TRUE(contains(sp.body, "read-only")) << sp.body;
    EXPECT_EQ(http(port, "POST", "/api/jobs/" + id + "/cancel", "{}", kJson).status, 403);
    EXPECT_EQ(http(port, "GET", "/api/jobs/" + id + "/checkpoints").status, 200);
  }
  EXPECT_FALSE(fs::exists(tmp / "sp"));
  EXPECT_TRUE(job.running());  // not cancelled

  // The writable dashboard cancels it.
  const int rw = startUi({}, "ui-rw");
  HttpResponse c = http(rw, "POST", "/api/jobs/" + id + "/cancel", "{}", kJson);
  EXPECT_EQ(c.status, 200) << c.body;
  Result r = job.wait(std::chrono::seconds(120));
  EXPECT_EQ(r.exitCode, 0) << r.err;
}

/// The pid of a direct child of `parent` (the job's worker process), or 0.
pid_t childOf(pid_t parent) {
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::string stat = readFile(it->path() / "stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string st;
    long ppid = 0;
    rest >> st >> ppid;
    if (ppid == parent && st != "Z") return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

TEST_F(Ui, TheHistorySurvivesAWorkerCrashAndTheJobShowsItsRestartAndFailure) {
  Process& job = startJob(2, {"-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=5",
                              "-D", "restart-strategy.fixed-delay.delay=200ms"});
  ASSERT_TRUE(waitForCheckpoint(job, 2)) << readFile(tmp / "job.err");
  const int port = startUi({});
  ASSERT_GT(port, 0);
  const std::string id = waitForJob(port);
  ASSERT_EQ(id.size(), 32u);
  ASSERT_TRUE(waitForRestorableCheckpoint(port, id));
  Json before = http(port, "GET", "/api/jobs/" + id + "/checkpoints").json();
  ASSERT_FALSE(before["checkpoints"].a.empty());
  const double firstId = before["checkpoints"].a.front()["id"].n;

  // kill -9 the worker: a task failure; the supervisor restarts it.
  pid_t worker = 0;
  for (int i = 0; i < 500 && !worker; ++i, std::this_thread::sleep_for(std::chrono::milliseconds(10))) worker = childOf(job.pid());
  ASSERT_GT(worker, 0);
  const double killedAtMs = static_cast<double>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  ASSERT_EQ(kill(worker, SIGKILL), 0);

  // The job row: restarted once, the failure and its cause, running again.
  std::optional<Json> list = waitFor(port, "/api/jobs", [&](const Json& j) {
    for (const auto& x : j["jobs"].a)
      if (x["id"].s == id)
        return x["restarts"].n == 1 && x["status"].s == "RUNNING" && contains(x["lastFailure"].s, "SIGKILL") &&
               x["lastFailureTimeMs"].n >= killedAtMs - 1000;
    return false;
  });
  ASSERT_TRUE(list);
  // The history spans both attempts: what the first completed is still there (unless 200
  // newer records pushed it out), a checkpoint the dead worker left in progress became
  // FAILED, and the new attempt completes checkpoints of its own.
  std::optional<Json> after = waitFor(port, "/api/jobs/" + id + "/checkpoints", [&](const Json& j) {
    bool newOne = false;
    for (const auto& c : j["checkpoints"].a)
      newOne |= c["status"].s == "COMPLETED" && c["triggerTimeMs"].n > killedAtMs;
    return newOne;
  });
  ASSERT_TRUE(after);
  const auto& records = (*after)["checkpoints"].a;
  if (records.size() < 200) {
    EXPECT_EQ(records.front()["id"].n, firstId);
  }
  std::set<double> ids;
  for (const auto& c : records) {
    EXPECT_FALSE(c["status"].s == "IN_PROGRESS" && c["triggerTimeMs"].n < killedAtMs)
        << "checkpoint " << c["id"].n << " of the killed worker is still IN_PROGRESS";
    if (c["status"].s == "FAILED" && c["triggerTimeMs"].n < killedAtMs) {
      EXPECT_TRUE(contains(c["failureReason"].s, "attempt ended")) << c["failureReason"].s;
    }
    EXPECT_TRUE(ids.insert(c["id"].n).second) << "checkpoint id " << c["id"].n << " appears twice";
  }
  job.signal(SIGTERM);
  job.wait(std::chrono::seconds(120));
}

TEST_F(Ui, TheApiNeedsTheTokenAndThePrintedUrlLogsIn) {
  const int port = startUi({});
  ASSERT_GT(port, 0);
  ASSERT_EQ(tokens().count(port), 1u) << urls_[port];
  const std::string token = tokens()[port];
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(urls_[port], "http://127.0.0.1:" + std::to_string(port) + "/?token=" + token);

  // The record --print-url reads: in the 0700 runtime directory, 0600, with the URL.
  const fs::path record = runtime() / "jobhost" / ("dashboard-" + std::to_string(procs_.back()->pid()));
  struct stat st {};
  ASSERT_EQ(lstat(record.c_str(), &st), 0) << record;
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(lstat((runtime() / "jobhost").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(contains(readFile(record), token));
  Result printed = cli({"ui", "--print-url"});
  EXPECT_EQ(printed.exitCode, 0) << printed.err;
  EXPECT_EQ(printed.out, urls_[port] + "\n");

  // Without a token, with a wrong one, with the right one.
  HttpResponse none = anonymous(port, "GET", "/api/jobs");
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_TRUE(contains(none.headers, "application/json")) << none.headers;
  EXPECT_TRUE(contains(none.json()["error"].s, "jobhost ui --print-url")) << none.body;
  EXPECT_EQ(anonymous(port, "GET", "/api/jobs/0123/checkpoints").status, 401);
  EXPECT_EQ(http(port, "GET", "/api/jobs", "", "Authorization: Bearer " + std::string(64, '0') + "\r\n").status, 401);
  EXPECT_EQ(http(port, "GET", "/api/jobs", "", "Cookie: jobhost_token_" + std::to_string(port) + "=" + token.substr(1) + "\r\n").status, 401);
  EXPECT_EQ(http(port, "GET", "/api/jobs?token=" + token, "", "Cookie: none=1\r\n").status, 401);
  EXPECT_EQ(http(port, "GET", "/api/jobs").status, 200);  // Bearer
  // A cancel without the token changes nothing: refused before the job is looked up.
  EXPECT_EQ(anonymous(port, "POST", "/api/jobs/0123/cancel", kJson + "Origin: http://127.0.0.1:" + std::to_string(port) + "\r\n").status, 401);

  // The printed URL: a cookie for this port (HttpOnly, SameSite=Strict) and a redirect to
  // the page without the token; the cookie opens the API.
  HttpResponse login = anonymous(port, "GET", "/?token=" + token);
  EXPECT_EQ(login.status, 303) << login.body;
  EXPECT_EQ(headerValue(login, "Location"), "/");
  const std::string cookie = headerValue(login, "Set-Cookie");
  EXPECT_EQ(cookie, "jobhost_token_" + std::to_string(port) + "=" + token + "; HttpOnly; SameSite=Strict; Path=/");
  const std::string jar = "Cookie: " + cookie.substr(0, cookie.find(';')) + "\r\n";
  EXPECT_EQ(anonymous(port, "GET", "/api/jobs", jar).status, 200);
  HttpResponse wrong = anonymous(port, "GET", "/?token=" + std::string(64, 'f'));
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(headerValue(wrong, "Set-Cookie"), "");
  // The page itself needs no token (it shows how to log in); it holds no job data.
  EXPECT_EQ(anonymous(port, "GET", "/").status, 200);
  EXPECT_TRUE(contains(anonymous(port, "GET", "/").body, "--print-url"));

  // curl, as the README shows it.
  Result viaCurl = run({"/bin/sh", "-c", "command -v curl >/dev/null || exit 77; curl -s -o /dev/null -w '%{http_code}' -H "
                                         "'Authorization: Bearer " + token + "' http://127.0.0.1:" + std::to_string(port) +
                                         "/api/jobs"},
                       tmp.path, std::chrono::seconds(60));
  if (viaCurl.exitCode != 77) {
    EXPECT_EQ(viaCurl.out, "200") << viaCurl.err;
  }

  // A dashboard killed without cleaning up is not a running one.
  procs_.back()->signal(SIGKILL);
  procs_.back()->wait(std::chrono::seconds(60));
  Result gone = cli({"ui", "--print-url"});
  EXPECT_EQ(gone.exitCode, 2) << gone.out;
  EXPECT_EQ(gone.out, "");
  EXPECT_TRUE(contains(gone.err, "no dashboard of yours is running")) << gone.err;
  EXPECT_TRUE(contains(gone.err, "port " + std::to_string(port))) << gone.err;
  EXPECT_FALSE(fs::exists(record));
  Result nothing = cli({"ui", "--print-url"});
  EXPECT_EQ(nothing.exitCode, 2);
  EXPECT_TRUE(contains(nothing.err, "start one with `jobhost ui`")) << nothing.err;

  // A dashboard stopped cleanly removes its record.
  const int second = startUi({}, "ui2");
  ASSERT_GT(second, 0);
  const fs::path record2 = runtime() / "jobhost" / ("dashboard-" + std::to_string(procs_.back()->pid()));
  EXPECT_TRUE(fs::exists(record2));
  procs_.back()->signal(SIGTERM);
  EXPECT_EQ(procs_.back()->wait(std::chrono::seconds(60)).exitCode, 130);
  EXPECT_FALSE(fs::exists(record2));
}

TEST_F(Ui, RebindingHostNamesAndCrossOriginPostsAreRefused) {
  Process& job = startJob();
  ASSERT_TRUE(waitForCheckpoint(job, 1)) << readFile(tmp / "job.err");
  const int port = startUi({});
  ASSERT_GT(port, 0);
  const std::string id = waitForJob(port);
  ASSERT_EQ(id.size(), 32u);
  const std::string p = std::to_string(port);
  const std::string auth = "Authorization: Bearer " + tokens()[port] + "\r\n";
  auto raw = [&](const std::string& method, const std::string& hostLines, const std::string& extra = "") {
    return sendRaw(port, method + " /api/jobs/" + id + (method == "POST" ? "/cancel" : "") + " HTTP/1.1\r\n" + hostLines +
                              "Connection: close\r\nContent-Length: 2\r\n" + auth + extra + "\r\n{}");
  };
  // Names a rebinding page would send (its own domain, resolving to 127.0.0.1), none, two.
  for (const std::string& host : {"127.0.0.1.evil.test:" + p, "localhost.evil.test:" + p, "evil.test:" + p,
                                  "127.0.0.1:" + std::to_string(port + 1)}) {
    HttpResponse r = raw("GET", "Host: " + host + "\r\n");
    EXPECT_EQ(r.status, 403) << host << ": " << r.body;
    EXPECT_FALSE(contains(r.body, id)) << host;
    EXPECT_TRUE(contains(r.json()["error"].s, "--allowed-host")) << r.body;
  }
  HttpResponse noHost = raw("GET", "");
  EXPECT_EQ(noHost.status, 400) << noHost.body;
  EXPECT_TRUE(contains(noHost.body, "no Host header")) << noHost.body;
  HttpResponse twoHosts = raw("GET", "Host: 127.0.0.1:" + p + "\r\nHost: evil.test:" + p + "\r\n");
  EXPECT_EQ(twoHosts.status, 400) << twoHosts.body;
  EXPECT_TRUE(contains(twoHosts.body, "more than one Host")) << twoHosts.body;
  EXPECT_EQ(raw("GET", "Host: localhost:" + p + "\r\n").status, 200);
  EXPECT_EQ(raw("GET", "Host: [::1]:" + p + "\r\n").status, 200);

  // Cross-origin POSTs, token or not: nothing happens to the job.
  for (const std::string& extra :
       {kJson + "Origin: http://evil.test\r\n", kJson + "Origin: http://127.0.0.1.evil.test:" + p + "\r\n", kJson,
        kJson + "Origin: null\r\n", kJson + "Origin: http://localhost:" + p + "\r\n"}) {
    HttpResponse r = raw("POST", "Host: 127.0.0.1:" + p + "\r\n", extra);
    EXPECT_EQ(r.status, 403) << extra << r.body;
  }
  EXPECT_EQ(raw("POST", "Host: 127.0.0.1.evil.test:" + p + "\r\n", kJson + "Origin: http://127.0.0.1.evil.test:" + p + "\r\n").status,
            403);
  EXPECT_TRUE(job.running());
  EXPECT_EQ(http(port, "GET", "/api/jobs/" + id).json()["job"]["status"].s, "RUNNING");

  // The page's own origin cancels it.
  HttpResponse ok = raw("POST", "Host: localhost:" + p + "\r\n", kJson + "Origin: http://localhost:" + p + "\r\n");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(job.wait(std::chrono::seconds(120)).exitCode, 0);
}

TEST_F(Ui, NoAuthOnlyOnLoopbackAndAnyOtherAddressNeedsTheToken) {
  Result refused = cli({"ui", "--port", "0", "--no-auth", "--address", "0.0.0.0"});
  EXPECT_EQ(refused.exitCode, 2) << refused.out;
  EXPECT_TRUE(contains(refused.err, "--no-auth is allowed only with a loopback --address")) << refused.err;
  EXPECT_EQ(refused.out, "");
  Result badHost = cli({"ui", "--port", "0", "--allowed-host", "https://dash.example.com"});
  EXPECT_EQ(badHost.exitCode, 2);
  EXPECT_TRUE(contains(badHost.err, "--allowed-host 'https://dash.example.com'")) << badHost.err;

  const int open = startUi({"--no-auth"}, "ui-open");
  ASSERT_GT(open, 0);
  EXPECT_EQ(urls_[open], "http://127.0.0.1:" + std::to_string(open) + "/");
  EXPECT_EQ(anonymous(open, "GET", "/api/jobs").status, 200);
  EXPECT_TRUE(contains(readFile(tmp / "ui-open.err"), "NO AUTHENTICATION")) << readFile(tmp / "ui-open.err");
  EXPECT_EQ(sendRaw(open, "GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1.evil.test:" + std::to_string(open) +
                               "\r\nConnection: close\r\n\r\n").status,
            403);

  const int wide = startUi({"--address", "0.0.0.0", "--allowed-host", "dash.example.com"}, "ui-wide");
  ASSERT_GT(wide, 0);
  EXPECT_TRUE(contains(readFile(tmp / "ui-wide.err"), "plain HTTP")) << readFile(tmp / "ui-wide.err");
  EXPECT_EQ(anonymous(wide, "GET", "/api/jobs").status, 401);
  EXPECT_EQ(http(wide, "GET", "/api/jobs").status, 200);
  const std::string auth = "Authorization: Bearer " + tokens()[wide] + "\r\n";
  EXPECT_EQ(sendRaw(wide, "GET /api/jobs HTTP/1.1\r\nHost: dash.example.com:" + std::to_string(wide) +
                               "\r\nConnection: close\r\n" + auth + "\r\n").status,
            200);
  EXPECT_EQ(sendRaw(wide, "GET /api/jobs HTTP/1.1\r\nHost: other.example.com:" + std::to_string(wide) +
                               "\r\nConnection: close\r\n" + auth + "\r\n").status,
            403);

  // Two dashboards: --print-url lists both.
  Result both = cli({"ui", "--print-url"});
  EXPECT_EQ(both.exitCode, 0) << both.err;
  EXPECT_TRUE(contains(both.out, "PID")) << both.out;
  EXPECT_TRUE(contains(both.out, urls_[open])) << both.out;
  EXPECT_TRUE(contains(both.out, urls_[wide])) << both.out;
}

/// The absolute path of `tool` (Process runs argv[0] as it is), or "".
std::string toolPath(const std::string& tool, const fs::path& dir) {
  Result r = run({"/bin/sh", "-c", "command -v " + tool}, dir, std::chrono::seconds(10));
  return r.exitCode == 0 ? r.out.substr(0, r.out.find('\n')) : "";
}

TEST_F(Ui, AnotherLocalUserCannotUseTheDashboardWithoutTheToken) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a second local user with useradd (running as uid " << geteuid() << ")";
  const std::string useradd = toolPath("useradd", tmp.path), userdel = toolPath("userdel", tmp.path),
                    runuser = toolPath("runuser", tmp.path);
  if (useradd.empty() || userdel.empty() || runuser.empty())
    GTEST_SKIP() << "useradd, userdel or runuser is not installed (Debian: passwd, util-linux)";
  const std::string user = "jh" + std::to_string(getpid());
  Result added = run({useradd, "-M", "-N", "-s", "/bin/bash", user}, tmp.path, std::chrono::seconds(60));
  ASSERT_EQ(added.exitCode, 0) << added.err;
  struct Remove {
    std::string userdel, user;
    fs::path dir;
    ~Remove() { run({userdel, user}, dir, std::chrono::seconds(60)); }
  } remove{userdel, user, tmp.path};
  /// Runs `command` (a bash script) as the other user.
  auto runAs = [&](const std::string& command) {
    return run({runuser, "-u", user, "--", "/bin/bash", "-c", command}, tmp.path, std::chrono::seconds(60));
  };

  const int port = startUi({});
  ASSERT_GT(port, 0);
  const fs::path record = runtime() / "jobhost" / ("dashboard-" + std::to_string(procs_.back()->pid()));
  ASSERT_TRUE(fs::exists(record));
  // The other user can reach the port, but not the token: the record is ours alone ...
  Result read = runAs("cat " + record.string());
  EXPECT_NE(read.exitCode, 0);
  EXPECT_FALSE(contains(read.out, tokens()[port]));
  // ... --print-url looks in their own runtime directory ...
  Result printed = runAs("XDG_RUNTIME_DIR=" + runtime().string() + " " + std::string(kJobhost) + " ui --print-url");
  EXPECT_EQ(printed.exitCode, 2) << printed.out << printed.err;
  EXPECT_FALSE(contains(printed.out, tokens()[port]));
  // ... and without the token the API answers 401.
  const std::string request = "printf 'GET /api/jobs HTTP/1.1\\r\\nHost: 127.0.0.1:" + std::to_string(port) +
                              "\\r\\nConnection: close\\r\\n\\r\\n' >&3";
  Result api = runAs("exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) + " && " + request + " && cat <&3");
  EXPECT_EQ(api.exitCode, 0) << api.err;
  EXPECT_EQ(api.out.rfind("HTTP/1.1 401", 0), 0u) << api.out;
  // (Their own runtime directory, which --print-url created.)
  Result uid = runAs("id -u");
  std::error_code ec;
  fs::remove_all("/tmp/jobhost-" + uid.out.substr(0, uid.out.find('\n')), ec);
}

// ---------------------------------------------------------------------------------------
// The page in a real browser.

std::optional<std::string> chromiumBinary() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    Result r = run({"/bin/sh", "-c", std::string("command -v ") + name}, fs::temp_directory_path(), std::chrono::seconds(10));
    std::string p = r.out.substr(0, r.out.find('\n'));
    if (r.exitCode == 0 && !p.empty()) return p;
  }
  return std::nullopt;
}

TEST_F(Ui, BrowserShowsTheJobAndTheRestoreCommandToCopy) {
  auto chromium = chromiumBinary();
  if (!chromium && std::getenv("JOBHOST_REQUIRE_CHROMIUM"))
    FAIL() << "chromium is not installed, and JOBHOST_REQUIRE_CHROMIUM is set (apt-get install -y chromium)";
  if (!chromium)
    GTEST_SKIP() << "chromium is not installed: the browser test is skipped (CI installs it: apt-get install -y "
                    "chromium; see .ci/run)";
  Process& job = startJob(/*retained=*/100000);  // every path the page shows stays valid
  ASSERT_TRUE(waitForCheckpoint(job, 2)) << readFile(tmp / "job.err");
  const int port = startUi({});
  ASSERT_GT(port, 0);
  const std::string id = waitForJob(port);
  ASSERT_EQ(id.size(), 32u);
  ASSERT_TRUE(waitForRestorableCheckpoint(port, id));

  // Log in as a user would: the URL `jobhost ui --print-url` prints (with the token); the
  // browser follows the redirect, keeps the cookie and the page's requests carry it.
  Result printed = cli({"ui", "--print-url"});
  ASSERT_EQ(printed.exitCode, 0) << printed.err;
  const std::string url = printed.out.substr(0, printed.out.find('\n'));
  ASSERT_EQ(url, urls_[port]);
  auto browser = [&](std::vector<std::string> extra, const std::string& name, const std::string& open) {
    std::vector<std::string> a = {*chromium,
                                  "--headless",
                                  "--no-sandbox",
                                  "--disable-gpu",
                                  "--disable-dev-shm-usage",
                                  "--disable-background-networking",
                                  "--disable-component-update",
                                  "--disable-sync",
                                  "--no-first-run",
                                  "--user-data-dir=" + (tmp / ("chromium-" + name)).string(),
                                  "--virtual-time-budget=5000"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back(open);
    return run(a, tmp.path, std::chrono::seconds(180));
  };

  // Without the token: the page says how to log in, and shows no job.
  {
    Result r = browser({"--dump-dom"}, "anonymous", "http://127.0.0.1:" + std::to_string(port) + "/");
    ASSERT_EQ(r.exitCode, 0) << r.err.substr(0, 4000);
    EXPECT_FALSE(contains(r.out, "data-job-id=\"" + id + "\"")) << r.out.substr(0, 4000);
    EXPECT_TRUE(contains(r.out, "<p id=\"login\" class=\"error\">")) << "the login hint is hidden: " << r.out.substr(0, 4000);
  }

  // The rendered DOM: the job row, and for a completed checkpoint the restore command in
  // the copy button's target (data-restore-command and the visible code element).
  std::string dom;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a loaded machine may need a second look
    Result r = browser({"--dump-dom"}, "dom-" + std::to_string(attempt), url);
    ASSERT_EQ(r.exitCode, 0) << r.err.substr(0, 4000);
    dom = r.out;
    if (contains(dom, "data-restore-command=\"jobhost run -s ")) break;
  }
  EXPECT_TRUE(contains(dom, "data-job-id=\"" + id + "\"")) << dom.substr(0, 4000);
  EXPECT_TRUE(contains(dom, "WordCountIncremental")) << dom.substr(0, 4000);
  const std::string prefix = "jobhost run -s " + (ckdir() / id).string() + "/chk-";
  EXPECT_TRUE(contains(dom, "data-restore-command=\"" + prefix)) << dom.substr(0, 8000);
  EXPECT_TRUE(contains(dom, " -c WordCountIncremental " + fs::absolute(kPlugin).string())) << dom.substr(0, 8000);
  EXPECT_TRUE(contains(dom, "class=\"copy\"")) << dom.substr(0, 8000);
  EXPECT_TRUE(contains(dom, "<svg")) << "no chart: " << dom.substr(0, 8000);
  EXPECT_TRUE(contains(dom, "id=\"chain-summary\"")) << dom.substr(0, 8000);
  EXPECT_TRUE(contains(dom, "id=\"state-load\"")) << "no keyed-state button: " << dom.substr(0, 8000);
  EXPECT_TRUE(contains(dom, "<p id=\"login\" class=\"error\" hidden=")) << "logged in, the hint is hidden: " << dom.substr(0, 4000);
  // The restore command the page shows is one `jobhost check` accepts.
  auto pos = dom.find("data-restore-command=\"" + prefix);
  if (pos != std::string::npos) {
    pos += std::string("data-restore-command=\"jobhost run -s ").size();
    std::string path = dom.substr(pos, dom.find(' ', pos) - pos);
    Result check = cli({"check", "-s", path, "-c", "WordCountIncremental", kPlugin});
    EXPECT_EQ(check.exitCode, 0) << check.out << check.err;
  }

  // A screenshot, kept as a test artifact.
  const fs::path shot = tmp / "ui.png";
  Result s = browser({"--screenshot=" + shot.string(), "--window-size=1280,900", "--hide-scrollbars"}, "shot", url);
  EXPECT_EQ(s.exitCode, 0) << s.err.substr(0, 4000);
  ASSERT_TRUE(fs::exists(shot)) << s.err.substr(0, 4000);
  EXPECT_GT(fs::file_size(shot), 10000u);
  std::error_code ec;
  fs::create_directories(JOBHOST_ARTIFACTS_DIR, ec);
  fs::copy_file(shot, fs::path(JOBHOST_ARTIFACTS_DIR) / "ui.png", fs::copy_options::overwrite_existing, ec);
  EXPECT_FALSE(ec) << ec.message();

  job.signal(SIGTERM);
  job.wait(std::chrono::seconds(120));
}

}  // namespace

namespace {

TEST_F(Ui, TheStateViewOfACheckpointShowsWhatJobhostStateShowsBehindTheToken) {
  Process& job = startJob(1000);
  ASSERT_TRUE(waitForCheckpoint(job, 2)) << readFile(tmp / "job.err");
  const int port = startUi({});
  ASSERT_GT(port, 0);
  const std::string id = waitForJob(port);
  ASSERT_EQ(id.size(), 32u);
  auto c = waitForRestorableCheckpoint(port, id);
  ASSERT_TRUE(c.has_value());
  const std::string n = std::to_string(static_cast<long>((*c)["id"].n));
  const std::string base = "/api/jobs/" + id + "/checkpoints/" + n + "/state";

  HttpResponse view = http(port, "GET", base);
  ASSERT_EQ(view.status, 200) << view.body;
  Json v = view.json();
  EXPECT_EQ(v["checkpointId"].n, (*c)["id"].n);
  ASSERT_EQ(v["operators"].a.size(), 1u) << view.body;
  const Json& op = v["operators"].a[0];
  EXPECT_EQ(op["uid"].s, "counts");
  ASSERT_EQ(op["states"].a.size(), 1u);
  const Json& st = op["states"].a[0];
  EXPECT_EQ(st["name"].s, "reduce");
  EXPECT_EQ(st["kind"].s, "ValueState");
  EXPECT_EQ(st["keyType"].s, "string");
  EXPECT_EQ(st["valueType"].s, "pair<string,i64>");
  EXPECT_GT(st["entries"].n, 5);
  // The same numbers and entries as the CLI's, which reads through the same code.
  const std::string path = v["path"].s;
  Result ls = cli({"state", "ls", path});
  ASSERT_EQ(ls.exitCode, 0) << ls.err;
  EXPECT_TRUE(contains(ls.out, "  " + std::to_string(static_cast<long>(st["entries"].n)) + "  ")) << ls.out;

  HttpResponse first = http(port, "GET", base + "/counts/reduce?limit=5");
  ASSERT_EQ(first.status, 200) << first.body;
  Json f = first.json();
  EXPECT_TRUE(f["more"].b);
  ASSERT_EQ(f["entries"].a.size(), 5u);
  Result dump = cli({"state", "dump", path, "--operator", "counts", "--limit", "5", "--format", "csv"});
  ASSERT_EQ(dump.exitCode, 0) << dump.err;
  auto csv = [](const std::string& s) {
    if (s.find_first_of(",\"") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  std::string got = "KEY,VALUE\r\n";
  for (const auto& e : f["entries"].a) {
    EXPECT_EQ(e["value"].s.rfind("(" + e["key"].s + ",", 0), 0u) << e["value"].s;
    got += csv(e["key"].s) + "," + csv(e["value"].s) + "\r\n";
  }
  EXPECT_EQ(got, dump.out);

  // The same authentication as the rest of the API; ids and names select, never paths.
  EXPECT_EQ(anonymous(port, "GET", base).status, 401);
  EXPECT_EQ(anonymous(port, "GET", base + "/counts/reduce").status, 401);
  EXPECT_EQ(http(port, "GET", "/api/jobs/" + id + "/checkpoints/x1/state").status, 400);
  EXPECT_EQ(http(port, "GET", "/api/jobs/" + id + "/checkpoints/99999999/state").status, 404);
  EXPECT_EQ(http(port, "GET", base + "/nope/reduce").status, 404);
  EXPECT_EQ(http(port, "GET", base + "/counts/nope").status, 404);
  EXPECT_EQ(http(port, "GET", base + "/%2e%2e/%2e%2e").status, 404);
  EXPECT_EQ(http(port, "GET", base + "/counts/%zz").status, 400);
  EXPECT_EQ(http(port, "POST", base, "{}", kJson).status, 405);
  EXPECT_TRUE(job.running());
}

}  // namespace
