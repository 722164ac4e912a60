// jobhost — runs stateful streaming jobs from a plugin library. See README.md.
#include <CLI/CLI.hpp>
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "config/units.h"
#include "exit_codes.h"
#include "job_runner.h"
#include "job_worker.h"
#include "log_format.h"
#include "signal_handling.h"
#include "jobhost/version.h"
#include "ui/dashboard.h"

using namespace jobhost::host;

namespace {

/// The malloc this process's symbol lookup resolves to, for --version: "jemalloc 5.3.0" or
/// "glibc 2.36". Asked of the dynamic loader rather than assumed from the build, so a
/// library order that let libc's malloc win shows.
std::string allocatorInUse() {
  Dl_info info{};
  void* malloc = ::dlsym(RTLD_DEFAULT, "malloc");
  if (malloc == nullptr || ::dladdr(malloc, &info) == 0) return "unknown";
  // jemalloc: its mallctl() lives in the same object as the malloc in use (a shared
  // libjemalloc, or the binary itself when linked statically).
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  auto mallctl = reinterpret_cast<Mallctl>(::dlsym(RTLD_DEFAULT, "mallctl"));
  Dl_info ctlInfo{};
  if (mallctl != nullptr && ::dladdr(reinterpret_cast<void*>(mallctl), &ctlInfo) != 0 &&
      ctlInfo.dli_fbase == info.dli_fbase) {
    const char* version = nullptr;
    size_t length = sizeof version;
    if (mallctl("version", &version, &length, nullptr, 0) != 0 || version == nullptr) return "jemalloc";
    const std::string_view v(version);  // "5.3.0-0-g<commit>"
    return "jemalloc " + std::string(v.substr(0, v.find('-')));
  }
  if (info.dli_fname != nullptr && std::string_view(info.dli_fname).find("libc.so") != std::string_view::npos)
    return std::string("glibc ") + ::gnu_get_libc_version();
  return info.dli_fname != nullptr ? std::string("malloc of ") + info.dli_fname : "unknown";
}


const char* kExitCodes =
    "Exit codes:\n"
    "  0    success (the job finished, or the check passed)\n"
    "  1    the job failed and its restart strategy gave up\n"
    "  2    bad arguments, configuration, plugin or job class\n"
    "  3    the snapshot cannot be restored into this job (see the report)\n"
    "  130  stopped by Ctrl-C or SIGTERM\n";

void addRunOptions(CLI::App* cmd, RunOptions& o) {
  cmd->add_option("-c,--class", o.jobClass, "Job class to run (optional if the plugin has one class)");
  cmd->add_option("-p,--parallelism", o.parallelism, "Subtasks per keyed operator (parallelism.default)")
      ->check(CLI::Range(1, 32768));
  cmd->add_option("-D", o.defines, "Configuration override key=value (repeatable; keys: README \"Configuration\")")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--config", o.configFile, "YAML configuration file (default: $JOBHOST_CONF_DIR/config.yaml)")
      ->check(CLI::ExistingFile);
  cmd->add_option("-s,--from-snapshot", o.fromSnapshot,
                  "Restore from a chk-<n> or savepoint directory, its _metadata, or a job's checkpoint directory "
                  "(then its latest complete checkpoint)");
  cmd->add_flag("-n,--allow-non-restored-state", o.allowNonRestoredState,
                "Skip snapshot state of operators the job no longer has");
  cmd->add_option_function<std::string>(
         "--restore-mode,--claim-mode",
         [&o](const std::string& mode) { o.claimSnapshot = mode == "claim"; },
         "no-claim (default): never modify or delete the -s snapshot; the first checkpoint is full. "
         "claim: the job owns the snapshot and deletes it after its first own checkpoint")
      ->check(CLI::IsMember({"claim", "no-claim", "no_claim"}));
  cmd->add_option("--log-format", o.logFormat,
                  "Log lines on stderr: text (default) or json (one object per line: time, level, job_id, attempt, "
                  "message, fields; for log collectors)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("plugin", o.pluginPath, "The plugin library (.so)")->required();
  cmd->add_option("args", o.jobArgs, "Arguments for the job: everything after the plugin path");
}

/// For `run` and `check`: moves everything after the plugin path into *jobArgs.
void splitJobArguments(std::vector<std::string>& args, std::vector<std::string>* jobArgs) {
  static const std::set<std::string> withValue = {"-c", "--class", "-p", "--parallelism", "-D", "--config", "--restore-mode", "--claim-mode", "--job-id", "--attempt",
                                                  "--restore", "--max-checkpoint-age", "-s", "--from-snapshot", "--restore-from", "--first-checkpoint-id",
                                                  "--health-port", "--health-address", "--log-format"};
  size_t i = 0;
  while (i < args.size() && args[i].rfind("-", 0) == 0) ++i;  // global flags
  if (i >= args.size() || (args[i] != "run" && args[i] != "check" && args[i] != "__worker")) return;
  for (++i; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      args.erase(args.begin() + static_cast<long>(i));
      --i;
      continue;
    }
    if (a.rfind("-", 0) == 0) {
      bool attached = a.find('=') != std::string::npos || (a.size() > 2 && a[1] != '-' && withValue.count(a.substr(0, 2)));
      if (withValue.count(a) && !attached) ++i;
      continue;
    }
    // The plugin path.
    jobArgs->assign(args.begin() + static_cast<long>(i) + 1, args.end());
    args.resize(i + 1);
    return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("jobhost");
  spdlog::set_default_logger(logger);
  configureLogging(LogFormat::kText, "cli");
  if (const char* lvl = std::getenv("JOBHOST_LOG_LEVEL")) spdlog::set_level(spdlog::level::from_str(lvl));

  CLI::App app{"jobhost — run stateful streaming jobs from a plugin library", "jobhost"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  // A callback: the allocator is looked up only when --version is asked for, not at every start.
  app.set_version_flag("--version", [] {
    return std::string("jobhost ") + JOBHOST_VERSION + " (SDK " + JOBHOST_SDK_VERSION + ", ABI " + JOBHOST_ABI_TAG +
           ")\nallocator: " + allocatorInUse();
  });
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Debug logging");

  std::string infoPlugin;
  auto* info = app.add_subcommand("info", "List the job classes of a plugin and their effective backend and checkpoint settings");
  info->add_option("plugin", infoPlugin, "The plugin library (.so)")->required();
  std::vector<std::string> infoDefines;
  std::optional<std::string> infoConfig;
  info->add_option("-D", infoDefines, "Configuration override key=value (repeatable), as for run")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  info->add_option("--config", infoConfig, "YAML configuration file, as for run")->check(CLI::ExistingFile);
  info->footer("Example:\n  jobhost info build/plugins/libwordcount_jobs.so\n\n" + std::string(kExitCodes));

  RunOptions runOpts;
  auto* run = app.add_subcommand("run", "Run a job class (in the foreground; -d: in the background)");
  addRunOptions(run, runOpts);
  run->add_flag("--dry-run", runOpts.dryRun, "Only check that the -s snapshot fits, like `jobhost check`");
  run->add_option("--job-id", runOpts.jobId,
                  "A stable job id: checkpoints go to <state.checkpoints.dir>/NAME (letters, digits, '-', '_')");
  run->add_option_function<std::string>(
         "--restore", [&runOpts](const std::string&) { runOpts.restoreLatest = true; },
         "latest: restore the newest complete checkpoint of --job-id's directory, or start without state if it has "
         "none (as the Kubernetes operator's last-state)")
      ->check(CLI::IsMember({"latest"}));
  run->add_option_function<std::string>(
         "--max-checkpoint-age",
         [&runOpts](const std::string& text) {
           auto d = parseDuration(text);
           if (!d || d->count() <= 0)
             throw CLI::ValidationError("--max-checkpoint-age", "'" + text + "' is not a positive duration such as 10min or 1h");
           runOpts.maxCheckpointAge = *d;
         },
         "With --restore latest: refuse (exit 3) a newest checkpoint older than this (e.g. 30min)");
  run->add_option("--health-port", runOpts.healthPort,
                  "Serve /healthz (alive), /readyz (running, newest checkpoint younger than "
                  "health.readiness.max-checkpoint-age) and /metrics (Prometheus) over HTTP on this port")
      ->check(CLI::Range(0, 65535));
  run->add_option("--health-address", runOpts.healthAddress,
                  "Address for --health-port (default: every interface, as probes and scrapes come from outside a pod)")
      ->capture_default_str();
  bool runDetachedFlag = false;
  run->add_flag("-d,--detached", runDetachedFlag,
                "Run in the background: print the job id once the job runs, log to the runtime directory");
  run->footer(
      "Examples:\n"
      "  jobhost run -c WordCount build/plugins/libwordcount_jobs.so --input words.txt\n"
      "  jobhost run -s ~/.jobhost/checkpoints/<jobId> -c WordCount build/plugins/libwordcount_jobs.so\n"
      "  jobhost run -d -c WordCount build/plugins/libwordcount_jobs.so --input words.txt   # detached\n"
      "  jobhost run --job-id wordcount --restore latest -c WordCount build/plugins/libwordcount_jobs.so --input words.txt\n"
      "  jobhost run --health-port 9249 --log-format json --job-id wordcount --restore latest -c WordCount ...   # in a pod\n\n" +
      std::string(kExitCodes));

  RunOptions checkOpts;
  auto* check = app.add_subcommand("check", "Check that a snapshot can be restored into a job class; restores nothing");
  addRunOptions(check, checkOpts);
  check->footer("Example:\n  jobhost check -s /ckpt/<jobId>/chk-22 -c WordCount libwordcount_jobs.so\n\n" +
                std::string(kExitCodes));

  std::string inspectPath;
  bool inspectJson = false;
  auto* inspect = app.add_subcommand("inspect", "Show a checkpoint's or savepoint's metadata");
  inspect->add_option("snapshot", inspectPath, "chk-<n> or savepoint directory, _metadata file or job directory")->required();
  inspect->add_flag("--json", inspectJson, "Machine-readable output");
  inspect->footer("Example:\n  jobhost inspect ~/.jobhost/checkpoints/<jobId>/chk-3\n\n" + std::string(kExitCodes));

  std::string checkpointsDir;
  auto* checkpoints = app.add_subcommand("checkpoints", "List a job's checkpoints with the paths to restore from");
  checkpoints->add_option("job-dir", checkpointsDir, "<state.checkpoints.dir>/<jobId>")->required();
  checkpoints->footer("Example:\n  jobhost checkpoints ~/.jobhost/checkpoints/<jobId>\n\n" + std::string(kExitCodes));

  // Everything after the plugin path belongs to the job, even words that look like our
  // options (`--input`, `-p`): hand CLI11 only the part up to the plugin path.
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> jobArgs;
  splitJobArguments(args, &jobArgs);
  // The worker process of `run` (see job_worker.h); not for people.
  RunOptions workerOpts;
  WorkerParams workerParams;
  auto* worker = app.add_subcommand("__worker", "");
  worker->group("");  // hidden from --help
  addRunOptions(worker, workerOpts);
  worker->add_option("--job-id", workerParams.jobId)->required();
  worker->add_option("--attempt", workerParams.attempt)->required();
  worker->add_option("--restore-from", workerParams.restoreFrom);
  worker->add_flag("--restore-initial", workerParams.restoreInitial);
  worker->add_option("--first-checkpoint-id", workerParams.firstCheckpointId);

  GcOptions gcOpts;
  auto* gc = app.add_subcommand("gc", "Remove what a crash left in a job's checkpoint directory (never a referenced file) "
                                      "and the working directories of jobs that no longer run");
  gc->add_option("job-dir", gcOpts.jobDir, "<state.checkpoints.dir>/<jobId> (without it: working directories only)");
  gc->add_flag("--dry-run", gcOpts.dryRun, "List what would be removed; remove nothing");
  gc->add_option("--config", gcOpts.configFile, "YAML configuration file, as for run (state.local.dir)")
      ->check(CLI::ExistingFile);
  gc->add_option("-D", gcOpts.defines, "Configuration override key=value (repeatable), as for run")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  gc->footer("Refuses a directory a running job holds (its lock names the job); never touches the working directory "
             "of a running job.\n\nExamples:\n"
             "  jobhost gc --dry-run ~/.jobhost/checkpoints/<jobId>\n"
             "  jobhost gc                                   # working directories of ended jobs (state.local.dir)\n\n" +
             std::string(kExitCodes));

  std::string convertFrom, convertTo;
  auto* convert = app.add_subcommand(
      "convert", "Rewrite any snapshot into the canonical format that both backends restore (the source is only read)");
  convert->add_option("snapshot", convertFrom, "Snapshot to read (chk-<n>, savepoint or job directory)")->required();
  convert->add_option("out-dir", convertTo, "New directory for the canonical savepoint")->required();
  convert->footer("Example:\n  jobhost convert /ckpt/<jobId>/chk-22 /savepoints/wordcount-canonical\n\n" +
                  std::string(kExitCodes));

  // Reading snapshots' keyed state without the job (cli/state_command.cc).
  StateCommandOptions stateOpts;
  auto* stateCmd = app.add_subcommand("state", "Read and compare the keyed state in snapshots, without running the job");
  stateCmd->require_subcommand(1);
  auto addPluginOptions = [&stateOpts](CLI::App* c) {
    c->add_option("--plugin", stateOpts.plugin,
                  "Decode values of the job's own serializers with this plugin (built, not run)")
        ->check(CLI::ExistingFile);
    c->add_option("-c,--class", stateOpts.jobClass, "The job class whose serializers to use (with --plugin)");
    c->add_option("job-args", stateOpts.jobArgs, "After --: arguments the class's build() needs, as for run");
  };
  const std::string stateExitCodes =
      "Exit codes:\n  0    done (diff: the states are equal)\n  1    diff: the states differ\n"
      "  2    bad arguments: unknown operator, state, format or plugin\n"
      "  3    the snapshot cannot be read (missing, truncated or damaged file: the message names it)\n"
      "  130  stopped by Ctrl-C or SIGTERM\n";
  auto* stateLs = stateCmd->add_subcommand("ls", "Per operator and state: kind, key and value types, entries, bytes");
  stateLs->add_option("snapshot", stateOpts.snapshot, "chk-<n> or savepoint directory, _metadata file or job directory")
      ->required();
  stateLs->add_option("--operator", stateOpts.operatorUid, "Only this operator uid");
  stateLs->add_flag("--key-groups", stateOpts.keyGroups, "Also entries and bytes per key group");
  stateLs->footer("Example:\n  jobhost state ls ~/.jobhost/checkpoints/<jobId>/chk-3\n\n" + stateExitCodes);
  auto* stateDump = stateCmd->add_subcommand("dump", "Print the keys and values of an operator's state, decoded");
  stateDump->add_option("snapshot", stateOpts.snapshot, "chk-<n> or savepoint directory, _metadata file or job directory")
      ->required();
  stateDump->add_option("--operator", stateOpts.operatorUid, "Operator uid (see jobhost state ls)")->required();
  stateDump->add_option("--state", stateOpts.stateName, "Only this state (default: all of the operator's)");
  stateDump->add_option("--key", stateOpts.key, "Only this key, as printed");
  stateDump->add_option("--format", stateOpts.format, "table (default), json (one object per line, typed values) or csv")
      ->capture_default_str();
  // CLI::PositiveNumber would say "not in range 0.000000 to 1797693…" (a 300-digit double).
  stateDump->add_option("--limit", stateOpts.limit, "At most this many entries (1 or more)")
      ->check(CLI::Range(static_cast<size_t>(1), static_cast<size_t>(1) << 40).description("N >= 1"));
  addPluginOptions(stateDump);
  stateDump->footer(
      "Examples:\n  jobhost state dump ~/.jobhost/checkpoints/<jobId>/chk-3 --operator counts --limit 10\n"
      "  jobhost state dump /savepoints/sp-1 --operator distinct --state words --key a --format json\n"
      "  jobhost state dump chk-3 --operator counts --format json | jq '.value[1]'   # WordCount's counts, as numbers\n"
      "  jobhost state dump chk-3 --operator stats --plugin libmy_jobs.so -c MyJob -- --input x   # decode user types\n\n" +
      stateExitCodes);
  auto* stateDiff = stateCmd->add_subcommand(
      "diff", "Keys only in A, only in B, and changed values; across backends and parallelisms");
  stateDiff->add_option("snapshot-a", stateOpts.snapshot, "Snapshot A")->required();
  stateDiff->add_option("snapshot-b", stateOpts.other, "Snapshot B")->required();
  stateDiff->add_option("--operator", stateOpts.operatorUid, "Only this operator uid");
  stateDiff->add_option("--state", stateOpts.stateName, "Only this state");
  stateDiff->add_option("--format", stateOpts.format, "table (default), json (one object per line, typed values) or csv")
      ->capture_default_str();
  addPluginOptions(stateDiff);
  stateDiff->footer("Example:\n  jobhost state diff /ckpt/<jobId>/chk-6 /ckpt/<jobId>/chk-7 --operator counts\n\n" +
                    stateExitCodes);

  // Control of running jobs (host/control/: Cap'n Proto RPC over per-user Unix sockets).
  auto* list = app.add_subcommand("list", "List the running jobs of this user on this machine");
  list->footer("Example:\n  jobhost list\n\nExit codes:\n  0  listed (also when no job runs)\n");

  std::string savepointJob, savepointFormat = "canonical";
  std::optional<std::string> savepointTarget, disposePath;
  auto* savepoint = app.add_subcommand("savepoint", "Take a savepoint of a running job, or dispose of one (-d)");
  savepoint->add_option("job-id", savepointJob, "Job id (or a unique prefix), as `jobhost list` shows");
  savepoint->add_option("target-dir", savepointTarget, "Directory for the savepoint (default: the job's state.savepoints.dir)");
  savepoint->add_option("--format", savepointFormat,
                        "canonical (default): restorable into either backend; native: the backend's own format")
      ->check(CLI::IsMember({"canonical", "native"}));
  savepoint->add_option("-d,--dispose", disposePath, "Delete a savepoint directory (refuses checkpoints); no job needed");
  savepoint->footer(
      "Examples:\n"
      "  jobhost savepoint 3f2a /savepoints              # prints: Savepoint completed. Path: /savepoints/savepoint-3f2a9c-...\n"
      "  jobhost savepoint 3f2a --format native          # into the job's state.savepoints.dir\n"
      "  jobhost savepoint -d /savepoints/savepoint-3f2a9c-0b1d2e3f4a5b\n\n"
      "Exit codes:\n  0  done\n  1  the savepoint failed (the job keeps running) or cannot be removed\n"
      "  2  bad arguments, unknown job id, no target directory and no state.savepoints.dir, or -d given\n"
      "     something that is not a savepoint\n");

  std::string cancelJob;
  std::vector<std::string> cancelSavepoint;
  auto* cancel = app.add_subcommand("cancel", "Cancel a running job, optionally after a savepoint (-s)");
  auto* cancelS = cancel->add_option("-s,--with-savepoint", cancelSavepoint,
                                     "Take a savepoint first, into this directory (default: the job's state.savepoints.dir)")
                      ->expected(0, 1)
                      ->allow_extra_args(false);
  cancel->add_option("job-id", cancelJob, "Job id (or a unique prefix)");
  cancel->footer(
      "Examples:\n"
      "  jobhost cancel 3f2a\n"
      "  jobhost cancel -s /savepoints 3f2a              # prints: Cancelled job <id>. Savepoint stored in <path>.\n"
      "  jobhost cancel -s 3f2a                          # savepoint into the job's state.savepoints.dir\n\n"
      "Exit codes:\n  0  cancelled\n  1  the savepoint or the cancel failed (the job keeps running)\n"
      "  2  bad arguments, unknown job id, or -s without a directory and no state.savepoints.dir\n");

  std::string stopJob;
  std::optional<std::string> stopSavepointDir;
  auto* stop = app.add_subcommand("stop", "Stop a running job cleanly after a savepoint");
  stop->add_option("-p,--savepoint-path", stopSavepointDir, "Directory for the savepoint (default: state.savepoints.dir)");
  bool stopDrain = false;
  stop->add_flag("-d,--drain", stopDrain,
                 "Send the maximum watermark before the savepoint, so every event-time window and timer fires "
                 "(a job restored from a drained savepoint goes on from the watermark before the drain; windows "
                 "the drain fired early fire again with the records still to come)");
  stop->add_option("job-id", stopJob, "Job id (or a unique prefix)")->required();
  stop->footer(
      "Example:\n  jobhost stop --savepoint-path /savepoints 3f2a\n\n"
      "Exit codes:\n  0  stopped\n  1  the savepoint failed (the job keeps running)\n"
      "  2  bad arguments, unknown job id, or no --savepoint-path and no state.savepoints.dir\n");

  // The web dashboard and REST API (host/ui/, README "Web dashboard").
  UiCommandOptions uiOpts;
  auto* ui = app.add_subcommand("ui", "Serve the web dashboard and REST API for the jobs of this user on this machine");
  ui->add_option("--port", uiOpts.port, "TCP port (0: any free port; the address is printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  ui->add_option("--address", uiOpts.address,
                 "Address to bind; loopback by default (anything else serves every machine that can reach it, "
                 "over plain HTTP; the token is still required)")
      ->capture_default_str();
  ui->add_option("--allowed-host", uiOpts.allowedHosts,
                 "Also answer requests whose Host header is NAME (or NAME:PORT), e.g. behind a reverse proxy "
                 "(repeatable; default: the --address literal, localhost, 127.0.0.1, [::1] with the port)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ui->add_flag("--no-auth", uiOpts.noAuth,
               "No token: every local user can use the dashboard (only with a loopback --address; logged as a warning)");
  ui->add_flag("--print-url", uiOpts.printUrl,
               "Print the URL (with its token) of your running dashboard instead of starting one");
  ui->add_option("--checkpoint-dir", uiOpts.checkpointDir,
                 "Where to look for finished jobs (default: state.checkpoints.dir of the configuration)");
  ui->add_flag("--read-only", uiOpts.readOnly, "Disable savepoint and cancel (also: ui.read-only: true in the configuration)");
  ui->add_option("--config", uiOpts.configFile, "YAML configuration file, as for run")->check(CLI::ExistingFile);
  ui->add_option("-D", uiOpts.defines, "Configuration override key=value (repeatable), as for run")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  ui->footer(
      "Examples:\n"
      "  jobhost ui                                  # prints: Dashboard: http://127.0.0.1:8081/?token=<64 hex digits>\n"
      "  jobhost ui --print-url                      # that URL again (from the runtime directory)\n"
      "  jobhost ui --port 0 --read-only             # any free port; no savepoint or cancel\n"
      "  jobhost ui --address 0.0.0.0 --allowed-host dash.example.com   # behind a TLS reverse proxy\n"
      "  curl -s -H \"Authorization: Bearer $TOKEN\" http://127.0.0.1:8081/api/jobs   # the REST API\n\n"
      "Opening the URL with ?token= sets a cookie (HttpOnly, SameSite=Strict) and drops the token from the\n"
      "address bar. Every /api request needs that cookie or the Bearer header (README \"Dashboard security\").\n\n"
      "Exit codes:\n  2    bad arguments or configuration, the address cannot be bound, --no-auth with a\n"
      "       non-loopback address; --print-url: no dashboard of yours is running\n"
      "  130  stopped by Ctrl-C or SIGTERM\n");

  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (verbose) spdlog::set_level(spdlog::level::debug);
  {
    const std::string& format = *worker ? workerOpts.logFormat : *check ? checkOpts.logFormat : runOpts.logFormat;
    LogFormat f = LogFormat::kText;
    parseLogFormat(format, &f);  // checked by CLI11
    configureLogging(f, *worker ? "worker" : "supervisor");
  }

  if (*worker) {
    workerOpts.jobArgs = jobArgs;
    const char* ch = std::getenv("JOBHOST_WORKER_FD");
    const char* cr = std::getenv("JOBHOST_CRASH_FD");
    if (!ch || !cr) {
      std::cerr << "error: __worker is started by `jobhost run`, not by hand\n";
      return kExitUsage;
    }
    workerParams.channelFd = std::atoi(ch);
    workerParams.crashFd = std::atoi(cr);
    if (const char* pf = std::getenv("JOBHOST_PLUGIN_FD")) workerParams.pluginFd = std::atoi(pf);
    if (const char* pd = std::getenv("JOBHOST_PLUGIN_DIGEST")) workerParams.pluginDigest = pd;
    return runWorker(workerOpts, workerParams);
  }
  if (*info) return infoCommand(infoPlugin, infoDefines, infoConfig);
  if (*inspect) return inspectCommand(inspectPath, inspectJson);
  if (*checkpoints) return checkpointsCommand(checkpointsDir);
  if (*convert) return convertCommand(convertFrom, convertTo);
  if (*stateLs) return stateLsCommand(stateOpts);
  if (*stateDump) return stateDumpCommand(stateOpts);
  if (*stateDiff) return stateDiffCommand(stateOpts);
  if (*gc) return gcCommand(gcOpts);
  if (*list) return listCommand();
  if (*ui) return uiCommand(uiOpts);
  if (*savepoint) {
    if (disposePath) {
      if (!savepointJob.empty()) {
        std::cerr << "error: savepoint -d takes only the savepoint path, not a job id\n";
        return kExitUsage;
      }
      return disposeSavepointCommand(*disposePath);
    }
    if (savepointJob.empty()) {
      std::cerr << "error: savepoint needs a job id (see jobhost list), or -d <path> to dispose of a savepoint\n";
      return kExitUsage;
    }
    return savepointCommand(savepointJob, savepointTarget, savepointFormat);
  }
  if (*cancel) {
    bool withSavepoint = cancelS->count() > 0;
    std::optional<std::string> target;
    if (!cancelSavepoint.empty() && !cancelSavepoint[0].empty()) target = cancelSavepoint[0];
    // `cancel -s <jobId>`: -s took the job id as its directory.
    if (cancelJob.empty() && target) {
      cancelJob = *target;
      target.reset();
    }
    if (cancelJob.empty()) {
      std::cerr << "error: cancel needs a job id (see jobhost list)\n";
      return kExitUsage;
    }
    return cancelCommand(cancelJob, withSavepoint, target);
  }
  if (*stop) return stopCommand(stopJob, stopSavepointDir, stopDrain);
  runOpts.jobArgs = jobArgs;
  checkOpts.jobArgs = jobArgs;
  for (auto [cmd, opts] : {std::pair{run, &runOpts}, std::pair{check, &checkOpts}})
    for (const CLI::Option* opt : cmd->get_options()) {
      for (const auto& n : opt->get_snames()) opts->hostOptionNames.insert("-" + n);
      for (const auto& n : opt->get_lnames()) opts->hostOptionNames.insert("--" + n);
    }
  if (*check) {
    if (!checkOpts.fromSnapshot) {
      bool late = std::find(jobArgs.begin(), jobArgs.end(), "-s") != jobArgs.end() ||
                  std::find(jobArgs.begin(), jobArgs.end(), "--from-snapshot") != jobArgs.end();
      std::cerr << "error: check needs -s <snapshot>"
                << (late ? " before the plugin path (everything after the plugin path is the job's arguments)" : "")
                << "\n";
      return kExitUsage;
    }
    checkOpts.dryRun = true;
    return runJob(checkOpts);
  }
  if (*run && runDetachedFlag && !runOpts.dryRun) return runDetached(args, jobArgs);
  if (*run) {
    installSignalHandling();
    return runJob(runOpts);
  }
  return kExitUsage;
}
