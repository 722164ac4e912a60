// host/cli/commands.h — one function per subcommand; main.cc declares the options.
#pragma once

#include <string>

namespace jobhost::host {

/// `jobhost info <plugin.so>`: the plugin's job classes, without running plugin code.
int infoCommand(const std::string& pluginPath);
/// `jobhost inspect <snapshot> [--json]`.
int inspectCommand(const std::string& path, bool json);
/// `jobhost checkpoints <checkpoint-dir>/<jobId>`: the checkpoint history.
int checkpointsCommand(const std::string& jobDir);

/// `jobhost convert <snapshot> <out-dir>`: canonical savepoint from any snapshot.
int convertCommand(const std::string& from, const std::string& outDir);

}  // namespace jobhost::host
