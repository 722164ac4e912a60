// Unit tests for host/: layered configuration, restart strategies, key-group assignment,
// the restore preflight and the bounded input channels.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/preflight.h"
#include "config/configuration.h"
#include "jobhost/serializer.h"
#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/s3_storage.h"
#include "config/configuration_layers.h"
#include "jobhost/state/state_handle.h"
#include "runtime/channel.h"
#include "runtime/exchange_writer_impl.h"
#include "runtime/job_execution.h"
#include "runtime/key_group_assignment.h"
#include "runtime/restart_strategy.h"
#include "../support/contains.h"

namespace jobhost::host {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

// A fresh temp directory per test.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / ("jobhost-host-test-" + std::to_string(::getpid()) + "-" +
                                         info->test_suite_name() + "-" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string writeFile(const std::string& name, const std::string& content) {
    std::string path = (root_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  fs::path root_;
};

// ---------------------------------------------------------------------------------------
// Configuration

using Layer = Configuration::Layer;

class ConfigurationTest : public TempDirTest {};

TEST_F(ConfigurationTest, BuiltInDefaultsAreSetAndComeFromDefault) {
  Configuration c;
  EXPECT_EQ(c.get("state.backend.type"), "hashmap");
  EXPECT_EQ(c.get("pipeline.max-parallelism"), "128");
  EXPECT_EQ(c.get("restart-strategy.type"), "none");
  EXPECT_EQ(c.origin("state.backend.type"), "default");
  EXPECT_EQ(c.get("state.checkpoints.dir"), std::nullopt);  // no default
  EXPECT_EQ(c.origin("state.checkpoints.dir"), "unset");
  EXPECT_TRUE(c.suspiciousKeys().empty());
}

struct PrecedenceCase {
  std::string what;
  std::vector<std::pair<Layer, std::string>> sets;  // applied in this order
  std::string value;
  std::string origin;  // "<file>" stands for the YAML file's path
};

TEST_F(ConfigurationTest, PrecedenceIsDefaultThenFileThenJobThenCommandLineWhateverTheOrder) {
  const std::vector<PrecedenceCase> cases = {
      {"default only", {}, "hashmap", "default"},
      {"file over default", {{Layer::kFile, "f"}}, "f", "<file>"},
      {"job over file", {{Layer::kFile, "f"}, {Layer::kJob, "j"}}, "j", "the job's configure()"},
      {"file after job loses", {{Layer::kJob, "j"}, {Layer::kFile, "f"}}, "j", "the job's configure()"},
      {"command line over all", {{Layer::kCommandLine, "d"}, {Layer::kJob, "j"}, {Layer::kFile, "f"}}, "d", "-D"},
      {"command line last", {{Layer::kFile, "f"}, {Layer::kJob, "j"}, {Layer::kCommandLine, "d"}}, "d", "-D"},
      {"same layer: last wins", {{Layer::kJob, "j1"}, {Layer::kJob, "j2"}}, "j2", "the job's configure()"},
      {"default layer cannot override", {{Layer::kJob, "j"}, {Layer::kDefault, "x"}}, "j", "the job's configure()"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Configuration cfg;
    std::string file;
    for (const auto& [layer, value] : c.sets) {
      if (layer == Layer::kFile) {
        file = writeFile("conf.yaml", "state.backend.type: " + value + "\n");
        cfg.loadYamlFile(file);
      } else {
        cfg.set("state.backend.type", value, layer);
      }
    }
    EXPECT_EQ(cfg.get("state.backend.type"), c.value);
    EXPECT_EQ(cfg.origin("state.backend.type"), c.origin == "<file>" ? file : c.origin);
  }
}

TEST_F(ConfigurationTest, YamlNestedMapsAreFlattenedWithDots) {
  const std::string path = writeFile("config.yaml",
                                     "state:\n"
                                     "  backend:\n"
                                     "    type: rocksdb\n"
                                     "    incremental: true\n"
                                     "  checkpoints.dir: /var/ckpt\n"
                                     "parallelism.default: 4\n"
                                     "execution:\n"
                                     "  checkpointing:\n"
                                     "    interval: 10 s\n"
                                     "myplugin.empty:\n");
  Configuration c;
  c.loadYamlFile(path);
  EXPECT_EQ(c.get("state.backend.type"), "rocksdb");
  EXPECT_EQ(c.get("state.backend.incremental"), "true");
  EXPECT_EQ(c.get("state.checkpoints.dir"), "/var/ckpt");
  EXPECT_EQ(c.get("parallelism.default"), "4");
  EXPECT_EQ(c.get("execution.checkpointing.interval"), "10 s");
  EXPECT_EQ(c.get("myplugin.empty"), "");
  EXPECT_EQ(c.get("state"), std::nullopt);
  EXPECT_EQ(c.origin("state.backend.type"), path);
  EXPECT_EQ(c.getDuration("execution.checkpointing.interval"), 10s);
  EXPECT_TRUE(c.getBool("state.backend.incremental"));
}

TEST_F(ConfigurationTest, AnEmptyYamlFileSetsNothing) {
  Configuration c;
  c.loadYamlFile(writeFile("empty.yaml", ""));
  EXPECT_EQ(c.get("state.backend.type"), "hashmap");
  EXPECT_EQ(c.origin("state.backend.type"), "default");
}

TEST_F(ConfigurationTest, BadYamlThrowsConfigErrorWithTheFileAndLine) {
  const std::string path = writeFile("bad.yaml",
                                     "state.backend.type: rocksdb\n"
                                     "parallelism.default: 2\n"
                                     "restart-strategy.type: [fixed-delay\n");
  Configuration c;
  try {
    c.loadYamlFile(path);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(contains(msg, "line 4")) << msg;
  }
  // Nothing of a bad file is applied.
  EXPECT_EQ(c.get("state.backend.type"), "hashmap");
}

TEST_F(ConfigurationTest, BadYamlOnTheFirstLineReportsLineOne) {
  const std::string path = writeFile("bad1.yaml", "a: b: c\n");
  Configuration c;
  try {
    c.loadYamlFile(path);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "line 1,")) << e.what();
  }
}

TEST_F(ConfigurationTest, AListValueOrANonMapFileIsRejected) {
  Configuration c;
  try {
    c.loadYamlFile(writeFile("list.yaml", "state:\n  backend:\n    type: [a, b]\n"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "'state.backend.type'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "list")) << e.what();
  }
  EXPECT_THROW(c.loadYamlFile(writeFile("scalar.yaml", "just a string\n")), ConfigError);
}

TEST_F(ConfigurationTest, AMissingFileThrowsConfigErrorNamingIt) {
  Configuration c;
  const std::string path = (root_ / "nope.yaml").string();
  try {
    c.loadYamlFile(path);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
  }
}

TEST_F(ConfigurationTest, SetFromArgumentSplitsAtTheFirstEqualsSign) {
  Configuration c;
  c.setFromArgument("state.backend.type=rocksdb");
  c.setFromArgument("myjob.expr=a=b");
  c.setFromArgument("myjob.empty=");
  EXPECT_EQ(c.get("state.backend.type"), "rocksdb");
  EXPECT_EQ(c.origin("state.backend.type"), "-D");
  EXPECT_EQ(c.get("myjob.expr"), "a=b");
  EXPECT_EQ(c.get("myjob.empty"), "");
  for (const std::string bad : {"novalue", "=x", ""}) {
    try {
      c.setFromArgument(bad);
      ADD_FAILURE() << "expected ConfigError for '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "'" + bad + "'")) << e.what();
      EXPECT_TRUE(contains(e.what(), "key=value")) << e.what();
    }
  }
}

struct DurationCase {
  std::string text;
  milliseconds expected;
};

TEST_F(ConfigurationTest, GetDurationAcceptsFlinkStyleDurations) {
  const std::vector<DurationCase> cases = {
      {"500ms", 500ms},   {"2 s", 2s},          {"1min", 1min},   {"1h", 1h},        {"250", 250ms},
      {"0", 0ms},         {"1.5s", 1500ms},     {"10 S", 10s},    {"3 minutes", 3min}, {"2 hours", 2h},
      {"  7 sec ", 7s},   {"1 m", 1min},        {"5 millis", 5ms}, {"1 second", 1s},
  };
  for (const auto& c : cases) {
    Configuration cfg;
    cfg.set("x.duration", c.text, Layer::kJob);
    EXPECT_EQ(cfg.getDuration("x.duration"), c.expected) << "'" << c.text << "'";
  }
}

TEST_F(ConfigurationTest, GetDurationRejectsMalformedValuesNamingKeyValueAndOrigin) {
  for (const std::string bad : {"", "abc", "ms", "5 parsecs", "-5s", "5s5", ".", "1 min 30 s"}) {
    Configuration cfg;
    cfg.set("execution.checkpointing.interval", bad, Layer::kCommandLine);
    try {
      auto d = cfg.getDuration("execution.checkpointing.interval");
      ADD_FAILURE() << "'" << bad << "' was accepted as " << d.count() << " ms";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "execution.checkpointing.interval")) << msg;
      EXPECT_TRUE(contains(msg, "'" + bad + "'")) << msg;
      EXPECT_TRUE(contains(msg, "(from -D)")) << msg;
    }
  }
}

TEST_F(ConfigurationTest, GetDurationRejectsANumberWithMoreThanOneDecimalPoint) {
  for (const std::string bad : {"1.2.3s", "1..5 s", "2.5.min"}) {
    Configuration cfg;
    cfg.set("restart-strategy.fixed-delay.delay", bad, Layer::kJob);
    try {
      auto d = cfg.getDuration("restart-strategy.fixed-delay.delay");
      ADD_FAILURE() << "'" << bad << "' was accepted as " << d.count() << " ms";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "'" + bad + "'")) << e.what();
    }
    EXPECT_EQ(parseDuration(bad), std::nullopt) << "'" << bad << "'";
  }
}

struct BoolCase {
  std::string text;
  bool expected;
};

TEST_F(ConfigurationTest, GetBoolAcceptsTheUsualSpellings) {
  const std::vector<BoolCase> cases = {
      {"true", true}, {"TRUE", true}, {"yes", true},  {"1", true},   {"True", true},
      {"false", false}, {"No", false}, {"0", false}, {"", false},
  };
  for (const auto& c : cases) {
    Configuration cfg;
    cfg.set("state.backend.incremental", c.text, Layer::kJob);
    EXPECT_EQ(cfg.getBool("state.backend.incremental"), c.expected) << "'" << c.text << "'";
  }
}

