// config_fuzz.cc — libFuzzer target for the YAML configuration loader
// (Configuration::loadYaml, the text of `--config FILE` / $JOBHOST_CONF_DIR/config.yaml)
// and the typed getters and restart-strategy validation that read what it loaded.
//
// Any text must give the values or a ConfigError with a message — never another
// exception (an uncaught one aborts: a finding), a crash, a hang, a leak or undefined
// behaviour. Seeds (corpus/config/): the packaged config.yaml, every known key with a
// valid and an invalid value, nested maps, lists, anchors, tags and multi-documents.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/configuration.h"
#include "runtime/restart_strategy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using jobhost::host::ConfigError;
  using jobhost::host::Configuration;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Configuration config;
  try {
    config.loadYaml(text, "fuzz.yaml");
  } catch (const ConfigError& e) {
    if (std::string(e.what()).empty()) std::abort();  // an error always says what
    return 0;
  }
  for (const auto& [key, value] : config.effective()) {
    // effective() shows every value as get() reads it, but a secret's (s3.secret-key, a
    // key naming a secret or password), which it must hide.
    const auto raw = config.get(key);
    if (jobhost::host::isSecretKey(key)) {
      if (raw && !raw->empty() && value != jobhost::host::kHiddenValue) std::abort();
    } else if (raw != value) {
      std::abort();
    }
    try {
      (void)config.getInt(key, INT64_MIN, INT64_MAX);
    } catch (const ConfigError&) {
    }
    try {
      (void)config.getBool(key);
    } catch (const ConfigError&) {
    }
    try {
      (void)config.getDuration(key);
    } catch (const ConfigError&) {
    }
    (void)config.origin(key);
  }
  (void)config.suspiciousKeys();
  try {
    (void)jobhost::host::createRestartStrategy(config);
  } catch (const ConfigError&) {
  }
  return 0;
}
