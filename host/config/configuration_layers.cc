#include "config/configuration_layers.h"

#include <cstdlib>
#include <filesystem>
#include <map>

#include "host/plugin/user_code.h"
#include "jobhost/job.h"
#include "jobhost/state/s3_storage.h"

namespace jobhost::host {

namespace fs = std::filesystem;

void loadUserConfiguration(const std::optional<std::string>& configFile, const std::vector<std::string>& defines,
                           const std::optional<int>& parallelism, Configuration* config) {
  std::optional<std::string> file = configFile;
  if (!file) {
    // $JOBHOST_CONF_DIR, else the installed default next to the binary, else /etc/jobhost.
    std::vector<fs::path> dirs;
    if (const char* d = std::getenv("JOBHOST_CONF_DIR")) dirs.emplace_back(d);
    else {
      std::error_code ec;
      fs::path exe = fs::read_symlink("/proc/self/exe", ec);
      if (!ec) dirs.push_back(exe.parent_path().parent_path() / "etc" / "jobhost");
      dirs.emplace_back("/etc/jobhost");
    }
    for (const auto& d : dirs)
      if (fs::exists(d / "config.yaml")) {
        file = (d / "config.yaml").string();
        break;
      }
  }
  if (file) config->loadYamlFile(*file);
  for (const auto& d : defines) config->setFromArgument(d);
  if (parallelism) config->set("parallelism.default", std::to_string(*parallelism), Configuration::Layer::kCommandLine);
  // S3 checkpoint storage (s3://…) is opened with these everywhere in this process.
  std::map<std::string, std::string> s3Keys;
  for (const auto& [k, shown] : config->effective())  // keys only: effective() hides the secret's value
    if (k.rfind("s3.", 0) == 0) s3Keys[k] = config->get(k).value_or("");
  auto s3 = state::s3OptionsFrom(s3Keys);
  if (!s3.ok()) throw ConfigError(s3.status().message());
  state::setDefaultS3Options(*s3);
}

void applyJobConfiguration(const JobClassInfo& info, Job& job, Configuration* config) {
  // The class's backend has one source of truth: its JOBHOST_JOB / JOBHOST_JOB_INCREMENTAL
  // declaration, which `info` reads without running plugin code and preflight compares a
  // snapshot against. It is the class's layer; the configuration file is below it and -D
  // above it. configure() may repeat it but not contradict it (issue 14: a class declared
  // "rocksdb" without stateBackend() in configure() used to run on hashmap).
  std::string declared = info.backend ? info.backend : "";
  if (declared != "hashmap" && declared != "rocksdb")
    throw ConfigError("class " + std::string(info.name) + " declares the state backend '" + declared +
                      "' in JOBHOST_JOB; declare \"hashmap\" or \"rocksdb\" and rebuild the plugin");
  const char* declaredIncremental = info.incremental ? "true" : "false";
  JobConfig jc;
  fenceUserCode(info.name, "configure()", [&] { job.configure(jc); });
  auto declaration = [&] {
    return std::string(info.incremental ? "JOBHOST_JOB_INCREMENTAL(" : "JOBHOST_JOB(") + info.name + ", …, \"" +
           declared + "\"" + (info.incremental ? ", 1)" : ")");
  };
  if (auto type = jc.get("state.backend.type"); type && *type != declared)
    throw ConfigError("class " + std::string(info.name) + " is declared with " + declaration() +
                      " but its configure() sets state.backend.type = " + *type +
                      "; the declaration is the class's backend: remove stateBackend()/state.backend.type from "
                      "configure(), or change the declaration (-D state.backend.type=… still overrides both)");
  if (auto inc = jc.get("state.backend.incremental")) {
    Configuration scratch;  // the one parser of booleans
    scratch.set("state.backend.incremental", *inc, Configuration::Layer::kJob);
    if (scratch.getBool("state.backend.incremental") != info.incremental)
      throw ConfigError("class " + std::string(info.name) + " is declared with " + declaration() +
                        " but its configure() sets state.backend.incremental = " + *inc +
                        "; declare incremental checkpoints with JOBHOST_JOB_INCREMENTAL(Class, …, backend, 1) "
                        "and remove them from configure()");
  }
  config->set("state.backend.type", declared, Configuration::Layer::kJob);
  config->set("state.backend.incremental", declaredIncremental, Configuration::Layer::kJob);
  for (auto& [k, v] : jc.values()) config->set(k, v, Configuration::Layer::kJob);
}

}  // namespace jobhost::host