TEST_F(ConfigurationTest, GetBoolRejectsOtherWordsNamingTheKeyAndOrigin) {
  Configuration cfg;
  cfg.set("state.backend.incremental", "maybe", Layer::kJob);
  try {
    cfg.getBool("state.backend.incremental");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "state.backend.incremental")) << msg;
    EXPECT_TRUE(contains(msg, "'maybe'")) << msg;
    EXPECT_TRUE(contains(msg, "the job's configure()")) << msg;
  }
}

TEST_F(ConfigurationTest, GetIntOutOfRangeNamesTheKeyTheOriginAndTheRange) {
  const std::string path = writeFile("p.yaml", "parallelism.default: 0\n");
  Configuration cfg;
  cfg.loadYamlFile(path);
  try {
    cfg.getInt("parallelism.default", 1, 32768);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "parallelism.default")) << msg;
    EXPECT_TRUE(contains(msg, "(from " + path + ")")) << msg;
    EXPECT_TRUE(contains(msg, "out of range [1, 32768]")) << msg;
  }
  cfg.set("parallelism.default", "32768", Layer::kCommandLine);
  EXPECT_EQ(cfg.getInt("parallelism.default", 1, 32768), 32768);
  cfg.set("parallelism.default", "32769", Layer::kCommandLine);
  EXPECT_THROW(cfg.getInt("parallelism.default", 1, 32768), ConfigError);
}

TEST_F(ConfigurationTest, GetIntRejectsNonIntegersNamingTheKeyAndOrigin) {
  for (const std::string bad : {"4x", "four", "", "2.5", "99999999999999999999"}) {
    Configuration cfg;
    cfg.set("parallelism.default", bad, Layer::kCommandLine);
    try {
      cfg.getInt("parallelism.default", 1, 100);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(contains(msg, "parallelism.default")) << msg;
      EXPECT_TRUE(contains(msg, "(from -D)")) << msg;
    }
  }
}

struct TypoCase {
  std::string key;
  std::string suggestion;  // empty: no warning expected
};

TEST_F(ConfigurationTest, SuspiciousKeysSuggestTheKnownKeyForATypo) {
  const std::vector<TypoCase> cases = {
      {"state.backend.typ", "state.backend.type"},
      {"parallelism.defualt", "parallelism.default"},
      {"state.backend.incremetal", "state.backend.incremental"},
      {"state.backend.type", ""},  // known
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    Configuration cfg;
    cfg.set(c.key, "x", Layer::kCommandLine);
    auto warnings = cfg.suspiciousKeys();
    if (c.suggestion.empty()) {
      EXPECT_TRUE(warnings.empty()) << ::testing::PrintToString(warnings);
      continue;
    }
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_TRUE(contains(warnings[0], "'" + c.key + "'")) << warnings[0];
    EXPECT_TRUE(contains(warnings[0], "did you mean '" + c.suggestion + "'")) << warnings[0];
    EXPECT_TRUE(contains(warnings[0], "(from -D)")) << warnings[0];
  }
}

TEST_F(ConfigurationTest, EveryKeyTheUserSetThatHasNoEffectIsNamedOnce) {
  // Unknown keys, however far from a known one, from -D and from the file: one line.
  fs::path file = root_ / "config.yaml";
  std::ofstream(file) << "state:\n  backend:\n    type: rocksdb\nmyplugin.window.size: 3\nrestart-strategy.type: none\n";
  Configuration cfg;
  cfg.loadYamlFile(file.string());
  cfg.set("foo", "1", Layer::kCommandLine);
  cfg.set("parallelism.default", "2", Layer::kCommandLine);
  cfg.set("job.own.key", "x", Layer::kJob);  // the plugin author's: not the user's to hear about
  // The class declares hashmap: the file's rocksdb has no effect; -D would override both.
  cfg.set("state.backend.type", "hashmap", Layer::kJob);
  cfg.set("restart-strategy.type", "none", Layer::kJob);  // the same value: nothing lost
  auto warnings = cfg.suspiciousKeys();
  ASSERT_EQ(warnings.size(), 2u) << ::testing::PrintToString(warnings);
  EXPECT_TRUE(contains(warnings[0], "configuration keys jobhost does not know, so they have no effect: 'foo' (from -D), "
                                    "'myplugin.window.size' (from " + file.string() + ")"))
      << warnings[0];
  EXPECT_FALSE(contains(warnings[0], "job.own.key")) << warnings[0];
  EXPECT_TRUE(contains(warnings[1], "state.backend.type: rocksdb in " + file.string() +
                                        " has no effect: the job's class sets hashmap"))
      << warnings[1];
  cfg.set("state.backend.type", "rocksdb", Layer::kCommandLine);
  EXPECT_EQ(cfg.suspiciousKeys().size(), 1u) << ::testing::PrintToString(cfg.suspiciousKeys());
}

TEST_F(ConfigurationTest, AFileOfCommentsOnlySetsNothingAndWarnsOfNothing) {
  // The shipped config.yaml, every setting commented out: YAML reads it as null, which
  // was taken for a value of the key '' (then named as an unknown key).
  fs::path file = root_ / "config.yaml";
  std::ofstream(file) << "# state.backend.type: rocksdb\n\n# parallelism.default: 1\n";
  Configuration cfg;
  cfg.loadYamlFile(file.string());
  EXPECT_EQ(cfg.get(""), std::nullopt);
  EXPECT_TRUE(cfg.suspiciousKeys().empty()) << ::testing::PrintToString(cfg.suspiciousKeys());
}

TEST_F(ConfigurationTest, EffectiveListsEveryKeyWithItsWinningValue) {
  Configuration cfg;
  cfg.set("state.backend.type", "rocksdb", Layer::kJob);
  cfg.set("myjob.x", "1", Layer::kCommandLine);
  auto eff = cfg.effective();
  EXPECT_EQ(eff.at("state.backend.type"), "rocksdb");
  EXPECT_EQ(eff.at("myjob.x"), "1");
  EXPECT_EQ(eff.at("pipeline.max-parallelism"), "128");
}

// The dashboard and the control endpoint show effective(): a secret set with -D (or by
// the job) appears there as <hidden>, never as its value (issue 17).
TEST_F(ConfigurationTest, EffectiveHidesSecrets) {
  Configuration cfg;
  cfg.set("s3.secret-key", "wJalrXUtnFEMI", Layer::kCommandLine);
  cfg.set("s3.access-key", "AKIAEXAMPLE", Layer::kCommandLine);
  cfg.set("myjob.db-password", "hunter2", Layer::kJob);
  auto eff = cfg.effective();
  EXPECT_EQ(eff.at("s3.secret-key"), "<hidden>");
  EXPECT_EQ(eff.at("myjob.db-password"), "<hidden>");
  EXPECT_EQ(eff.at("s3.access-key"), "AKIAEXAMPLE");
  for (const auto& [k, v] : eff) {
    EXPECT_EQ(v.find("wJalrXUtnFEMI"), std::string::npos) << k;
    EXPECT_EQ(v.find("hunter2"), std::string::npos) << k;
  }
}

// ...but the S3 storage gets the real secret from -D (hidden only where it is shown).
TEST_F(ConfigurationTest, TheS3StorageGetsTheSecretGivenWithD) {
  Configuration cfg;
  loadUserConfiguration(std::nullopt, {"s3.access-key=AKIAEXAMPLE", "s3.secret-key=wJalrXUtnFEMI"}, std::nullopt, &cfg);
  auto o = jobhost::state::defaultS3Options();
  EXPECT_EQ(o.accessKey, "AKIAEXAMPLE");
  EXPECT_EQ(o.secretKey, "wJalrXUtnFEMI");
  jobhost::state::setDefaultS3Options({});
}

// ---------------------------------------------------------------------------------------
// Restart strategies

Configuration restartConfig(const std::map<std::string, std::string>& values) {
  Configuration c;
  for (const auto& [k, v] : values) c.set(k, v, Layer::kJob);
  return c;
}

TEST(RestartStrategyTest, FixedDelayAllowsExactlyTheConfiguredRestarts) {
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "fixed-delay"},
                                                {"restart-strategy.fixed-delay.attempts", "3"},
                                                {"restart-strategy.fixed-delay.delay", "2 s"}}));
  EXPECT_EQ(s->describe(), "FixedDelayRestartStrategy(maxAttempts=3, delay=2 s)");
  for (int i = 0; i < 3; ++i) {
    milliseconds d{-1};
    EXPECT_TRUE(s->onFailure(&d)) << "restart " << i + 1;
    EXPECT_EQ(d, 2s);
  }
  milliseconds d{-1};
  EXPECT_FALSE(s->onFailure(&d));
  EXPECT_FALSE(s->onFailure(&d));
}

TEST(RestartStrategyTest, FixedDelayWithZeroAttemptsNeverRestarts) {
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "fixed-delay"},
                                                {"restart-strategy.fixed-delay.attempts", "0"}}));
  milliseconds d{};
  EXPECT_FALSE(s->onFailure(&d));
}

TEST(RestartStrategyTest, TheDefaultIsNoRestart) {
  auto s = createRestartStrategy(Configuration());
  EXPECT_EQ(s->describe(), "NoRestartStrategy");
  milliseconds d{};
  EXPECT_FALSE(s->onFailure(&d));
}

TEST(RestartStrategyTest, NoneAndItsAliasesNeverRestart) {
  for (const std::string type : {"none", "off", "disable"}) {
    auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", type}}));
    milliseconds d{};
    EXPECT_FALSE(s->onFailure(&d)) << type;
    EXPECT_EQ(s->describe(), "NoRestartStrategy") << type;
  }
}

TEST(RestartStrategyTest, FailureRateAllowsMaxFailuresPerInterval) {
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "failure-rate"},
                                                {"restart-strategy.failure-rate.max-failures-per-interval", "2"},
                                                {"restart-strategy.failure-rate.failure-rate-interval", "1 min"},
                                                {"restart-strategy.failure-rate.delay", "500ms"}}));
  EXPECT_EQ(s->describe(), "FailureRateRestartStrategy(maxFailuresPerInterval=2, interval=1 min, delay=500 ms)");
  milliseconds d{-1};
  EXPECT_TRUE(s->onFailure(&d));
  EXPECT_EQ(d, 500ms);
  EXPECT_TRUE(s->onFailure(&d));
  EXPECT_FALSE(s->onFailure(&d));
}

