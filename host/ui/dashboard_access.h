// host/ui/dashboard_access.h — who may use `jobhost ui` (README "Dashboard security"):
// the Host check (DNS rebinding), the Origin check (cross-site POSTs) and the token.
//
// DashboardAccess decides, before Dashboard sees a request, whether it may go on:
//  - exactly one Host header, equal (case-insensitively) to one of the names the server
//    answers for with its port: the listen address literal, `localhost`, `127.0.0.1`,
//    `[::1]`, and each `--allowed-host NAME[:PORT]`. Nothing is resolved or prefix-matched:
//    `127.0.0.1.evil.test:8081` is a foreign name. None: 400; several: 400; foreign: 403.
//  - every method but GET and HEAD needs exactly one Origin header equal to the served
//    origin, `http://<Host>` (or `https://<Host>` behind a TLS proxy); else 403.
//  - with a token: `GET <page>?token=<token>` answers 303 to the page without the query
//    and sets the cookie `jobhost_token_<port>` (HttpOnly, SameSite=Strict, Path=/); a
//    wrong token there is 401. Every request for something other than the page and its
//    assets (`/`, `/index.html`, `/app.js`, `/app.css`: the same bytes as in the binary,
//    no job data) needs that cookie or `Authorization: Bearer <token>`; else 401 with a
//    JSON error. The cookie name carries the port because browsers do not separate
//    cookies by port: two dashboards on one host would otherwise log each other out.
//
// Thread-safety: check() is const and may be called concurrently.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ui/dashboard.h"

namespace jobhost::host {

/// A fresh token: 32 bytes from getrandom(2) (256 bits) as 64 lower-case hex digits.
/// Throws std::system_error if the kernel gives no randomness.
std::string newDashboardToken();

/// Equality of two secrets in time independent of where they differ.
bool tokensEqual(std::string_view a, std::string_view b);

/// True for an address only this machine reaches: an IPv4 literal in 127.0.0.0/8, `::1`
/// (with or without brackets) or the name `localhost`. Nothing is resolved:
/// `127.0.0.1.evil.test` is not loopback.
bool isLoopbackAddress(const std::string& address);

/// Why an `--allowed-host` value is unusable, or nullopt when it is a host name or address
/// literal, optionally with `:PORT`, as a browser sends it in the Host header.
std::optional<std::string> allowedHostProblem(const std::string& name);

struct HttpHeader {
  std::string name;   // as received (compared case-insensitively)
  std::string value;  // as received
};

class DashboardAccess {
 public:
  struct Options {
    std::string listenAddress;              // --address as given
    int port = 0;                           // the port actually bound
    std::vector<std::string> allowedHosts;  // --allowed-host values (checked by allowedHostProblem)
    std::string token;                      // empty: no authentication (--no-auth)
  };
  explicit DashboardAccess(Options options);

  struct Request {
    std::string method;  // "GET", "POST", ...
    std::string target;  // as received: path and optional query
    std::vector<HttpHeader> headers;  // every header line (duplicates kept or comma-joined)
  };
  /// nullopt: the request may go on to Dashboard. Else the answer to send instead.
  std::optional<HttpReply> check(const Request& request) const;

  /// The Host values accepted (lower case), in a stable order.
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::string& cookieName() const { return cookieName_; }
  bool authenticates() const { return !options_.token.empty(); }
  /// What to open: `http://<address>:<port>/`, with `?token=<token>` when authenticating.
  std::string url() const;

 private:
  std::optional<HttpReply> checkHost(const Request& r, std::string* host) const;
  std::optional<HttpReply> checkOrigin(const Request& r, const std::string& host) const;
  bool presentsToken(const Request& r) const;

  Options options_;
  std::vector<std::string> hosts_;
  std::string cookieName_;
};

}  // namespace jobhost::host
