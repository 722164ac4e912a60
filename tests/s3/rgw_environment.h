// tests/s3/rgw_environment.h — one Ceph RGW per test binary (tests/s3/rgw.sh), started in
// a temporary directory before the first test and stopped after the last. Without Ceph
// installed rgw() reports why (skipReason) and tests skip, unless JOBHOST_REQUIRE_S3=1
// (then they fail). With S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY and S3_BUCKET set,
// that store is used instead and nothing is started.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace s3test {

struct Rgw {
  std::string endpoint, accessKey, secretKey, bucket;
  std::string dir;         // the cluster's directory ("" when not started here)
  std::string skipReason;  // set when the tests skip
  bool started = false;
};

inline Rgw& rgw() {
  static Rgw r;
  return r;
}

inline std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

inline bool requireS3() {
  const char* v = std::getenv("JOBHOST_REQUIRE_S3");
  return v != nullptr && std::string(v) == "1";
}

class RgwEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    Rgw& r = rgw();
    if (const char* ep = std::getenv("S3_ENDPOINT"); ep != nullptr && *ep != 0) {
      r.endpoint = ep;
      r.accessKey = std::getenv("S3_ACCESS_KEY") ? std::getenv("S3_ACCESS_KEY") : "";
      r.secretKey = std::getenv("S3_SECRET_KEY") ? std::getenv("S3_SECRET_KEY") : "";
      r.bucket = std::getenv("S3_BUCKET") ? std::getenv("S3_BUCKET") : "";
      r.started = true;
      return;
    }
    char tmpl[] = "/tmp/jhs3.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      r.skipReason = "cannot create a temporary directory";
      return;
    }
    r.dir = tmpl;
    int status = 0;
    std::string out = run("bash " JOBHOST_RGW_SH " start " + r.dir + " 2>" + r.dir + "/start.err", &status);
    std::ifstream errFile(r.dir + "/start.err");
    std::string err((std::istreambuf_iterator<char>(errFile)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "%s", err.c_str());
    if (status != 0) {
      r.skipReason = (status == 3 ? "Ceph is not installed (" : "rgw.sh start failed (") + err + ")";
      return;
    }
    std::map<std::string, std::string> kv;
    size_t pos = 0;
    while (pos < out.size()) {
      size_t nl = out.find('\n', pos);
      std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? out.size() : nl + 1;
      size_t eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    r.endpoint = kv["S3_ENDPOINT"];
    r.accessKey = kv["S3_ACCESS_KEY"];
    r.secretKey = kv["S3_SECRET_KEY"];
    r.bucket = kv["S3_BUCKET"];
    r.started = !r.endpoint.empty() && !r.bucket.empty();
    if (!r.started) r.skipReason = "rgw.sh printed no S3_ENDPOINT/S3_BUCKET: " + out;
  }

  void TearDown() override {
    Rgw& r = rgw();
    if (r.dir.empty()) return;
    int status = 0;
    run("bash " JOBHOST_RGW_SH " stop " + r.dir + " 2>&1", &status);
    std::error_code ec;
    std::filesystem::remove_all(r.dir, ec);
  }
};

inline ::testing::Environment* const kRgwEnv = ::testing::AddGlobalTestEnvironment(new RgwEnvironment);

}  // namespace s3test