TEST(RestartStrategyTest, FailureRateForgetsFailuresOlderThanTheInterval) {
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "failure-rate"},
                                                {"restart-strategy.failure-rate.max-failures-per-interval", "1"},
                                                {"restart-strategy.failure-rate.failure-rate-interval", "30ms"},
                                                {"restart-strategy.failure-rate.delay", "0"}}));
  milliseconds d{-1};
  EXPECT_TRUE(s->onFailure(&d));
  std::this_thread::sleep_for(60ms);
  EXPECT_TRUE(s->onFailure(&d));
  EXPECT_FALSE(s->onFailure(&d));  // two within 30 ms
}

TEST(RestartStrategyTest, ExponentialDelayGrowsByTheMultiplierUpToTheMaximum) {
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "exponential-delay"},
                                                {"restart-strategy.exponential-delay.initial-backoff", "1 s"},
                                                {"restart-strategy.exponential-delay.max-backoff", "5 s"},
                                                {"restart-strategy.exponential-delay.backoff-multiplier", "2"},
                                                {"restart-strategy.exponential-delay.attempts-before-reset-backoff", "6"},
                                                {"restart-strategy.exponential-delay.jitter-factor", "0"}}));
  const std::vector<milliseconds> expected = {1s, 2s, 4s, 5s, 5s, 5s};
  for (size_t i = 0; i < expected.size(); ++i) {
    milliseconds d{-1};
    ASSERT_TRUE(s->onFailure(&d)) << "restart " << i + 1;
    EXPECT_EQ(d, expected[i]) << "restart " << i + 1;
  }
  milliseconds d{-1};
  EXPECT_FALSE(s->onFailure(&d));
  EXPECT_TRUE(contains(s->describe(), "initialBackoff=1 s")) << s->describe();
  EXPECT_TRUE(contains(s->describe(), "maxBackoff=5 s")) << s->describe();
}

TEST(RestartStrategyTest, ExponentialDelayJittersEachPauseAndStartsOverAfterTheResetThreshold) {
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "exponential-delay"},
                                                {"restart-strategy.exponential-delay.initial-backoff", "1 s"},
                                                {"restart-strategy.exponential-delay.max-backoff", "1 min"},
                                                {"restart-strategy.exponential-delay.backoff-multiplier", "2"},
                                                {"restart-strategy.exponential-delay.attempts-before-reset-backoff", "3"},
                                                {"restart-strategy.exponential-delay.reset-backoff-threshold", "50ms"},
                                                {"restart-strategy.exponential-delay.jitter-factor", "0.5"}}));
  milliseconds d{-1};
  ASSERT_TRUE(s->onFailure(&d));
  EXPECT_GE(d, 500ms);
  EXPECT_LE(d, 1500ms);
  ASSERT_TRUE(s->onFailure(&d));
  EXPECT_GE(d, 1000ms);
  EXPECT_LE(d, 3000ms);
  ASSERT_TRUE(s->onFailure(&d));
  EXPECT_FALSE(s->onFailure(&d));  // three attempts used, all in quick succession
  std::this_thread::sleep_for(80ms);  // ran longer than reset-backoff-threshold: starts over
  ASSERT_TRUE(s->onFailure(&d));
  EXPECT_LE(d, 1500ms);
  EXPECT_TRUE(contains(s->describe(), "jitter=0.5")) << s->describe();
  EXPECT_THROW(createRestartStrategy(restartConfig({{"restart-strategy.type", "exponential-delay"},
                                                     {"restart-strategy.exponential-delay.jitter-factor", "2"}})),
               ConfigError);
}

TEST(RestartStrategyTest, ExponentialDelayNeverExceedsTheMaximumEvenOnTheFirstRestart) {
  Configuration c = restartConfig({{"restart-strategy.type", "exponential-delay"},
                                   {"restart-strategy.exponential-delay.initial-backoff", "10 s"},
                                   {"restart-strategy.exponential-delay.max-backoff", "5 s"},
                                   {"restart-strategy.exponential-delay.jitter-factor", "0"}});
  std::unique_ptr<RestartStrategy> s;
  try {
    s = createRestartStrategy(c);
  } catch (const ConfigError& e) {
    // Rejecting an initial backoff above the maximum (as Flink does) is fine too.
    EXPECT_TRUE(contains(e.what(), "restart-strategy.exponential-delay.initial-backoff")) << e.what();
    return;
  }
  for (int i = 0; i < 3; ++i) {
    milliseconds d{-1};
    ASSERT_TRUE(s->onFailure(&d));
    EXPECT_LE(d, 5s) << "restart " << i + 1 << " waits longer than max-backoff";
  }
}

TEST(RestartStrategyTest, ExponentialDelayDefaultsGrowByOneAndAHalf) {
  // Flink's defaults: 1 s, x1.5, jitter 0.1.
  auto s = createRestartStrategy(restartConfig({{"restart-strategy.type", "exponential-delay"}}));
  const std::vector<milliseconds> expected = {1000ms, 1500ms, 2250ms, 3375ms};
  for (auto e : expected) {
    milliseconds d{-1};
    ASSERT_TRUE(s->onFailure(&d));
    EXPECT_GE(d.count(), e.count() * 9 / 10);
    EXPECT_LE(d.count(), e.count() * 11 / 10 + 1);
  }
}

TEST(RestartStrategyTest, AnUnknownTypeIsAConfigErrorListingTheKnownTypes) {
  Configuration c;
  c.set("restart-strategy.type", "fixed-dealy", Layer::kCommandLine);
  try {
    createRestartStrategy(c);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "'fixed-dealy'")) << msg;
    EXPECT_TRUE(contains(msg, "(from -D)")) << msg;
    EXPECT_TRUE(contains(msg, "fixed-delay, failure-rate or exponential-delay")) << msg;
  }
}

struct BadRestartCase {
  std::map<std::string, std::string> values;
  std::string mentions;
};

TEST(RestartStrategyTest, BadValuesAreConfigErrorsNamingTheKey) {
  const std::vector<BadRestartCase> cases = {
      {{{"restart-strategy.type", "fixed-delay"}, {"restart-strategy.fixed-delay.attempts", "-1"}},
       "restart-strategy.fixed-delay.attempts"},
      {{{"restart-strategy.type", "fixed-delay"}, {"restart-strategy.fixed-delay.delay", "soon"}},
       "restart-strategy.fixed-delay.delay"},
      {{{"restart-strategy.type", "failure-rate"},
        {"restart-strategy.failure-rate.max-failures-per-interval", "0"}},
       "restart-strategy.failure-rate.max-failures-per-interval"},
      {{{"restart-strategy.type", "exponential-delay"},
        {"restart-strategy.exponential-delay.backoff-multiplier", "0.5"}},
       "restart-strategy.exponential-delay.backoff-multiplier"},
      {{{"restart-strategy.type", "exponential-delay"},
        {"restart-strategy.exponential-delay.backoff-multiplier", "fast"}},
       "restart-strategy.exponential-delay.backoff-multiplier"},
  };
  for (const auto& c : cases) {
    try {
      createRestartStrategy(restartConfig(c.values));
      ADD_FAILURE() << "expected ConfigError mentioning " << c.mentions;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), c.mentions)) << e.what();
    }
  }
}

struct FormatDurationCase {
  milliseconds d;
  std::string text;
};

TEST(RestartStrategyTest, FormatDurationUsesTheLargestExactUnit) {
  const std::vector<FormatDurationCase> cases = {
      {2000ms, "2 s"}, {500ms, "500 ms"}, {60000ms, "1 min"}, {90000ms, "90 s"}, {0ms, "0 s"}, {1500ms, "1500 ms"},
      {3600000ms, "60 min"},
  };
  for (const auto& c : cases) EXPECT_EQ(formatDuration(c.d), c.text) << c.d.count();
}

// ---------------------------------------------------------------------------------------
// Key-group assignment (part of the on-disk contract: a key must land in the same key
// group in every release, or restored state is not found)

std::string serialized(const std::string& key) {
  std::string out;
  serializeInto(out, key);
  return out;
}

struct PinnedCase {
  std::string keyBytes;
  int maxParallelism;
  int keyGroup;
};

TEST(KeyGroupAssignmentTest, KeyGroupForIsStableAcrossReleases) {
  // Computed once from FNV-1a 64 + the murmur3 finaliser, modulo the key groups.
  const std::vector<PinnedCase> cases = {
      {"", 128, 46},
      {"a", 128, 101},
      {"hello", 128, 93},
      {serialized("hello"), 128, 95},
      {serialized("the"), 128, 63},
      {serialized("to"), 4096, 1749},
      {serialized("hello"), 32768, 8927},
      // Whole 8-byte blocks and the bytes after them (the loop reads 8 at a time).
      {std::string("\x01\0\0\0\0\0\0\0", 8), 128, 58},
      {std::string("\x15\xcd[\x07\0\0\0\0", 8), 4096, 541},
      {"0123456789abcdef", 128, 74},
      {"0123456789abcdefg", 4096, 3620},
      {"a much longer key of 33 bytes...!", 128, 59},
  };
  for (const auto& c : cases)
    EXPECT_EQ(keyGroupFor(c.keyBytes, c.maxParallelism), c.keyGroup)
        << ::testing::PrintToString(c.keyBytes) << " of " << c.maxParallelism;
}

TEST(KeyGroupAssignmentTest, KeyGroupsOfTenThousandKeysAreRoughlyUniform) {
  constexpr int kGroups = 128, kKeys = 10000;
  std::vector<int> counts(kGroups);
  for (int i = 0; i < kKeys; ++i) {
    int kg = keyGroupFor(serialized("key-" + std::to_string(i)), kGroups);
    ASSERT_GE(kg, 0);
    ASSERT_LT(kg, kGroups);
    ++counts[static_cast<size_t>(kg)];
  }
  const double expected = static_cast<double>(kKeys) / kGroups;  // 78.125
  double chi2 = 0;
  for (int n : counts) {
    EXPECT_GT(n, expected / 2);
    EXPECT_LT(n, expected * 1.5);
    chi2 += (n - expected) * (n - expected) / expected;
  }
  // 127 degrees of freedom: mean 127, standard deviation ~16.
  EXPECT_LT(chi2, 200) << "key groups are far from uniform";
}

TEST(KeyGroupAssignmentTest, SimilarKeysSpreadOverManyGroups) {
  std::set<int> groups;
  for (char c = 'a'; c <= 'z'; ++c) groups.insert(keyGroupFor(std::string("word") + c, 128));
  EXPECT_GE(groups.size(), 18u);
}

struct RangeCase {
  int maxParallelism;
  int parallelism;
};

