// End-to-end tests of what runs jobhost unattended (issue 31, README "Running in
// production"): the health endpoint of `jobhost run --health-port` (probes and a
// Prometheus scrape, checked with Debian's promtool), `--log-format json` from the
// supervisor and its workers, SIGTERM as a stop with savepoint, and the Kubernetes
// manifests of packaging/kubernetes/ read with yaml-cpp and run as the binary would run
// them in the pod.
//
// promtool (Debian's `prometheus`) is optional here: without it the scrape is still
// checked, and the test says it skipped promtool (it fails instead when
// JOBHOST_REQUIRE_PROMTOOL=1, as .ci/run sets).
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <csignal>
#include <regex>
#include <set>

#include "cli_fixture.h"
#include "http_json.h"

using namespace e2e;

namespace {

const fs::path kManifests = JOBHOST_KUBERNETES_DIR;

/// The port of the health endpoint, from the supervisor's log line "health endpoint on
/// <address>:<port>: ..." (text or JSON); 0 until it is there.
int healthPort(const fs::path& errFile) {
  static const std::regex re("health endpoint on [^ ]*:([0-9]+):");
  std::smatch m;
  std::string err = readFile(errFile);
  return std::regex_search(err, m, re) ? std::stoi(m[1]) : 0;
}

int waitForHealthPort(Process& p, const fs::path& errFile) {
  for (int i = 0; i < 3000 && p.running(); ++i) {
    if (int port = healthPort(errFile)) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

/// Polls GET `target` until it answers `status` (or 30 s pass); the last answer.
HttpResponse waitForStatus(int port, const std::string& target, int status) {
  HttpResponse r;
  for (int i = 0; i < 300; ++i) {
    r = httpGet(port, target);
    if (r.status == status) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return r;
}

/// Samples of a Prometheus text exposition: "name{labels}" -> value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

/// The sum of every sample of metric `name` (any labels).
double sum(const std::map<std::string, double>& s, const std::string& name) {
  double total = 0;
  for (const auto& [key, value] : s)
    if (key == name || key.rfind(name + "{", 0) == 0) total += value;
  return total;
}

bool hasMetric(const std::map<std::string, double>& s, const std::string& name) {
  for (const auto& [key, value] : s)
    if (key == name || key.rfind(name + "{", 0) == 0) return true;
  return false;
}

bool commandExists(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

bool required(const char* variable) {
  const char* v = std::getenv(variable);
  return v && std::string(v) == "1";
}

class Production : public Cli {
 protected:
  /// WordCount at p=2 over a long throttled input, checkpoints every 200 ms, with `extra`
  /// flags before the plugin path.
  std::unique_ptr<Process> startJob(const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "-c", "WordCount", "-p", "2"};
    for (auto& f : ckFlags()) args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    // About 10 s of input: the tests stop it earlier (SIGTERM).
    args.insert(args.end(), {kPlugin, "--input", input(2000).string(), "--rate", "3000"});
    return std::make_unique<Process>(jobhost(args), tmp / (name + ".out"), tmp / (name + ".err"));
  }
};

// --- The health endpoint --------------------------------------------------------------

TEST_F(Production, HealthEndpointServesProbesAndMetricsThatPromtoolAcceptsAndThatMove) {
  auto job = startJob("health", {"--health-port", "0", "--health-address", "127.0.0.1"});
  const int port = waitForHealthPort(*job, tmp / "health.err");
  ASSERT_GT(port, 0) << readFile(tmp / "health.err");

  HttpResponse live = httpGet(port, "/healthz");
  EXPECT_EQ(live.status, 200) << live.error << live.body;
  HttpResponse ready = waitForStatus(port, "/readyz", 200);
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_EQ(httpGet(port, "/nothing-here").status, 404);
  EXPECT_EQ(sendRaw(port, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").status, 405);

  ASSERT_TRUE(waitForCheckpoint(*job, 2));
  HttpResponse first = httpGet(port, "/metrics");
  ASSERT_EQ(first.status, 200) << first.error;
  EXPECT_NE(first.headers.find("text/plain; version=0.0.4"), std::string::npos) << first.headers;
  const int completedBefore = static_cast<int>(sum(samples(first.body), "jobhost_job_number_of_completed_checkpoints_total"));
  ASSERT_TRUE(waitForCheckpoint(*job, completedBefore + 3));
  HttpResponse second = httpGet(port, "/metrics");
  ASSERT_EQ(second.status, 200) << second.error;
  auto a = samples(first.body), b = samples(second.body);

  // The counters move.
  EXPECT_GT(sum(b, "jobhost_task_num_records_in_total"), sum(a, "jobhost_task_num_records_in_total"));
  EXPECT_GT(sum(b, "jobhost_task_num_records_out_total"), sum(a, "jobhost_task_num_records_out_total"));
  EXPECT_GT(sum(b, "jobhost_job_number_of_completed_checkpoints_total"),
            sum(a, "jobhost_job_number_of_completed_checkpoints_total"));
  EXPECT_GT(sum(b, "jobhost_job_last_completed_checkpoint_id"), sum(a, "jobhost_job_last_completed_checkpoint_id"));
  // The rates cover the last 5 s of the worker's samples (two a second): poll until
  // the supervisor has two samples with records between them.
  HttpResponse third;
  for (int i = 0; i < 100; ++i) {
    third = httpGet(port, "/metrics");
    if (sum(samples(third.body), "jobhost_task_num_records_in_per_second") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(sum(samples(third.body), "jobhost_task_num_records_in_per_second"), 0) << third.body;
  EXPECT_GT(sum(samples(third.body), "jobhost_job_num_records_in_per_second"), 0) << third.body;
  // Both subtasks of the keyed task and the source task, with Flink's labels.
  int keyedSubtasks = 0;
  for (const auto& [key, value] : b)
    if (key.rfind("jobhost_task_num_records_in_total{", 0) == 0 && key.find("task_name=\"Keyed Aggregation") != std::string::npos)
      ++keyedSubtasks;
  EXPECT_EQ(keyedSubtasks, 2) << second.body;
  for (const char* m : {"jobhost_task_busy_time_seconds_per_second", "jobhost_task_back_pressured_time_seconds_per_second",
                        "jobhost_task_idle_time_seconds_per_second", "jobhost_job_last_checkpoint_duration_seconds",
                        "jobhost_job_last_checkpoint_size_bytes", "jobhost_job_number_of_failed_checkpoints_total",
                        "jobhost_job_number_of_in_progress_checkpoints", "jobhost_job_num_restarts",
                        "jobhost_job_last_checkpoint_restore_timestamp_seconds",
                        "jobhost_job_checkpoint_store_unavailable_since_timestamp_seconds", "jobhost_operator_state_entries"})
    EXPECT_TRUE(hasMetric(b, m)) << m << " missing from\n" << second.body;
  for (const auto& [key, value] : b)
    if (key.rfind("jobhost_task_busy_time_seconds_per_second", 0) == 0) {
      EXPECT_GE(value, 0.0) << key;
      EXPECT_LE(value, 1.0) << key;
    }
  EXPECT_GT(sum(b, "jobhost_operator_state_entries"), 0);
  EXPECT_EQ(sum(b, "jobhost_job_running"), 1);

  job->signal(SIGTERM);
  Result r = job->wait();
  EXPECT_EQ(r.exitCode, 130) << r.err;

  const fs::path scrape = tmp / "scrape.txt";
  writeFile(scrape, second.body);
  if (!commandExists("promtool")) {
    if (required("JOBHOST_REQUIRE_PROMTOOL")) FAIL() << "promtool not found (JOBHOST_REQUIRE_PROMTOOL=1): apt-get install prometheus";
    GTEST_SKIP() << "promtool not found (Debian: apt-get install prometheus): the scrape was checked, promtool was not run";
  }
  Result lint = run({"/bin/sh", "-c", "promtool check metrics < " + scrape.string()}, tmp.path);
  EXPECT_EQ(lint.exitCode, 0) << "promtool check metrics:\n" << lint.out << lint.err << "\non\n" << second.body;
}

TEST_F(Production, ReadyzFailsOnceTheNewestCheckpointIsOlderThanTheConfiguredAge) {
  // Checkpoints every hour: after the attempt's start, none comes within 1 s.
  std::vector<std::string> args = {"run", "-c", "WordCount", "--health-port", "0", "--health-address", "127.0.0.1",
                                   "-D", "state.checkpoints.dir=" + ckdir().string(), "-D",
                                   "execution.checkpointing.interval=1h", "-D", "health.readiness.max-checkpoint-age=1s",
                                   kPlugin, "--input", input(400).string(), "--rate", "500"};
  Process job(jobhost(args), tmp / "ready.out", tmp / "ready.err");
  const int port = waitForHealthPort(job, tmp / "ready.err");
  ASSERT_GT(port, 0) << readFile(tmp / "ready.err");
  EXPECT_EQ(waitForStatus(port, "/readyz", 200).status, 200);
  HttpResponse stale = waitForStatus(port, "/readyz", 503);
  EXPECT_EQ(stale.status, 503);
  EXPECT_NE(stale.body.find("no checkpoint completed"), std::string::npos) << stale.body;
  EXPECT_NE(stale.body.find("health.readiness.max-checkpoint-age"), std::string::npos) << stale.body;
  EXPECT_EQ(httpGet(port, "/healthz").status, 200);  // alive all the same: no restart for this
  job.signal(SIGTERM);
  EXPECT_EQ(job.wait().exitCode, 130);
}

TEST_F(Production, AHealthPortInUseIsOneErrorWithExitCode2) {
  int port = 0;
  int fd = listenOnLoopback(&port);
  std::vector<std::string> args = {"run", "-c", "WordCount", "--health-port", std::to_string(port), "--health-address",
                                   "127.0.0.1"};
  for (auto& f : ckFlags("1s")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", kWords});
  Result r = cli(args);
  close(fd);
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("--health-port"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  EXPECT_TRUE(jobDirs().empty()) << "the refused run left its empty job directory " << jobDirs().front();
}

// --- JSON logs ------------------------------------------------------------------------

TEST_F(Production, JsonLogsAreOneObjectPerLineFromTheSupervisorAndEveryAttemptsWorker) {
  // The word "error" fails the task; one restart, which restores the checkpoint taken
  // before it, then the job fails for good.
  std::string text = readFile(kWords);
  std::string all;
  for (int i = 0; i < 60; ++i) all += text;
  all += "error\n";
  writeFile(tmp / "with-error.txt", all);
  std::vector<std::string> args = {"run", "--log-format", "json", "--job-id", "json-logs", "-c", "WordCount",
                                   "-D", "restart-strategy.type=fixed-delay", "-D",
                                   "restart-strategy.fixed-delay.attempts=1", "-D", "restart-strategy.fixed-delay.delay=10ms"};
  for (auto& f : ckFlags("50ms")) args.push_back(f);
  args.insert(args.end(), {kPlugin, "--input", (tmp / "with-error.txt").string(), "--rate", "4000"});
  Result r = cli(args);
  EXPECT_EQ(r.exitCode, 1) << r.err;

  std::istringstream in(r.err);
  std::string line;
  int lines = 0;
  std::set<std::string> processes;
  std::set<int> workerAttempts;
  bool failureLogged = false;
  while (std::getline(in, line)) {
    ++lines;
    auto parsed = JsonReader(line).parse();
    ASSERT_TRUE(parsed && parsed->type == Json::kObject) << "not a JSON object: " << line;
    const Json& j = *parsed;
    EXPECT_EQ(j["time"].type, Json::kString) << line;
    EXPECT_TRUE(std::regex_match(j["time"].s, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"))) << line;
    EXPECT_TRUE(j["level"].s == "info" || j["level"].s == "warning" || j["level"].s == "error" || j["level"].s == "debug")
        << line;
    EXPECT_EQ(j["job_id"].s, "json-logs") << line;
    EXPECT_EQ(j["message"].type, Json::kString) << line;
    EXPECT_EQ(j["fields"].type, Json::kObject) << line;
    const std::string process = j["fields"]["process"].s;
    processes.insert(process);
    if (process == "worker") {
      ASSERT_EQ(j["attempt"].type, Json::kNumber) << line;
      workerAttempts.insert(static_cast<int>(j["attempt"].n));
    }
    if (j["message"].s.find("attempt 1 failed") != std::string::npos) failureLogged = true;
  }
  EXPECT_GT(lines, 3);
  EXPECT_EQ(processes, (std::set<std::string>{"supervisor", "worker"}));
  EXPECT_EQ(workerAttempts, (std::set<int>{1, 2})) << r.err;
  EXPECT_TRUE(failureLogged) << r.err;
}

// --- SIGTERM --------------------------------------------------------------------------

TEST_F(Production, SigtermStopsWithASavepointWhenConfigured) {
  const fs::path savepoints = tmp / "savepoints";
  auto job = startJob("sigterm", {"-D", "execution.stop-with-savepoint-on-sigterm=true", "-D",
                                  "state.savepoints.dir=" + savepoints.string()});
  ASSERT_TRUE(waitForCheckpoint(*job, 1)) << readFile(tmp / "sigterm.err");
  job->signal(SIGTERM);
  Result r = job->wait(std::chrono::seconds(60));
  EXPECT_EQ(r.exitCode, 130) << r.err;
  std::vector<fs::path> found;
  if (fs::exists(savepoints))
    for (const auto& e : fs::directory_iterator(savepoints))
      if (fs::exists(e.path() / "_metadata")) found.push_back(e.path());
  ASSERT_EQ(found.size(), 1u) << r.err;
  EXPECT_NE(r.err.find("stopped with savepoint " + found[0].string()), std::string::npos) << r.err;
  // It restores.
  Result check = cli({"check", "-s", found[0].string(), "-c", "WordCount", kPlugin, "--input", kWords});
  EXPECT_EQ(check.exitCode, 0) << check.out << check.err;
}

TEST_F(Production, StopWithSavepointOnSigtermWithoutASavepointDirectoryIsRefused) {
  Result r = cli({"run", "-c", "WordCount", "-D", "execution.stop-with-savepoint-on-sigterm=true", "-D",
                  "execution.checkpointing.interval=1s", kPlugin, "--input", kWords});
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("needs state.savepoints.dir"), std::string::npos) << r.err;
}

// --- Kubernetes -----------------------------------------------------------------------

/// Every object of every packaging/kubernetes/*.yaml, by kind.
std::multimap<std::string, YAML::Node> manifests() {
  std::multimap<std::string, YAML::Node> out;
  for (const auto& e : fs::directory_iterator(kManifests)) {
    if (e.path().extension() != ".yaml") continue;
    for (const YAML::Node& doc : YAML::LoadAllFromFile(e.path().string()))
      if (doc && doc["kind"]) out.emplace(doc["kind"].as<std::string>(), doc);
  }
  return out;
}

const YAML::Node* only(const std::multimap<std::string, YAML::Node>& all, const std::string& kind) {
  return all.count(kind) == 1 ? &all.find(kind)->second : nullptr;
}

/// A probe's port: a number, or the name of one of the container's ports.
int probePort(const YAML::Node& container, const YAML::Node& port) {
  if (port.IsScalar() && std::all_of(port.Scalar().begin(), port.Scalar().end(), ::isdigit)) return port.as<int>();
  for (const auto& p : container["ports"])
    if (p["name"] && p["name"].as<std::string>() == port.as<std::string>()) return p["containerPort"].as<int>();
  return -1;
}

TEST_F(Production, KubernetesManifestsProbeWhatTheBinaryServesWithTheFlagsItTakes) {
  auto all = manifests();
  const YAML::Node* set = only(all, "StatefulSet");
  const YAML::Node* configMap = only(all, "ConfigMap");
  const YAML::Node* secret = only(all, "Secret");
  ASSERT_TRUE(set && configMap && secret) << "expected one StatefulSet, ConfigMap and Secret in " << kManifests;
  const YAML::Node spec = (*set)["spec"];
  EXPECT_EQ(spec["replicas"].as<int>(), 1) << "two pods of one --job-id must never run";
  const YAML::Node pod = spec["template"]["spec"];
  const int grace = pod["terminationGracePeriodSeconds"].as<int>(0);
  EXPECT_GE(grace, 30) << "the savepoint on SIGTERM needs time";
  ASSERT_EQ(pod["containers"].size(), 1u);
  const YAML::Node c = pod["containers"][0];
  EXPECT_TRUE(pod["securityContext"]["runAsNonRoot"].as<bool>(false));
  // The checkpoints outlive the pod: a volume claim mounted at state.checkpoints.dir's parent.
  ASSERT_TRUE(spec["volumeClaimTemplates"] && spec["volumeClaimTemplates"].size() == 1);
  const std::string claim = spec["volumeClaimTemplates"][0]["metadata"]["name"].as<std::string>();
  const YAML::Node config = YAML::Load((*configMap)["data"]["config.yaml"].as<std::string>());
  const std::string checkpointDir = config["state.checkpoints.dir"].as<std::string>();
  bool checkpointsOnClaim = false, configMounted = false;
  for (const auto& m : c["volumeMounts"]) {
    const std::string path = m["mountPath"].as<std::string>();
    if (m["name"].as<std::string>() == claim && checkpointDir.rfind(path + "/", 0) == 0) checkpointsOnClaim = true;
    if (path == "/etc/jobhost") configMounted = true;
  }
  EXPECT_TRUE(checkpointsOnClaim) << "state.checkpoints.dir " << checkpointDir << " is not on the volume " << claim;
  EXPECT_TRUE(configMounted);
  // The Secret reaches the container's environment, with the variables jobhost reads.
  bool secretUsed = false;
  for (const auto& f : c["envFrom"])
    if (f["secretRef"]["name"].as<std::string>() == (*secret)["metadata"]["name"].as<std::string>()) secretUsed = true;
  EXPECT_TRUE(secretUsed);
  EXPECT_TRUE((*secret)["stringData"]["AWS_ACCESS_KEY_ID"] && (*secret)["stringData"]["AWS_SECRET_ACCESS_KEY"]);

  // The command, as the pod runs it.
  std::vector<std::string> argv;
  for (const auto& a : c["command"]) argv.push_back(a.as<std::string>());
  for (const auto& a : c["args"]) argv.push_back(a.as<std::string>());
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "jobhost");
  EXPECT_EQ(argv[1], "run");
  auto flag = [&](const std::string& name) -> std::optional<std::string> {
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == name) return argv[i + 1];
    return std::nullopt;
  };
  ASSERT_TRUE(flag("--health-port"));
  const int healthPortArg = std::stoi(*flag("--health-port"));
  EXPECT_EQ(flag("--restore"), "latest");
  ASSERT_TRUE(flag("--job-id"));
  // Each probe asks the port --health-port serves, on a path the endpoint answers.
  const YAML::Node liveness = c["livenessProbe"]["httpGet"], readiness = c["readinessProbe"]["httpGet"];
  ASSERT_TRUE(liveness && readiness);
  EXPECT_EQ(probePort(c, liveness["port"]), healthPortArg);
  EXPECT_EQ(probePort(c, readiness["port"]), healthPortArg);

  // Now run that command here: the installed paths mapped into this tree, the pod's
  // volume into a temporary directory, and a free port instead of the probe's.
  const fs::path root = tmp / "pod";
  fs::create_directories(root / "var/lib/jobhost/input");
  writeFile(root / "var/lib/jobhost/input/words-1.txt", readFile(kWords));
  const fs::path configFile = root / "config.yaml";
  writeFile(configFile, (*configMap)["data"]["config.yaml"].as<std::string>());
  int freePort = 0;
  close(listenOnLoopback(&freePort));
  // Checkpoints every 500 ms instead of the ConfigMap's interval: the test waits for one.
  std::vector<std::string> args = {kJobhost, "run", "-D", "execution.checkpointing.interval=500ms",
                                   "-D", "state.checkpoints.dir=" + (root / "var/lib/jobhost/checkpoints").string(),
                                   "-D", "state.savepoints.dir=" + (root / "var/lib/jobhost/savepoints").string(),
                                   "-D", "state.local.dir=" + (root / "work").string()};
  for (size_t i = 2; i < argv.size(); ++i) {
    std::string a = argv[i];
    if (argv[i - 1] == "--health-port") a = std::to_string(freePort);
    else if (a == "/etc/jobhost/config.yaml") a = configFile.string();
    else if (a == "/usr/lib/jobhost/plugins/libwordcount_jobs.so") a = kPlugin;
    else if (a.rfind("/var/lib/jobhost/", 0) == 0) a = (root / a.substr(1)).string();
    args.push_back(a);
  }
  Process job(args, tmp / "pod.out", tmp / "pod.err");
  const int port = waitForHealthPort(job, tmp / "pod.err");
  ASSERT_EQ(port, freePort) << readFile(tmp / "pod.err");
  EXPECT_EQ(waitForStatus(port, liveness["path"].as<std::string>(), 200).status, 200);
  HttpResponse ready = waitForStatus(port, readiness["path"].as<std::string>(), 200);
  EXPECT_EQ(ready.status, 200) << ready.body << readFile(tmp / "pod.err");
  // The pod's end: SIGTERM, a savepoint (execution.stop-with-savepoint-on-sigterm in the
  // ConfigMap), within the grace period.
  const fs::path jobDir = root / "var/lib/jobhost/checkpoints" / *flag("--job-id");
  bool checkpointed = false;
  for (int i = 0; i < 600 && !checkpointed && job.running(); ++i) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(jobDir, ec))
      if (fs::exists(e.path() / "_metadata")) checkpointed = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(checkpointed) << readFile(tmp / "pod.err");
  const auto stopStart = std::chrono::steady_clock::now();
  job.signal(SIGTERM);
  Result r = job.wait(std::chrono::seconds(grace));
  EXPECT_EQ(r.exitCode, 130) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - stopStart, std::chrono::seconds(grace));
  if (config["execution.stop-with-savepoint-on-sigterm"].as<bool>(false)) {
    EXPECT_NE(r.err.find("stopped with savepoint"), std::string::npos) << r.err;
  }
}

}  // namespace
