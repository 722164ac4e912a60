// `jobhost info`: lists job classes from the plugin's static metadata (no plugin code runs
// for that), then — for a compatible plugin — each class's effective backend and
// checkpoint interval after configure() and the user's configuration.
#include <iostream>

#include "cli/commands.h"
#include "cli/table.h"
#include "config/configuration.h"
#include "config/rocksdb_settings.h"
#include "jobhost/job.h"
#include "config/units.h"
#include "config/configuration_layers.h"
#include "exit_codes.h"
#include "plugin/job_class.h"
#include "jobhost/version.h"
#include "plugin/elf_metadata.h"
#include "plugin/plugin_loader.h"

namespace jobhost::host {

int infoCommand(const std::string& pluginPath, const std::vector<std::string>& defines,
                const std::optional<std::string>& configFile) {
  PluginMetadataResult meta = readPluginMetadataFile(pluginPath);
  if (!meta.ok()) {
    std::cerr << "error: " << meta.error->message << "\n";
    return kExitUsage;
  }
  std::cout << "Plugin: " << pluginPath << "\n";
  if (!meta.classes.empty())
    std::cout << "Built with SDK " << meta.classes.front().sdkVersion << ", ABI " << meta.classes.front().abiTag << "\n";
  auto incompatible = checkPluginCompatibility(pluginPath, meta.classes);
  if (incompatible) std::cout << "warning: " << incompatible->message << "\n";
  std::cout << "\n";
  // The effective settings need each class's configure(): load the plugin when it is
  // compatible; the listing above never needs to.
  std::unique_ptr<PluginLibrary> lib;
  if (!incompatible) {
    PluginError err;
    lib = PluginLibrary::open(pluginPath, &err);
    if (!lib) std::cout << "warning: " << err.message << " (showing declared settings only)\n";
  }
  Table t({"CLASS", "DECLARED", "EFFECTIVE BACKEND", "CHECKPOINTS", "DESCRIPTION"});
  // state.backend.rocksdb.* of the classes that run on rocksdb (config/rocksdb_settings.h).
  Table rocks({"CLASS", "WRITE BUFFER", "WRITE BUFFERS", "BLOCK CACHE", "COMPACTION", "TRANSFER THREADS"});
  bool anyRocks = false;
  for (const auto& c : meta.classes) {
    std::string declared = c.backend + (c.incremental ? " (incremental)" : "");
    std::string effective = "-", checkpoints = "-";
    if (lib) {
      PluginError err;
      const JobClassInfo* info = lib->selectClass(c.name, &err);
      try {
        if (!info) throw std::runtime_error(err.message);
        Configuration config;
        std::unique_ptr<Job> job = createJob(*info);
        applyJobConfiguration(*info, *job, &config);
        loadUserConfiguration(configFile, defines, std::nullopt, &config);
        effective = config.getString("state.backend.type");
        const bool rocksdb = effective == "rocksdb";
        effective += config.getBool("state.backend.incremental") ? " (incremental)" : rocksdb ? " (full)" : "";
        if (rocksdb) {
          const state::RocksDbOptions ro = rocksDbOptionsFrom(config);
          rocks.add({c.name, formatBytes(ro.writeBufferSize), std::to_string(ro.writeBufferCount),
                     formatBytes(ro.blockCacheSize), state::compactionStyleName(ro.compactionStyle),
                     std::to_string(ro.transferThreads)});
          anyRocks = true;
        }
        auto interval = config.getDuration("execution.checkpointing.interval");
        checkpoints = interval.count() > 0 ? "every " + formatDuration(interval) : "off";
      } catch (const std::exception& e) {
        effective = std::string("error: ") + e.what();
      }
    }
    t.add({c.name, declared, effective, checkpoints, c.description});
  }
  std::cout << t.render();
  if (anyRocks) std::cout << "\nRocksDB options (state.backend.rocksdb.*):\n" << rocks.render();
  std::cout << "\nRun one with: jobhost run -c " << meta.classes.front().name << " " << pluginPath << "\n";
  return kExitOk;
}

}  // namespace jobhost::host