TEST(KeyGroupAssignmentTest, SubtaskRangesPartitionTheKeyGroups) {
  const std::vector<RangeCase> cases = {{128, 1}, {128, 2},  {128, 3}, {128, 7},   {128, 128},
                                        {10, 3},  {1, 1},    {7, 7},   {32768, 5}, {100, 99}};
  for (const auto& c : cases) {
    SCOPED_TRACE("maxParallelism " + std::to_string(c.maxParallelism) + ", parallelism " +
                 std::to_string(c.parallelism));
    int next = 0, minSize = c.maxParallelism, maxSize = 0;
    for (int i = 0; i < c.parallelism; ++i) {
      state::KeyGroupRange r = state::keyGroupRangeFor(c.maxParallelism, c.parallelism, i);
      EXPECT_EQ(r.start, next) << "subtask " << i;
      EXPECT_FALSE(r.empty()) << "subtask " << i;
      minSize = std::min(minSize, r.size());
      maxSize = std::max(maxSize, r.size());
      next = r.end + 1;
    }
    EXPECT_EQ(next, c.maxParallelism);
    EXPECT_LE(maxSize - minSize, 1);
  }
}

TEST(KeyGroupAssignmentTest, SubtaskForKeyGroupAgreesWithTheRanges) {
  const std::vector<RangeCase> cases = {{128, 1}, {128, 2}, {128, 3},    {128, 7}, {128, 128},
                                        {10, 3},  {7, 7},   {32768, 5}, {100, 99}};
  for (const auto& c : cases) {
    for (int i = 0; i < c.parallelism; ++i) {
      state::KeyGroupRange r = state::keyGroupRangeFor(c.maxParallelism, c.parallelism, i);
      for (int kg = r.start; kg <= r.end; ++kg)
        ASSERT_EQ(state::subtaskForKeyGroup(c.maxParallelism, c.parallelism, kg), i)
            << "key group " << kg << " of " << c.maxParallelism << " with parallelism " << c.parallelism;
    }
  }
}

TEST(KeyGroupAssignmentTest, RangesMatchFlinksAssignment) {
  // Flink's KeyGroupRangeAssignment for 128 key groups and parallelism 3.
  EXPECT_EQ(state::keyGroupRangeFor(128, 3, 0), (state::KeyGroupRange{0, 42}));
  EXPECT_EQ(state::keyGroupRangeFor(128, 3, 1), (state::KeyGroupRange{43, 85}));
  EXPECT_EQ(state::keyGroupRangeFor(128, 3, 2), (state::KeyGroupRange{86, 127}));
}

// ---------------------------------------------------------------------------------------
// Restore preflight

StateDescriptorInfo reduceState() {
  StateDescriptorInfo d;
  d.name = "reduce";
  d.kind = StateKind::kValue;
  d.keySerializer = "string";
  d.keySerializerVersion = 1;
  d.valueSerializer = "pair<string,i64>";
  d.valueSerializerVersion = 1001;
  return d;
}

class PreflightTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    auto st = state::openStorage((root_ / "ckpt").string());
    ASSERT_TRUE(st.ok()) << st.status();
    storage_ = std::move(st).value();
    writeStored(kKgFile, std::string(10, 'k'));
    writeStored(kSharedFile, std::string(20, 's'));
    writeStored(kPrivateFile, std::string(8, 'p'));

    // A hashmap checkpoint 5 of WordCount: keyed "counts" and the source's position.
    meta_ = {};
    in_ = {};
    meta_.jobId = "job";
    meta_.checkpointId = 5;
    meta_.jobClass = "WordCount";
    meta_.pluginFile = "libwordcount_jobs.so";
    meta_.pluginDigest = "digest-1";
    meta_.backend = "hashmap";
    meta_.maxParallelism = 128;
    state::OperatorSnapshot counts;
    counts.uid = "counts";
    counts.name = "Keyed Aggregation";
    counts.keyed = true;
    counts.states = {reduceState()};
    state::SubtaskSnapshot sub;
    state::KeyGroupsStateHandle kg;
    kg.file = {kKgFile, 10};
    kg.range = {0, 127};
    kg.offsets.assign(128, 0);
    sub.keyed = kg;
    counts.subtasks = {sub};
    state::OperatorSnapshot source;
    source.uid = "source";
    source.name = "Text File Source";
    state::SubtaskSnapshot srcSub;
    srcSub.operatorState = "line 42";
    source.subtasks = {srcSub};
    meta_.operators = {counts, source};

    in_.metadata = &meta_;
    in_.storage = storage_.get();
    in_.snapshotPath = "/ckpt/job/chk-5";
    OperatorInfo countsInfo, sourceInfo;
    countsInfo.uid = "counts";
    countsInfo.name = "Keyed Aggregation";
    countsInfo.keyed = true;
    countsInfo.states = {reduceState()};
    sourceInfo.uid = "source";
    sourceInfo.name = "Text File Source";
    sourceInfo.source = true;
    in_.operators = {countsInfo, sourceInfo};
    in_.selectedClass = "WordCount";
    in_.pluginPath = "/plugins/libwordcount_jobs.so";
    in_.pluginDigest = "digest-1";
    in_.pluginClasses = {"WordCount", "WordCountIncremental"};
  }

  // Turns the snapshot into an incremental rocksdb checkpoint of WordCountIncremental whose
  // shared file was first written by checkpoint 2.
  void makeIncremental() {
    meta_.jobClass = "WordCountIncremental";
    meta_.backend = "rocksdb";
    meta_.incremental = true;
    state::IncrementalStateHandle inc;
    inc.backendId = "b-1";
    inc.checkpointId = 5;
    inc.range = {0, 127};
    inc.sharedFiles = {{"000012.sst", {kSharedFile, 20}, 2}};
    inc.privateFiles = {{"MANIFEST-000003", {kPrivateFile, 8}, 5}};
    meta_.operators[0].subtasks[0].keyed = inc;
  }

  // Files under the storage root, written directly: storage puts fsync, which makes these
  // tests slow, and the preflight only looks at sizes.
  void writeStored(const std::string& path, const std::string& bytes) {
    fs::path p = root_ / "ckpt" / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  }
  void removeStored(const std::string& path) { ASSERT_TRUE(fs::remove(root_ / "ckpt" / path)) << path; }

  static std::string describe(const PreflightReport& r) {
    std::string s;
    for (const auto& f : r.findings)
      s += "[" + std::to_string(f.severity) + " " + f.check + "] " + f.message + "\n";
    for (const auto& f : r.fixes) s += "fix: " + f + "\n";
    return s;
  }
  static std::vector<const PreflightFinding*> withCheck(const PreflightReport& r, const std::string& check) {
    std::vector<const PreflightFinding*> out;
    for (const auto& f : r.findings)
      if (f.check == check) out.push_back(&f);
    return out;
  }
  static bool anyFixMentions(const PreflightReport& r, const std::string& text) {
    for (const auto& f : r.fixes)
      if (contains(f, text)) return true;
    return false;
  }

  static constexpr const char* kKgFile = "job/chk-5/counts-0.kg";
  static constexpr const char* kSharedFile = "job/shared/000012.sst";
  static constexpr const char* kPrivateFile = "job/chk-5/MANIFEST-000003";
  std::unique_ptr<state::CheckpointStorage> storage_;
  state::CheckpointMetadata meta_;
  PreflightInput in_;
};

TEST_F(PreflightTest, AMatchingSnapshotHasNoFindings) {
  PreflightReport r = runPreflight(in_);
  EXPECT_TRUE(r.findings.empty()) << describe(r);
  EXPECT_TRUE(r.fixes.empty()) << describe(r);
  EXPECT_TRUE(r.compatible());
  EXPECT_TRUE(contains(r.format(in_.snapshotPath), "Snapshot /ckpt/job/chk-5 is compatible"));
}

TEST_F(PreflightTest, AnIncrementalSnapshotRestoresIntoRocksdb) {
  makeIncremental();
  in_.selectedClass = "WordCountIncremental";
  in_.backend = state::BackendType::kRocksDb;
  in_.incremental = true;
  PreflightReport r = runPreflight(in_);
  EXPECT_TRUE(r.findings.empty()) << describe(r);
}

TEST_F(PreflightTest, AnIncrementalHandleWithTheHashmapBackendIsABackendError) {
  makeIncremental();
  in_.selectedClass = "WordCountIncremental";
  PreflightReport r = runPreflight(in_);
  EXPECT_FALSE(r.compatible());
  ASSERT_EQ(r.findings.size(), 1u) << describe(r);
  const auto& f = r.findings[0];
  EXPECT_EQ(f.severity, PreflightFinding::kError);
  EXPECT_EQ(f.check, "backend");
  EXPECT_TRUE(contains(f.message, "'counts'")) << f.message;
  EXPECT_TRUE(contains(f.message, "IncrementalRemoteKeyedStateHandle")) << f.message;
  EXPECT_TRUE(contains(f.message, "hashmap")) << f.message;
  ASSERT_EQ(r.fixes.size(), 2u) << describe(r);
  EXPECT_TRUE(contains(r.fixes[0], "-D state.backend.type=rocksdb")) << r.fixes[0];
  EXPECT_TRUE(contains(r.fixes[1], "jobhost convert /ckpt/job/chk-5")) << r.fixes[1];
  const std::string text = r.format(in_.snapshotPath);
  EXPECT_TRUE(contains(text, "Cannot restore /ckpt/job/chk-5: 1 problem\n")) << text;
  EXPECT_TRUE(contains(text, "error   [backend]")) << text;
  EXPECT_TRUE(contains(text, "1. keep WordCountIncremental")) << text;
}

TEST_F(PreflightTest, ADifferentClassAloneIsOnlyAWarning) {
  in_.selectedClass = "WordCountV2";
  PreflightReport r = runPreflight(in_);
  EXPECT_TRUE(r.compatible()) << describe(r);
  ASSERT_EQ(r.findings.size(), 1u) << describe(r);
  EXPECT_EQ(r.findings[0].severity, PreflightFinding::kWarning);
  EXPECT_EQ(r.findings[0].check, "class");
  EXPECT_TRUE(contains(r.findings[0].message, "class WordCount ")) << r.findings[0].message;
  EXPECT_TRUE(contains(r.findings[0].message, "you selected WordCountV2")) << r.findings[0].message;
  EXPECT_TRUE(r.fixes.empty()) << describe(r);
}

