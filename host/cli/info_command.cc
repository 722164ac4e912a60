// `jobhost info`: lists job classes from the plugin's static metadata (no plugin code runs).
#include <iostream>

#include "cli/commands.h"
#include "cli/table.h"
#include "job_runner.h"
#include "jobhost/version.h"
#include "plugin/elf_metadata.h"
#include "plugin/plugin_loader.h"

namespace jobhost::host {

int infoCommand(const std::string& pluginPath) {
  PluginMetadataResult meta = readPluginMetadataFile(pluginPath);
  if (!meta.ok()) {
    std::cerr << "error: " << meta.error->message << "\n";
    return kExitUsage;
  }
  std::cout << "Plugin: " << pluginPath << "\n";
  if (!meta.classes.empty())
    std::cout << "Built with SDK " << meta.classes.front().sdkVersion << ", ABI " << meta.classes.front().abiTag << "\n";
  if (auto incompatible = checkPluginCompatibility(pluginPath, meta.classes))
    std::cout << "warning: " << incompatible->message << "\n";
  std::cout << "\n";
  Table t({"CLASS", "BACKEND", "DESCRIPTION"});
  for (const auto& c : meta.classes)
    t.add({c.name, c.backend + (c.incremental ? " (incremental)" : ""), c.description});
  std::cout << t.render();
  std::cout << "\nRun one with: jobhost run -c " << meta.classes.front().name << " " << pluginPath << "\n";
  return kExitOk;
}

}  // namespace jobhost::host
