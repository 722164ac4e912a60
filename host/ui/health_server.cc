// `jobhost run --health-port`: see health_server.h.
#include "ui/health_server.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <spdlog/spdlog.h>

// GCC 12 reports a false -Wmaybe-uninitialized inside kj promise templates.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <future>
#include <thread>

#include "config/units.h"
#include "metrics/prometheus_text.h"
#include "ui/http_serving.h"
#include "wall_clock.h"

namespace jobhost::host {

namespace {

constexpr size_t kMaxHealthConnections = 16;

HttpReply text(int status, std::string body) { return HttpReply{status, "text/plain; charset=utf-8", body + "\n"}; }

}  // namespace

HttpReply readinessReply(const JobStatusInfo& s, std::chrono::milliseconds maxCheckpointAge, int64_t now) {
  if (s.state != JobState::kRunning || s.runningSinceMs == 0)
    return text(503, std::string("not ready: the job is ") + jobStateName(s.state));
  if (maxCheckpointAge.count() <= 0) return text(200, "ready");
  // The attempt's start counts as a checkpoint: a job that just started (or restored an
  // old one) gets the whole age for its first checkpoint.
  const int64_t since = std::max(s.lastCheckpointCompletedMs, s.runningSinceMs);
  const std::chrono::milliseconds age{now - since};
  if (age <= maxCheckpointAge) return text(200, "ready");
  std::string why = s.lastCheckpointCompletedMs >= s.runningSinceMs
                        ? "the newest checkpoint (" + std::to_string(s.lastCheckpointId) + ") completed " +
                              formatDuration(age) + " ago"
                        : "no checkpoint completed in the " + formatDuration(age) + " since the attempt started";
  if (s.storeUnavailableSinceMs > 0)
    why += "; the checkpoint store has been unavailable for " +
           formatDuration(std::chrono::milliseconds(now - s.storeUnavailableSinceMs));
  return text(503, "not ready: " + why + ", more than health.readiness.max-checkpoint-age " +
                       formatDuration(maxCheckpointAge));
}

HttpReply healthReply(const std::string& method, const std::string& target, JobControl& job,
                      std::chrono::milliseconds maxCheckpointAge) {
  const std::string path = target.substr(0, target.find_first_of("?#"));
  const bool known = path == "/healthz" || path == "/readyz" || path == "/metrics";
  if (!known) return text(404, "not found: the health endpoint serves /healthz, /readyz and /metrics");
  if (method != "GET" && method != "HEAD") {
    HttpReply r = text(405, "method not allowed: use GET");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  JobStatusInfo s = job.status();
  if (path == "/healthz") return text(200, std::string("ok: ") + jobStateName(s.state));
  if (path == "/readyz") return readinessReply(s, maxCheckpointAge, wallClockMs());
  return HttpReply{200, kPrometheusContentType, prometheusText(s, wallClockMs())};
}

struct HealthServer::Impl {
  class Service final : public kj::HttpService {
   public:
    Service(Impl& impl, const kj::HttpHeaderTable& table) : impl_(impl), table_(table) {}
    kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders&,
                              kj::AsyncInputStream&, Response& response) override {
      static const std::vector<std::pair<std::string, std::string>> kHeaders = {{"Cache-Control", "no-store"}};
      HttpReply reply = healthReply(kj::str(method).cStr(), std::string(url.cStr(), url.size()), impl_.job,
                                    impl_.options.maxCheckpointAge);
      if (method == kj::HttpMethod::HEAD) reply.body.clear();
      return sendHttpReply(response, table_, kj::mv(reply), kHeaders);
    }

   private:
    Impl& impl_;
    const kj::HttpHeaderTable& table_;
  };

  Impl(JobControl& j, HealthOptions o) : job(j), options(std::move(o)) {}

  void loopMain(std::promise<state::Status>* ready) {
    bool reported = false;
    try {
      auto io = kj::setupAsyncIo();
      auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
      stopFulfiller = kj::mv(stop.fulfiller);
      kj::Own<kj::ConnectionReceiver> listener;
      try {
        auto addr = io.provider->getNetwork()
                        .parseAddress(kj::StringPtr(options.address.c_str()), static_cast<uint>(options.port))
                        .wait(io.waitScope);
        listener = addr->listen();
      } catch (const kj::Exception& e) {
        std::string why = e.getDescription().cStr();
        if (why.find("Address already in use") != std::string::npos)
          why = "the port is in use: pick another --health-port";
        else if (why.find("DNS lookup failed") != std::string::npos)
          why = "cannot resolve the address";
        else if (auto colon = why.find("): "); colon != std::string::npos)
          why = why.substr(colon + 3);
        ready->set_value(state::Status::InvalidArgument("cannot listen on " + options.address + ":" +
                                                        std::to_string(options.port) + " (--health-port): " + why));
        return;
      }
      boundPort = static_cast<int>(listener->getPort());
      auto table = kj::HttpHeaderTable::Builder().build();
      Service service(*this, *table);
      QuietHttpErrors errors("health endpoint");
      kj::HttpServerSettings settings;
      settings.errorHandler = errors;
      kj::HttpServer server(io.provider->getTimer(), *table, service, settings);
      HttpConnections connections(server, kMaxHealthConnections, "health endpoint");
      auto accepting = connections.acceptLoop(*listener).eagerlyEvaluate([](kj::Exception&& e) {
        spdlog::error("health endpoint: stopped accepting: {}", e.getDescription().cStr());
      });
      ready->set_value(state::Status::OK());
      reported = true;
      stop.promise.wait(io.waitScope);
    } catch (const kj::Exception& e) {
      std::string msg = std::string("health endpoint: ") + e.getDescription().cStr();
      if (!reported) ready->set_value(state::Status::IOError(msg));
      else spdlog::error("{}", msg);
    }
  }

  JobControl& job;
  HealthOptions options;
  int boundPort = 0;
  std::thread loopThread;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stopFulfiller;  // set by the loop thread before it reports
};

state::Result<std::unique_ptr<HealthServer>> HealthServer::start(JobControl& job, const HealthOptions& options) {
  auto impl = std::make_unique<Impl>(job, options);
  std::promise<state::Status> ready;
  auto readyFuture = ready.get_future();
  Impl* raw = impl.get();
  impl->loopThread = std::thread([raw, &ready] { raw->loopMain(&ready); });
  state::Status s = readyFuture.get();
  if (!s.ok()) {
    impl->loopThread.join();
    return s;
  }
  spdlog::info("health endpoint on {}:{}: /healthz /readyz /metrics", options.address == "*" ? "0.0.0.0" : options.address,
               impl->boundPort);
  return std::unique_ptr<HealthServer>(new HealthServer(std::move(impl)));
}

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HealthServer::~HealthServer() {
  if (impl_->stopFulfiller) impl_->stopFulfiller->fulfill();
  if (impl_->loopThread.joinable()) impl_->loopThread.join();
}

int HealthServer::port() const { return impl_->boundPort; }

}  // namespace jobhost::host