TEST_F(PreflightTest, ADifferentClassWithABackendErrorIsReportedFirstAsTheMostLikelyCause) {
  makeIncremental();  // written by WordCountIncremental; WordCount runs on the heap
  PreflightReport r = runPreflight(in_);
  EXPECT_FALSE(r.compatible());
  ASSERT_EQ(r.findings.size(), 2u) << describe(r);
  EXPECT_EQ(r.findings[0].check, "class");
  EXPECT_EQ(r.findings[0].severity, PreflightFinding::kError);
  EXPECT_EQ(r.findings[0].message.rfind("most likely cause: ", 0), 0u) << r.findings[0].message;
  EXPECT_TRUE(contains(r.findings[0].message, "WordCountIncremental (libwordcount_jobs.so, backend rocksdb, incremental)"))
      << r.findings[0].message;
  EXPECT_TRUE(contains(r.findings[0].message, "you selected WordCount (backend hashmap)")) << r.findings[0].message;
  EXPECT_EQ(r.findings[1].check, "backend");
  ASSERT_EQ(r.fixes.size(), 3u) << describe(r);
  EXPECT_EQ(r.fixes[0].rfind("jobhost run -s /ckpt/job/chk-5 -c WordCountIncremental /plugins/libwordcount_jobs.so", 0),
            0u)
      << r.fixes[0];
  EXPECT_TRUE(contains(r.fixes[1], "state.backend.type=rocksdb")) << r.fixes[1];
  EXPECT_TRUE(contains(r.fixes[2], "jobhost convert")) << r.fixes[2];
}

TEST_F(PreflightTest, TheClassFixIsOfferedOnlyWhenThePluginHasTheWriterClass) {
  makeIncremental();
  in_.pluginClasses = {"WordCount"};
  PreflightReport r = runPreflight(in_);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].check, "class");
  EXPECT_FALSE(anyFixMentions(r, "-c WordCountIncremental")) << describe(r);
  ASSERT_FALSE(r.fixes.empty());
  EXPECT_TRUE(contains(r.fixes[0], "state.backend.type=rocksdb")) << describe(r);
}

TEST_F(PreflightTest, StateOfAnOperatorTheJobLacksIsAnErrorUnlessAllowed) {
  in_.operators.erase(in_.operators.begin());  // no "counts" any more
  PreflightReport r = runPreflight(in_);
  EXPECT_FALSE(r.compatible());
  auto ops = withCheck(r, "operator");
  ASSERT_EQ(ops.size(), 1u) << describe(r);
  EXPECT_EQ(ops[0]->severity, PreflightFinding::kError);
  EXPECT_TRUE(contains(ops[0]->message, "uid 'counts' (Keyed Aggregation)")) << ops[0]->message;
  EXPECT_TRUE(contains(ops[0]->message, "its stateful operators: 'source'")) << ops[0]->message;
  EXPECT_TRUE(anyFixMentions(r, "--allow-non-restored-state")) << describe(r);

  in_.allowNonRestoredState = true;
  PreflightReport allowed = runPreflight(in_);
  EXPECT_TRUE(allowed.compatible()) << describe(allowed);
  ops = withCheck(allowed, "operator");
  ASSERT_EQ(ops.size(), 1u) << describe(allowed);
  EXPECT_EQ(ops[0]->severity, PreflightFinding::kNote);
  EXPECT_TRUE(contains(ops[0]->message, "'counts'")) << ops[0]->message;
  EXPECT_FALSE(anyFixMentions(allowed, "--allow-non-restored-state"));
}

TEST_F(PreflightTest, AnOperatorWithoutStateNeedNotExistInTheJob) {
  state::OperatorSnapshot stateless;
  stateless.uid = "auto-1-flat-map";
  stateless.name = "Flat Map";
  stateless.subtasks.resize(1);
  meta_.operators.push_back(stateless);
  PreflightReport r = runPreflight(in_);
  EXPECT_TRUE(r.findings.empty()) << describe(r);
}

// One change to the snapshot or the run, and the single finding it must cause.
struct FindingCase {
  std::string what;
  std::function<void()> change;
  PreflightFinding::Severity severity;
  std::string check;
  std::vector<std::string> mentions;  // "<kg>" / "<shared>": the described storage path
  std::string fix;                    // a fix that must be offered ("" = none required)
};

TEST_F(PreflightTest, EachIncompatibilityIsReportedWithItsCheckAndDetails) {
  const std::vector<FindingCase> cases = {
      {"max parallelism differs",
       [this] { in_.maxParallelism = 256; },
       PreflightFinding::kError, "max-parallelism", {"128 key groups", "this run uses 256"},
       "-D pipeline.max-parallelism=128"},
      {"parallelism above the max parallelism",
       [this] { in_.parallelism = 200; },
       PreflightFinding::kError, "max-parallelism", {"parallelism 200", "-p 128"}, ""},
      {"state kind changed",
       [this] { in_.operators[0].states[0].kind = StateKind::kList; },
       PreflightFinding::kError, "state", {"'counts'", "'reduce'", "ValueState in the snapshot", "declares a ListState"},
       ""},
      {"value serializer version changed",
       [this] { in_.operators[0].states[0].valueSerializerVersion = 1002; },
       PreflightFinding::kError, "state", {"'reduce'", "pair<string,i64> v1001", "pair<string,i64> v1002"}, ""},
      {"key serializer changed",
       [this] { in_.operators[0].states[0].keySerializer = "i64"; },
       PreflightFinding::kError, "state", {"keyed by string v1", "keyed by i64 v1"}, ""},
      {"state no longer declared",
       [this] { in_.operators[0].states.clear(); },
       PreflightFinding::kWarning, "state",
       {"'reduce'", "not declared by WordCount", "kept, not read", "carried forward in every later checkpoint"}, ""},
      {"key-group file missing",
       [this] { removeStored(kKgFile); },
       PreflightFinding::kError, "files", {"file <kg>, which the snapshot's _metadata references, does not exist", "operator 'counts'"}, ""},
      {"key-group file has another size",
       [this] { writeStored(kKgFile, "short"); },
       PreflightFinding::kError, "files", {"file <kg> has 5 bytes, the snapshot's _metadata records 10 (truncated or replaced)"}, ""},
      {"plugin digest differs",
       [this] { in_.pluginDigest = "digest-2"; },
       PreflightFinding::kNote, "plugin", {"libwordcount_jobs.so", "digest-1", "now digest-2"}, ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    SetUp();  // fresh snapshot, storage and input
    c.change();
    PreflightReport r = runPreflight(in_);
    ASSERT_EQ(r.findings.size(), 1u) << describe(r);
    const auto& f = r.findings[0];
    EXPECT_EQ(f.severity, c.severity) << describe(r);
    EXPECT_EQ(f.check, c.check) << describe(r);
    for (std::string m : c.mentions) {
      for (auto [tag, path] : {std::pair<std::string, std::string>{"<kg>", kKgFile}, {"<shared>", kSharedFile}})
        if (auto pos = m.find(tag); pos != std::string::npos) m.replace(pos, tag.size(), storage_->describe(path));
      EXPECT_TRUE(contains(f.message, m)) << "expected '" << m << "' in: " << f.message;
    }
    EXPECT_EQ(r.compatible(), c.severity != PreflightFinding::kError);
    if (!c.fix.empty()) {
      EXPECT_TRUE(anyFixMentions(r, c.fix)) << describe(r);
    }
    TearDown();
  }
}

TEST_F(PreflightTest, AMissingSharedFileNamesTheCheckpointThatFirstWroteIt) {
  makeIncremental();
  in_.selectedClass = "WordCountIncremental";
  in_.backend = state::BackendType::kRocksDb;
  in_.incremental = true;
  removeStored(kSharedFile);
  PreflightReport r = runPreflight(in_);
  EXPECT_FALSE(r.compatible());
  auto files = withCheck(r, "files");
  ASSERT_EQ(files.size(), 1u) << describe(r);
  EXPECT_TRUE(contains(files[0]->message, "file " + storage_->describe(kSharedFile) + ", which the snapshot's"))
      << files[0]->message;
  EXPECT_TRUE(contains(files[0]->message, "does not exist"))
      << files[0]->message;
  EXPECT_TRUE(contains(files[0]->message, "(first written by checkpoint 2)"))
      << files[0]->message;
}

TEST_F(PreflightTest, AWrongSizeSharedFileNamesTheCheckpointThatFirstWroteIt) {
  makeIncremental();
  in_.selectedClass = "WordCountIncremental";
  in_.backend = state::BackendType::kRocksDb;
  in_.incremental = true;
  writeStored(kSharedFile, std::string(19, 's'));
  PreflightReport r = runPreflight(in_);
  auto files = withCheck(r, "files");
  ASSERT_EQ(files.size(), 1u) << describe(r);
  EXPECT_TRUE(contains(files[0]->message, storage_->describe(kSharedFile) + " has 19 bytes")) << files[0]->message;
  EXPECT_TRUE(contains(files[0]->message, "_metadata records 20")) << files[0]->message;
  EXPECT_TRUE(contains(files[0]->message, "(first written by checkpoint 2)")) << files[0]->message;
}

TEST_F(PreflightTest, EveryProblemIsCollectedNotOnlyTheFirst) {
  makeIncremental();
  in_.selectedClass = "WordCountIncremental";
  in_.maxParallelism = 64;
  in_.operators[0].states[0].kind = StateKind::kMap;
  removeStored(kPrivateFile);
  PreflightReport r = runPreflight(in_);
  std::set<std::string> checks;
  for (const auto& f : r.findings) checks.insert(f.check);
  EXPECT_EQ(checks, (std::set<std::string>{"backend", "state", "max-parallelism", "files"})) << describe(r);
  EXPECT_TRUE(contains(r.format(in_.snapshotPath), "4 problems")) << r.format(in_.snapshotPath);
}

// ---------------------------------------------------------------------------------------
// InputGate

// Cancels the gate when a test leaves early, so a thread blocked in it (and the future
// waiting for that thread) cannot hang the test. Declare it after the futures.
struct CancelOnExit {
  InputGate& gate;
  ~CancelOnExit() { gate.cancel(); }
};

ChannelEvent data(std::string bytes) {
  ChannelEvent e;
  e.kind = ChannelEvent::kData;
  e.data = std::move(bytes);
  return e;
}

ChannelEvent barrier(uint64_t id) {
  ChannelEvent e;
  e.kind = ChannelEvent::kBarrier;
  e.checkpointId = id;
  return e;
}

// The exchange writer stores each record's fields in place; the receiving task parses
// them with a ByteReader, so the bytes must be exactly ByteWriter's encoding: key group
// (u16), timestamp (i64), key and record with varint lengths (here two-byte ones too).
TEST(ExchangeWriterTest, RecordsAreWrittenInByteWritersEncoding) {
  InputGate gate(1);
  TaskRecordContext record;
  TaskMetrics metrics;
  ExchangeWriterImpl writer({&gate}, 0, 0, 1, 128, &record, &metrics, false);
  const std::string longKey(200, 'k');
  const std::string longRecord(300, 'r');
  std::string expected;
  ByteWriter w(expected);
  auto send = [&](int64_t timestamp, const std::string& key, const std::string& value) {
    record.timestamp = timestamp;
    writer.emit(key, value);
    w.writeFixed<uint16_t>(static_cast<uint16_t>(keyGroupFor(key, 128)));
    w.writeI64(timestamp);
    w.writeBytes(key);
    w.writeBytes(value);
  };
  send(42, "a", "value");
  send(-1, longKey, "");
  send(std::numeric_limits<int64_t>::min(), "b", longRecord);
  writer.flush();
  auto e = gate.tryNext({false});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, ChannelEvent::kData);
  EXPECT_EQ(e->data, expected);
  EXPECT_EQ(metrics.recordsOut.get(), 3u);

  // The consumer hands the buffer back with its bytes still in it; the writer gets it at
  // its next send and writes over it: what it sends after that is the new records only.
  gate.recycle(std::move(e->data));
  expected.clear();
  send(7, "c", "after");
  writer.flush();  // takes the recycled buffer as its next one
  e = gate.tryNext({false});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->data, expected);
  expected.clear();
  send(8, "d", "x");
  writer.flush();  // written into the recycled buffer, shorter than what it held
  e = gate.tryNext({false});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->data, expected);
}

