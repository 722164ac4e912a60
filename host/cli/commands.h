// host/cli/commands.h — one function per subcommand; main.cc declares the options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace jobhost::host {

/// `jobhost info <plugin.so>`: the plugin's job classes, without running plugin code.
int infoCommand(const std::string& pluginPath, const std::vector<std::string>& defines,
                const std::optional<std::string>& configFile);
/// `jobhost inspect <snapshot> [--json]`.
int inspectCommand(const std::string& path, bool json);
/// `jobhost checkpoints <checkpoint-dir>/<jobId>`: the checkpoint history.
int checkpointsCommand(const std::string& jobDir);

struct GcOptions {
  std::optional<std::string> jobDir;  // <state.checkpoints.dir>/<jobId>; none: working directories only
  bool dryRun = false;
  std::optional<std::string> configFile;  // for state.local.dir
  std::vector<std::string> defines;
};
/// `jobhost gc [<job-dir>] [--dry-run]`: removes never-completed checkpoints, unreferenced
/// shared files and temporary files of unfinished uploads of <job-dir> (refuses a locked
/// directory), and the working directories under state.local.dir of jobs that no longer run.
int gcCommand(const GcOptions& options);
/// `jobhost convert <snapshot> <out-dir>`: canonical savepoint from any snapshot.
int convertCommand(const std::string& from, const std::string& outDir);

/// Options of `jobhost state ls|dump|diff` (state_command.cc).
struct StateCommandOptions {
  std::string snapshot;  // ls, dump; diff: snapshot A
  std::string other;     // diff: snapshot B
  std::optional<std::string> operatorUid;
  std::optional<std::string> stateName;
  std::optional<std::string> key;  // dump: only this key (as printed)
  std::string format = "table";    // dump, diff: table | json | csv
  std::optional<uint64_t> limit;   // dump: at most this many entries
  bool keyGroups = false;          // ls: per key group
  std::optional<std::string> plugin;  // decode user serializers with this plugin's class
  std::optional<std::string> jobClass;
  std::vector<std::string> jobArgs;  // after --: for the class's build(), as for run
};
/// `jobhost state ls <snapshot>`: per operator and state: kind, types, entries, bytes.
int stateLsCommand(const StateCommandOptions& options);
/// `jobhost state dump <snapshot> --operator UID ...`: the entries, decoded.
int stateDumpCommand(const StateCommandOptions& options);
/// `jobhost state diff <A> <B>`: exit 0 equal, 1 different, 2 bad arguments, 3 unreadable.
int stateDiffCommand(const StateCommandOptions& options);

// Control of running jobs (control_commands.cc); exit codes: 0 ok, 1 the savepoint /
// cancel / stop failed, 2 bad arguments or unknown job id.
/// `jobhost list`: the running jobs of this user (removes stale sockets).
int listCommand();
/// `jobhost savepoint <jobId> [targetDir] [--format canonical|native]`.
int savepointCommand(const std::string& jobId, const std::optional<std::string>& targetDir, const std::string& format);
/// `jobhost savepoint -d <path>`: deletes a savepoint directory; refuses anything else.
int disposeSavepointCommand(const std::string& path);
/// `jobhost cancel [-s [targetDir]] <jobId>`.
int cancelCommand(const std::string& jobId, bool withSavepoint, const std::optional<std::string>& targetDir);
/// `jobhost stop [--savepoint-path dir] <jobId>`.
/// `jobhost stop [--drain]`: savepoint, then a clean stop (--drain: every window fires first).
int stopCommand(const std::string& jobId, const std::optional<std::string>& savepointDir, bool drain);

/// `jobhost run -d ...` (detach.cc): re-runs this binary with `cliArgs` minus -d/--detached
/// (the arguments up to the plugin path) followed by `jobArgs`, in the background; returns
/// once the job answers on its control socket (0) or with the child's exit code.
int runDetached(const std::vector<std::string>& cliArgs, const std::vector<std::string>& jobArgs);

}  // namespace jobhost::host
