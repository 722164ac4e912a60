// tests/s3/fault_proxy.h — tests/s3/fault_proxy.py in front of the tests' RGW: a client's
// HTTP traffic gets real error answers from a server (503, resets, slow or short answers),
// switched on and off through the proxy's control file. Used by the S3 storage tests and
// the end-to-end tests that drive jobhost through it.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "e2e/process.h"
#include "s3/rgw_environment.h"

namespace s3test {

namespace fs = std::filesystem;

class FaultProxy {
 public:
  /// `control`: the proxy's control file (outages switched on and off with setOutage()).
  FaultProxy(const fs::path& dir, const std::string& rule, const fs::path& control = {})
      : portFile_(dir / ("proxy-" + fileName(rule) + ".port")),
        out_(dir / ("proxy-" + fileName(rule) + ".out")),
        control_(control),
        p_(arguments(rule, portFile_, control), out_, dir / ("proxy-" + fileName(rule) + ".err")) {
    for (int i = 0; i < 500 && !fs::exists(portFile_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (fs::exists(portFile_)) endpoint_ = "http://127.0.0.1:" + e2e::readFile(portFile_);
  }
  ~FaultProxy() { p_.signal(SIGKILL); }
  const std::string& endpoint() const { return endpoint_; }
  size_t injected() const {
    std::string out = e2e::readFile(out_);
    return static_cast<size_t>(std::count(out.begin(), out.end(), '\n'));
  }
  std::string log() const { return e2e::readFile(out_); }
  /// Switches the outage: "503", "reset", "slow-5", "head-no-length", "short-body",
  /// "500-put" (optionally ":MATCH"), or "up" to end it (fault_proxy.py's control file).
  void setOutage(const std::string& mode) const {
    fs::path t = control_;
    t += ".tmp";
    { std::ofstream(t) << mode << "\n"; }
    fs::rename(t, control_);
  }

 private:
  static std::vector<std::string> arguments(const std::string& rule, const fs::path& port, const fs::path& control) {
    std::vector<std::string> a = {"/usr/bin/python3", JOBHOST_FAULT_PROXY, s3test::rgw().endpoint, rule, port.string()};
    if (!control.empty()) a.push_back(control.string());
    return a;
  }
  static std::string fileName(std::string rule) {
    std::replace(rule.begin(), rule.end(), '/', '_');
    return rule;
  }

  fs::path portFile_, out_, control_;
  e2e::Process p_;
  std::string endpoint_;
};

}  // namespace s3test