TEST(InputGateTest, EventsArriveInOrderPerChannelTaggedWithTheirChannel) {
  InputGate gate(2, 4);
  EXPECT_EQ(gate.channels(), 2);
  ASSERT_TRUE(gate.push(1, data("a")));
  ASSERT_TRUE(gate.push(1, data("b")));
  auto e1 = gate.tryNext({false, false});
  auto e2 = gate.tryNext({false, false});
  ASSERT_TRUE(e1 && e2);
  EXPECT_EQ(e1->data, "a");
  EXPECT_EQ(e1->channel, 1);
  EXPECT_EQ(e2->data, "b");
  EXPECT_FALSE(gate.tryNext({false, false}));
}

// A processed buffer goes back to the producers: the next push hands it out with its
// memory and its size (the producer writes over it from the start and keeps its own write
// position, so it need not zero-fill it again), so a producer fills the same few buffers
// instead of a new one each time.
TEST(InputGateTest, ABufferTheConsumerRecyclesIsHandedToTheNextProducerWithItsMemory) {
  InputGate gate(2, 1 << 20);
  std::string big(32 * 1024, 'x');
  ASSERT_TRUE(gate.push(0, data(big)));
  auto e = gate.tryNext({false, false});
  ASSERT_TRUE(e);
  const char* memory = e->data.data();
  const size_t capacity = e->data.capacity();
  gate.recycle(std::move(e->data));
  std::string spare;
  ASSERT_TRUE(gate.push(1, data("y"), nullptr, false, &spare));
  EXPECT_EQ(spare.size(), big.size());
  EXPECT_EQ(spare.capacity(), capacity);
  EXPECT_EQ(spare.data(), memory) << "the consumer's buffer itself, not a copy";
  std::string none;
  ASSERT_TRUE(gate.push(1, data("z"), nullptr, false, &none));
  EXPECT_EQ(none.capacity(), std::string().capacity()) << "one recycled buffer is handed out once";
  // A bounded number are kept: recycling many leaves at most kMaxSpares to hand out.
  for (int i = 0; i < 100; ++i) gate.recycle(std::string(1024, 'r'));
  int handedOut = 0;
  for (int i = 0; i < 100; ++i) {
    std::string s;
    ASSERT_TRUE(gate.push(0, data("w"), nullptr, false, &s));
    if (s.capacity() >= 1024) ++handedOut;
  }
  EXPECT_GT(handedOut, 0);
  EXPECT_LE(handedOut, 8);
  // One grown by an outsized record is freed, not kept going round.
  gate.recycle(std::string(10 * 1024 * 1024, 'b'));
  std::string after;
  ASSERT_TRUE(gate.push(0, data("v"), nullptr, false, &after));
  EXPECT_LT(after.capacity(), size_t{1024 * 1024});
}

TEST(InputGateTest, AnUnalignedBarrierOvertakesTheQueuedDataButNotAnEarlierBarrierAndCarriesACopy) {
  InputGate gate(2, 1 << 20);
  ASSERT_TRUE(gate.push(0, data("a")));
  ASSERT_TRUE(gate.push(0, barrier(1)));  // aligned: queues behind "a"
  ASSERT_TRUE(gate.push(0, data("b")));
  ChannelEvent wm;
  wm.kind = ChannelEvent::kWatermark;
  wm.value = 7;
  ASSERT_TRUE(gate.push(0, wm));
  ASSERT_TRUE(gate.push(0, data("c")));
  ChannelEvent u = barrier(2);
  u.unaligned = true;
  ASSERT_TRUE(gate.push(0, u));
  ASSERT_TRUE(gate.push(0, data("d")));  // after the barrier: not overtaken
  // Channel 0 now reads: a, barrier 1, barrier 2 (carrying b and c), b, watermark, c, d.
  std::vector<std::string> order;
  std::vector<std::string> carried;
  while (auto e = gate.tryNext({false, false})) {
    switch (e->kind) {
      case ChannelEvent::kData: order.push_back(e->data); break;
      case ChannelEvent::kBarrier:
        order.push_back("B" + std::to_string(e->checkpointId));
        if (e->unaligned) carried = e->overtaken;
        else EXPECT_TRUE(e->overtaken.empty());
        break;
      case ChannelEvent::kWatermark: order.push_back("W"); break;
      default: order.push_back("?");
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "B1", "B2", "b", "W", "c", "d"}));
  EXPECT_EQ(carried, (std::vector<std::string>{"b", "c"}));
}

TEST(InputGateTest, AnUnalignedBarrierAndTheDataBeforeItDoNotWaitForRoomInAFullChannel) {
  InputGate gate(1, 2);
  ASSERT_TRUE(gate.push(0, data("12")));  // full now
  ASSERT_TRUE(gate.push(0, data("34"), nullptr, /*noWait=*/true));
  ChannelEvent u = barrier(3);
  u.unaligned = true;
  ASSERT_TRUE(gate.push(0, u));
  auto first = gate.tryNext({false});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(first->overtaken, (std::vector<std::string>{"12", "34"}));
}

TEST(InputGateTest, AProducerBlocksOnAFullChannelUntilTheConsumerTakes) {
  InputGate gate(1, 2);
  ASSERT_TRUE(gate.push(0, data("1")));
  ASSERT_TRUE(gate.push(0, data("2")));
  auto pushed = std::async(std::launch::async, [&] { return gate.push(0, data("3")); });
  CancelOnExit guard{gate};
  EXPECT_EQ(pushed.wait_for(50ms), std::future_status::timeout) << "push into a full channel did not block";
  auto first = gate.next({false});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->data, "1");
  ASSERT_EQ(pushed.wait_for(2s), std::future_status::ready) << "taking an event did not wake the producer";
  EXPECT_TRUE(pushed.get());
  EXPECT_EQ(gate.next({false})->data, "2");
  EXPECT_EQ(gate.next({false})->data, "3");
}

TEST(InputGateTest, BarriersAndEndMarkersNeverWaitForSpace) {
  InputGate gate(1, 1);
  ASSERT_TRUE(gate.push(0, data("full")));
  auto pushed = std::async(std::launch::async, [&] {
    ChannelEvent end;
    end.kind = ChannelEvent::kEnd;
    return gate.push(0, barrier(7)) && gate.push(0, std::move(end));
  });
  CancelOnExit guard{gate};
  ASSERT_EQ(pushed.wait_for(2s), std::future_status::ready) << "a barrier waited for space";
  EXPECT_TRUE(pushed.get());
  EXPECT_EQ(gate.next({false})->kind, ChannelEvent::kData);
  auto b = gate.next({false});
  EXPECT_EQ(b->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(b->checkpointId, 7u);
  EXPECT_EQ(gate.next({false})->kind, ChannelEvent::kEnd);
}

TEST(InputGateTest, BlockedChannelsAreSkipped) {
  InputGate gate(3, 4);
  ASSERT_TRUE(gate.push(0, barrier(1)));
  ASSERT_TRUE(gate.push(0, data("after-barrier")));
  ASSERT_TRUE(gate.push(2, data("c2")));
  const std::vector<bool> aligning = {true, false, false};  // channel 0 delivered its barrier
  auto e = gate.next(aligning);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->channel, 2);
  EXPECT_EQ(e->data, "c2");
  EXPECT_FALSE(gate.tryNext(aligning)) << "an event of a blocked channel was delivered";
  auto later = gate.tryNext({false, false, false});
  ASSERT_TRUE(later);
  EXPECT_EQ(later->channel, 0);
  EXPECT_EQ(later->kind, ChannelEvent::kBarrier);
}

TEST(InputGateTest, NextWaitsForAnUnblockedChannel) {
  InputGate gate(2, 4);
  ASSERT_TRUE(gate.push(0, data("blocked")));
  auto got = std::async(std::launch::async, [&] { return gate.next({true, false}); });
  CancelOnExit guard{gate};
  EXPECT_EQ(got.wait_for(50ms), std::future_status::timeout) << "next() returned an event of a blocked channel";
  ASSERT_TRUE(gate.push(1, data("free")));
  ASSERT_EQ(got.wait_for(2s), std::future_status::ready);
  auto e = got.get();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->data, "free");
}

// Aligned checkpoint timeout: a convertible barrier stays in its place until its
// checkpoint is older than the timeout while some channel has not delivered it; then
// every queued barrier of that checkpoint overtakes the data before it (carrying copies),
// and one pushed later overtakes at once. Data after a barrier never moves.
ChannelEvent convertibleBarrier(uint64_t id, std::chrono::steady_clock::time_point started) {
  ChannelEvent e;
  e.kind = ChannelEvent::kBarrier;
  e.checkpointId = id;
  e.convertible = true;
  e.started = started;
  return e;
}

