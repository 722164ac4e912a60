// host/ui/http_server.h — the HTTP side of `jobhost ui`: kj-http in front of
// DashboardAccess (dashboard_access.h) and Dashboard (dashboard.h). serveDashboard()
// (dashboard.h) listens on a socket with it; tests/fuzz/http_request_fuzz.cc feeds it
// bytes through an in-memory pipe.
//
// Thread-safety: lives on one thread with a kj event loop; requests that need a job run
// on worker threads (at most 16 at once) and answer through cross-thread fulfillers.
#pragma once

#include <chrono>
#include <memory>

#include "ui/dashboard.h"
#include "ui/dashboard_access.h"

namespace kj {
class HttpServer;
class Timer;
}  // namespace kj

namespace jobhost::host {

class DashboardHttpServer {
 public:
  DashboardHttpServer(kj::Timer& timer, std::shared_ptr<Dashboard> dashboard, DashboardAccess access);
  /// Waits for requests in flight (up to 10 s; a savepoint may still run, detached).
  ~DashboardHttpServer();
  DashboardHttpServer(const DashboardHttpServer&) = delete;
  DashboardHttpServer& operator=(const DashboardHttpServer&) = delete;

  /// listenHttp() on a listener or on one connection.
  kj::HttpServer& server();
  /// Waits up to `timeout` for requests running on worker threads.
  void drain(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jobhost::host
