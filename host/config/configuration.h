// host/config/configuration.h — layered job configuration with Flink's flat keys.
//
// Precedence, lowest first: built-in defaults < the YAML file (--config FILE, or
// $JOBHOST_CONF_DIR/config.yaml) < the job class's configure() < `-D key=value`.
// Unknown keys are accepted (plugins may define their own) but a misspelt known key is
// reported with a suggestion. Values are validated when read through the typed getters,
// whose errors name the key and the layer the value came from.
//
// Thread-safety: not thread-safe; build it once before the job starts.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/units.h"  // parseDuration: how getDuration() reads a value

namespace jobhost::host {

/// Thrown for a configuration value that cannot be used; the CLI exits with code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ConfigKey {
  const char* key;
  const char* defaultValue;  // nullptr: no default
  const char* description;
};

/// Every key jobhost itself reads (README "Configuration" is generated from the same list
/// in spirit: keep both in step).
const std::vector<ConfigKey>& knownConfigKeys();

/// Keys whose values are never shown or logged: s3.secret-key, and any key naming a
/// secret or password (a job's own keys too).
bool isSecretKey(std::string_view key);
inline constexpr std::string_view kHiddenValue = "<hidden>";

class Configuration {
 public:
  enum class Layer { kDefault, kFile, kJob, kCommandLine };
  Configuration();
  /// Loads a flat YAML map (nested maps are flattened with dots). Throws ConfigError with
  /// the file name and line on a syntax error.
  void loadYamlFile(const std::string& path);
  /// The same for the text of a file; `path` only names it in messages. Any input gives
  /// the values or a ConfigError — never another exception (tests/fuzz/config_fuzz.cc).
  void loadYaml(const std::string& text, const std::string& path);
  void set(const std::string& key, const std::string& value, Layer layer);
  /// `key=value` from -D; throws ConfigError if there is no '='.
  void setFromArgument(const std::string& assignment);
  std::optional<std::string> get(const std::string& key) const;
  std::string getString(const std::string& key) const;
  int64_t getInt(const std::string& key, int64_t min, int64_t max) const;
  bool getBool(const std::string& key) const;
  /// "500ms", "2 s", "1min", "1h", or a bare number of milliseconds.
  std::chrono::milliseconds getDuration(const std::string& key) const;
  /// Where the value of `key` came from, for messages: "-D", "configure()", the file, "default".
  std::string origin(const std::string& key) const;
  /// Every key with its winning value, for showing (the dashboard, the control
  /// endpoint): a secret's value (isSecretKey) is kHiddenValue.
  std::map<std::string, std::string> effective() const;
  /// Warnings about what the user set that has no effect: a key that looks like a
  /// misspelling of a known one (one line each, with the suggestion); other keys jobhost
  /// does not know (one line for all); a value of the configuration file that the job's
  /// class overrides (its backend declaration, configure()).
  std::vector<std::string> suspiciousKeys() const;

 private:
  struct Value {
    std::string value;
    Layer layer;
  };
  std::map<std::string, Value> values_;
  std::string file_;
  /// File values the job's layer replaced with another: key -> the file's value.
  std::map<std::string, std::string> fileValuesOverridden_;
};

}  // namespace jobhost::host