TEST(InputGateTest, ALateConvertibleBarrierTurnsUnalignedAndOvertakesTheDataBeforeIt) {
  InputGate gate(2, 1 << 20);
  gate.setAlignedCheckpointTimeout(100ms);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.push(0, data("a1")));
  ASSERT_TRUE(gate.push(0, data("a2")));
  ASSERT_TRUE(gate.push(0, convertibleBarrier(7, start)));
  ASSERT_TRUE(gate.push(0, data("after")));
  const std::vector<bool> open = {false, false};
  std::this_thread::sleep_for(120ms);  // a slow consumer: the barrier is late now
  auto e = gate.tryNext(open);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(e->checkpointId, 7u);
  EXPECT_TRUE(e->unaligned);
  EXPECT_EQ(e->overtaken, (std::vector<std::string>{"a1", "a2"})) << "the data before it, and only that";
  EXPECT_EQ(gate.tryNext(open)->data, "a1");
  EXPECT_EQ(gate.tryNext(open)->data, "a2");
  EXPECT_EQ(gate.tryNext(open)->data, "after");
  ASSERT_TRUE(gate.push(1, data("b1")));
  ASSERT_TRUE(gate.push(1, convertibleBarrier(7, start)));  // pushed after the conversion
  auto late = gate.tryNext(open);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->kind, ChannelEvent::kBarrier);
  EXPECT_TRUE(late->unaligned);
  EXPECT_EQ(late->overtaken, std::vector<std::string>{"b1"});
}

// A consumer aligning checkpoint 8 (channel 0 delivered it and is blocked) waits for
// channel 1, whose barrier has not reached the gate: at the timeout it is woken with an
// unaligned copy of channel 0's barrier, and so switches to unaligned at once.
TEST(InputGateTest, AConsumerWaitingForALateBarrierIsWokenToSwitchAtTheTimeout) {
  InputGate gate(2, 1 << 20);
  gate.setAlignedCheckpointTimeout(100ms);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.push(0, convertibleBarrier(8, start)));
  auto aligned = gate.tryNext({false, false});
  ASSERT_TRUE(aligned);
  ASSERT_EQ(aligned->kind, ChannelEvent::kBarrier);
  if (std::chrono::steady_clock::now() - start < 100ms) {
    EXPECT_FALSE(aligned->unaligned);
  }
  ASSERT_TRUE(gate.push(0, data("after")));  // channel 0 is blocked: this waits
  auto e = gate.next({true, false}, std::chrono::steady_clock::now() + 10s);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  ASSERT_TRUE(e) << "not woken at the timeout";
  EXPECT_EQ(e->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(e->checkpointId, 8u);
  EXPECT_TRUE(e->unaligned);
  EXPECT_EQ(e->channel, 0);
  EXPECT_TRUE(e->overtaken.empty()) << "what follows a delivered barrier is not in flight";
  ASSERT_TRUE(gate.push(1, data("c1")));
  ASSERT_TRUE(gate.push(1, convertibleBarrier(8, start)));
  auto b = gate.tryNext({true, false});
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->unaligned);
  EXPECT_EQ(b->overtaken, std::vector<std::string>{"c1"});
}

// Channel 0 is blocked by the alignment of checkpoint 8 (aborted meanwhile: channel 1
// never brings its barrier). Checkpoint 9's barrier, late behind channel 0's data, turns
// unaligned and is handed out although its channel is blocked, so the consumer abandons 8
// for 9 instead of waiting for channel 1 to drain.
TEST(InputGateTest, ALateBarrierTurnedUnalignedIsHandedOutFromABlockedChannel) {
  InputGate gate(2, 1 << 20);
  gate.setAlignedCheckpointTimeout(50ms);
  ASSERT_TRUE(gate.push(0, barrier(8)));
  ASSERT_EQ(gate.tryNext({false, false})->checkpointId, 8u);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.push(0, data("d")));
  ASSERT_TRUE(gate.push(0, convertibleBarrier(9, start)));
  auto e = gate.next({true, false}, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(e) << "a blocked channel's late barrier was never handed out";
  EXPECT_EQ(e->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(e->checkpointId, 9u);
  EXPECT_TRUE(e->unaligned);
  EXPECT_EQ(e->overtaken, std::vector<std::string>{"d"});
  EXPECT_FALSE(gate.tryNext({true, false})) << "data of a blocked channel was handed out";
}

TEST(InputGateTest, ABarrierEveryChannelDeliveredInTimeStaysAligned) {
  InputGate gate(1, 1 << 20);
  gate.setAlignedCheckpointTimeout(200ms);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.push(0, convertibleBarrier(3, {})));  // the timeout runs from its arrival
  auto e = gate.tryNext({false});
  ASSERT_TRUE(e);
  if (std::chrono::steady_clock::now() - start < 200ms) {
    EXPECT_FALSE(e->unaligned);
  }
  std::this_thread::sleep_for(250ms);
  ASSERT_TRUE(gate.push(0, data("x")));
  auto d = gate.tryNext({false});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->kind, ChannelEvent::kData) << "a barrier delivered in time must not turn anything unaligned";
  // A savepoint's barrier (not convertible) never turns.
  ASSERT_TRUE(gate.push(0, data("y")));
  ASSERT_TRUE(gate.push(0, barrier(4)));
  std::this_thread::sleep_for(250ms);
  EXPECT_EQ(gate.tryNext({false})->data, "y");
  EXPECT_FALSE(gate.tryNext({false})->unaligned);
}

TEST(InputGateTest, ChannelsAreServedInTheOrderTheirEventsArrived) {
  InputGate gate(2, 1 << 20);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(gate.push(0, data("a" + std::to_string(i))));
  ASSERT_TRUE(gate.push(1, data("b0")));
  ASSERT_TRUE(gate.push(0, data("a3")));
  ASSERT_TRUE(gate.push(1, data("b1")));
  std::vector<std::string> order;
  while (auto e = gate.tryNext({false, false})) order.push_back(e->data);
  // A round robin over the channels would give a0 b0 a1 b1 a2 a3.
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "a1", "a2", "b0", "a3", "b1"}));
}

TEST(InputGateTest, BarriersOneProducerSendsToTwoChannelsAreTakenWithOnlyWhatItSentBetweenThem) {
  // One producer feeding both channels (as a source feeds the two inputs of a join): it
  // filled channel 0 more than channel 1, then flushed and sent the barrier to each. The
  // consumer blocks channel 0 at its barrier (alignment) until channel 1's arrives.
  InputGate gate(2, 1 << 20);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(gate.push(0, data("a" + std::to_string(i))));
  ASSERT_TRUE(gate.push(1, data("b0")));
  ASSERT_TRUE(gate.push(0, barrier(1)));
  ASSERT_TRUE(gate.push(1, data("b1")));  // the partial buffer flushed before its barrier
  ASSERT_TRUE(gate.push(1, barrier(1)));
  std::vector<bool> blocked{false, false};
  std::vector<std::string> whileAligning;
  int barriers = 0;
  while (auto e = gate.tryNext(blocked)) {
    if (e->kind == ChannelEvent::kBarrier) {
      blocked[static_cast<size_t>(e->channel)] = true;
      ++barriers;
    } else if (barriers == 1) {
      whileAligning.push_back(e->data);
    }
  }
  EXPECT_EQ(barriers, 2);
  // A round robin (a0 b0 a1 b1 a2, channel 1's barrier) would have taken a3 to a7 while
  // aligning.
  EXPECT_EQ(whileAligning, (std::vector<std::string>{"b1"}));
}

TEST(InputGateTest, ABarrierTheTimeoutTurnedUnalignedIsTakenBeforeOlderDataOfOtherChannels) {
  InputGate gate(2, 1 << 20);
  gate.setAlignedCheckpointTimeout(50ms);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.push(0, data("a")));  // older than everything on channel 1
  ASSERT_TRUE(gate.push(1, data("b")));
  ASSERT_TRUE(gate.push(1, convertibleBarrier(3, start)));
  std::this_thread::sleep_for(100ms);  // late now; channel 0 never delivered barrier 3
  auto first = gate.tryNext({false, false});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(first->channel, 1);
  EXPECT_EQ(first->checkpointId, 3u);
  EXPECT_TRUE(first->unaligned);
  EXPECT_EQ(first->overtaken, std::vector<std::string>{"b"});
  EXPECT_EQ(gate.tryNext({false, false})->data, "a");
  EXPECT_EQ(gate.tryNext({false, false})->data, "b");
}

TEST(InputGateTest, AnUnalignedBarrierIsTakenBeforeOlderDataOfOtherChannels) {
  InputGate gate(2, 1 << 20);
  ASSERT_TRUE(gate.push(0, data("a")));
  ASSERT_TRUE(gate.push(1, data("b")));
  ChannelEvent u = barrier(5);
  u.unaligned = true;
  ASSERT_TRUE(gate.push(1, u));
  auto first = gate.tryNext({false, false});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->kind, ChannelEvent::kBarrier);
  EXPECT_EQ(first->channel, 1);
  EXPECT_EQ(first->overtaken, (std::vector<std::string>{"b"}));
  EXPECT_EQ(gate.tryNext({false, false})->data, "a");
  EXPECT_EQ(gate.tryNext({false, false})->data, "b");
}

TEST(InputGateTest, CancelWakesABlockedProducerAndABlockedConsumer) {
  InputGate full(1, 1);
  ASSERT_TRUE(full.push(0, data("x")));
  auto producer = std::async(std::launch::async, [&] { return full.push(0, data("y")); });
  InputGate empty(1, 1);
  auto consumer = std::async(std::launch::async, [&] { return empty.next({false}); });
  CancelOnExit guardFull{full}, guardEmpty{empty};
  EXPECT_EQ(producer.wait_for(30ms), std::future_status::timeout);
  EXPECT_EQ(consumer.wait_for(0ms), std::future_status::timeout);
  full.cancel();
  empty.cancel();
  ASSERT_EQ(producer.wait_for(2s), std::future_status::ready) << "cancel() did not wake the producer";
  ASSERT_EQ(consumer.wait_for(2s), std::future_status::ready) << "cancel() did not wake the consumer";
  EXPECT_FALSE(producer.get());
  EXPECT_FALSE(consumer.get().has_value());
}

