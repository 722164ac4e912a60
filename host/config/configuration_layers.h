// host/config/configuration_layers.h — how a job's configuration is layered
// (configuration.h, "Precedence"): the user's layers (the YAML file, `-D`, `-p`) and the
// job class's layer (its JOBHOST_JOB declaration, then what its configure() sets).
//
// Thread-safety: not thread-safe (they fill one Configuration); called once per process
// while the job is set up.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/configuration.h"

namespace jobhost {
class Job;
struct JobClassInfo;
}  // namespace jobhost

namespace jobhost::host {

/// The user's layers: the YAML file (--config, else $JOBHOST_CONF_DIR/config.yaml), then
/// `-D` and `-p`. Also sets the process's default S3 options from the s3.* keys. Throws
/// ConfigError.
void loadUserConfiguration(const std::optional<std::string>& configFile, const std::vector<std::string>& defines,
                           const std::optional<int>& parallelism, Configuration* config);
/// Adds the job class's layer: its declared backend (JOBHOST_JOB), then what configure()
/// sets (runs plugin code). Throws ConfigError when configure() contradicts the declared
/// backend, UserCodeFailure naming the class for anything configure() throws except a
/// JobArgumentError.
void applyJobConfiguration(const JobClassInfo& info, Job& job, Configuration* config);

}  // namespace jobhost::host