TEST(InputGateTest, CapacityCountsBytesNotEvents) {
  InputGate gate(1, 10);
  ASSERT_TRUE(gate.push(0, data("12345")));
  ASSERT_TRUE(gate.push(0, data("1234")));  // 9 bytes held: under 10, accepted
  auto pushed = std::async(std::launch::async, [&] { return gate.push(0, data("x")); });
  std::future<bool> blocked;
  CancelOnExit guard{gate};  // after the futures: cancels before their destructors wait
  // Generous: on a loaded machine the pushing thread may not run for a while (50 ms here
  // failed a CI run once); only a push that blocks never returns.
  ASSERT_EQ(pushed.wait_for(10s), std::future_status::ready) << "a channel holding 9 of 10 bytes refused data";
  EXPECT_TRUE(pushed.get());
  blocked = std::async(std::launch::async, [&] { return gate.push(0, data("y")); });  // 10 held: full
  EXPECT_EQ(blocked.wait_for(50ms), std::future_status::timeout) << "a channel holding 10 of 10 bytes took more";
  EXPECT_EQ(gate.next({false})->data, "12345");
  ASSERT_EQ(blocked.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(blocked.get());
}

// ---------------------------------------------------------------------------------------
// Buffer debloating

TEST(BufferDebloaterTest, SizesAChannelToTheTargetTimeOfTheMeasuredRate) {
  BufferDebloater d({.target = 10ms, .period = 200ms});
  EXPECT_EQ(d.channelBytes(), kMaxChannelBytes) << "a channel starts full-sized";
  EXPECT_EQ(d.bufferBytes(), kMaxBufferBytes);
  // 2 MB in 100 ms of busy time: 20 MB/s, 200 kB per 10 ms.
  ASSERT_TRUE(d.onPeriod(2'000'000, 100ms));
  EXPECT_DOUBLE_EQ(d.rate(), 20e6);
  EXPECT_EQ(d.channelBytes(), 200'000u);
  EXPECT_EQ(d.bufferBytes(), kMaxBufferBytes) << "a quarter of 200 kB is more than a full buffer";
  // The rate drops to 1 MB/s: the average follows by 30 % per period.
  ASSERT_TRUE(d.onPeriod(100'000, 100ms));
  EXPECT_DOUBLE_EQ(d.rate(), 20e6 + 0.3 * (1e6 - 20e6));
  EXPECT_EQ(d.channelBytes(), static_cast<size_t>(d.rate() * 0.010));
  for (int i = 0; i < 40; ++i) d.onPeriod(100'000, 100ms);
  EXPECT_NEAR(static_cast<double>(d.channelBytes()), 10'000, 1'200);  // within the 10 % step
  EXPECT_NEAR(static_cast<double>(d.bufferBytes()), 2'500, 300);
}

TEST(BufferDebloaterTest, StaysWithinItsBoundsAndIgnoresWhatSaysNothing) {
  struct Case {
    const char* what;
    uint64_t bytes;
    std::chrono::nanoseconds busy;
    size_t channelBytes;
  };
  const Case cases[] = {
      {"a task that consumed nothing in its busy time gets the smallest channel", 0, 200ms,
       BufferDebloater::kMinChannelBytes},
      {"a very fast task is capped at the size without debloating", 10'000'000'000, 100ms, kMaxChannelBytes},
      {"a period with under 1 ms of busy time is ignored", 1, 900us, kMaxChannelBytes},
  };
  for (const auto& c : cases) {
    BufferDebloater d({.target = 10ms, .period = 200ms});
    d.onPeriod(c.bytes, c.busy);
    EXPECT_EQ(d.channelBytes(), c.channelBytes) << c.what;
    EXPECT_GE(d.bufferBytes(), BufferDebloater::kMinBufferBytes) << c.what;
    EXPECT_LE(d.bufferBytes(), kMaxBufferBytes) << c.what;
  }
  BufferDebloater off({.target = 0ms, .period = 200ms});
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.onPeriod(1000, 100ms)) << "debloating off changed a channel";
  EXPECT_EQ(off.channelBytes(), kMaxChannelBytes);
  BufferDebloater steady({.target = 10ms, .period = 200ms});
  ASSERT_TRUE(steady.onPeriod(1'000'000, 100ms));  // 10 MB/s: 100 kB
  EXPECT_FALSE(steady.onPeriod(1'050'000, 100ms)) << "a change under 10 % resized the channel";
  EXPECT_EQ(steady.channelBytes(), 100'000u);
}

TEST(BufferDebloaterTest, ATaskThatKeepsUpMayHoldMoreUpToItsShareOfTheGate) {
  BufferDebloater d({.target = 1s, .period = 200ms}, 2);
  EXPECT_EQ(BufferDebloater::mostChannelBytes(2), kMaxGateBytes / 2);
  // 100 MB/s while busy, waiting for input 40 % of the time: a second of that is more
  // than the channel's share of the gate, so it gets the share.
  ASSERT_TRUE(d.onPeriod(12'000'000, 120ms, 80ms));
  EXPECT_DOUBLE_EQ(d.idleShare(), 0.4);
  EXPECT_EQ(d.channelBytes(), kMaxGateBytes / 2);
  // Back-pressured from now on (it never waits): within a few periods the average share
  // of waiting falls under a tenth and the channel is back at the size without debloating.
  for (int i = 0; i < 10; ++i) d.onPeriod(20'000'000, 200ms, 0ms);
  EXPECT_LT(d.idleShare(), BufferDebloater::kKeepsUpIdleShare);
  EXPECT_EQ(d.channelBytes(), kMaxChannelBytes);
  // However many channels share a gate, each may hold what it holds without debloating.
  EXPECT_EQ(BufferDebloater::mostChannelBytes(64), kMaxChannelBytes);
}

// A consumer much faster than its producer, which sends 256 KiB at a time and then
// pauses: the consumer waits for input most of the time, so with debloating its channel
// may grow past the size without debloating (up to its share of the gate); without
// debloating it keeps that size.
TEST(InputGateTest, DebloatingGrowsTheChannelOfAConsumerThatKeepsUp) {
  for (bool debloat : {false, true}) {
    SCOPED_TRACE(debloat ? "debloating on" : "debloating off");
    InputGate gate(1, kMaxChannelBytes, BufferDebloatOptions{.target = debloat ? 1s : 0ms, .period = 20ms});
    std::atomic<bool> stop{false};
    auto producer = std::async(std::launch::async, [&] {
      while (!stop) {
        for (int i = 0; i < 8 && !stop; ++i)
          if (!gate.push(0, data(std::string(32 * 1024, 'r')))) return;
        std::this_thread::sleep_for(5ms);
      }
    });
    CancelOnExit guard{gate};
    const auto until = std::chrono::steady_clock::now() + 400ms;
    while (std::chrono::steady_clock::now() < until)
      if (gate.next({false}, until)) std::this_thread::sleep_for(200us);  // busy: not waiting in the gate
    stop = true;
    gate.cancel();
    producer.get();
    if (debloat) {
      EXPECT_GT(gate.capacityBytes(), kMaxChannelBytes);
      EXPECT_LE(gate.capacityBytes(), kMaxGateBytes);
    } else {
      EXPECT_EQ(gate.capacityBytes(), kMaxChannelBytes);
    }
  }
}

// A consumer that takes a 1 KiB buffer every millisecond (about 1 MB/s while busy) from a
// producer that never stops: with a 10 ms target its channel shrinks to about 10 kB and
// the producer is asked for buffers of a quarter of that; without debloating the channel
// keeps its full size.
TEST(InputGateTest, DebloatingShrinksTheChannelsOfASlowConsumer) {
  for (bool debloat : {false, true}) {
    SCOPED_TRACE(debloat ? "debloating on" : "debloating off");
    InputGate gate(1, kMaxChannelBytes, BufferDebloatOptions{.target = debloat ? 10ms : 0ms, .period = 20ms});
    std::atomic<bool> stop{false};
    auto producer = std::async(std::launch::async, [&] {
      while (!stop && gate.push(0, data(std::string(1024, 'r')))) {
      }
    });
    CancelOnExit guard{gate};
    const auto until = std::chrono::steady_clock::now() + 300ms;
    while (std::chrono::steady_clock::now() < until) {
      ASSERT_TRUE(gate.next({false}));
      std::this_thread::sleep_for(1ms);  // busy: not waiting in the gate
    }
    stop = true;
    gate.cancel();
    producer.get();
    if (debloat) {
      // 1 KiB per 1-2 ms on a loaded machine: 5-10 kB; the bounds leave room for a
      // machine ten times slower or faster.
      EXPECT_LT(gate.capacityBytes(), 100'000u);
      EXPECT_GE(gate.capacityBytes(), BufferDebloater::kMinChannelBytes);
      EXPECT_LT(gate.bufferBytes(), kMaxBufferBytes);
    } else {
      EXPECT_EQ(gate.capacityBytes(), kMaxChannelBytes);
      EXPECT_EQ(gate.bufferBytes(), kMaxBufferBytes);
    }
  }
}

TEST(InputGateTest, AfterCancelPushFailsAndNextReturnsNothing) {
  InputGate gate(1, 4);
  ASSERT_TRUE(gate.push(0, data("queued")));
  gate.cancel();
  EXPECT_FALSE(gate.push(0, data("late")));
  EXPECT_FALSE(gate.push(0, barrier(1)));
  EXPECT_FALSE(gate.tryNext({false}).has_value());
  EXPECT_FALSE(gate.next({false}).has_value());
}

TEST(InputGateTest, AWakeUpMakesOneNextReturnNothingInsteadOfWaitingAndDoesNotAccumulate) {
  InputGate gate(1, 4);
  gate.wakeUp();
  gate.wakeUp();
  EXPECT_FALSE(gate.next({false}).has_value());  // returns at once: no event, woken
  ASSERT_TRUE(gate.push(0, data("after")));
  auto e = gate.next({false});  // the second wake-up did not count
  ASSERT_TRUE(e);
  EXPECT_EQ(e->data, "after");
}

TEST(InputGateTest, AnEventAlreadyQueuedIsDeliveredBeforeAWakeUp) {
  InputGate gate(1, 4);
  ASSERT_TRUE(gate.push(0, data("queued")));
  gate.wakeUp();
  auto e = gate.next({false});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->data, "queued");
  EXPECT_FALSE(gate.next({false}).has_value());  // then the wake-up
}

TEST(InputGateTest, AWakeUpWakesAConsumerWaitingOnBlockedChannels) {
  InputGate gate(2, 4);
  ASSERT_TRUE(gate.push(0, data("blocked")));
  auto got = std::async(std::launch::async, [&] { return gate.next({true, false}); });
  CancelOnExit guard{gate};
  gate.wakeUp();
  ASSERT_EQ(got.wait_for(10s), std::future_status::ready) << "wakeUp() did not wake the consumer";
  EXPECT_FALSE(got.get().has_value());
  EXPECT_TRUE(gate.push(1, data("still usable")));
}

}  // namespace
}  // namespace jobhost::host
