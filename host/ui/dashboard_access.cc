// Host, Origin and token checks of `jobhost ui` (see dashboard_access.h).
#include "ui/dashboard_access.h"

#include <arpa/inet.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace jobhost::host {

namespace {

constexpr size_t kTokenBytes = 32;
constexpr size_t kMaxEchoedChars = 100;  // of a refused Host or Origin, in the error

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

/// Every value of the header `name`; a comma-joined value (kj joins duplicates of the
/// headers it knows, such as Host) counts as one value per comma-separated part.
std::vector<std::string> values(const DashboardAccess::Request& r, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& h : r.headers) {
    if (lower(h.name) != name) continue;
    size_t pos = 0;
    for (;;) {
      size_t comma = h.value.find(',', pos);
      out.push_back(trim(std::string_view(h.value).substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  return out;
}

/// A request value quoted for an error message, cut short and with control bytes shown as '?'.
std::string echo(const std::string& v) {
  std::string out = v.substr(0, kMaxEchoedChars);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return "'" + out + (v.size() > kMaxEchoedChars ? "...'" : "'");
}

std::string pathOf(const std::string& target) { return target.substr(0, target.find_first_of("?#")); }

/// The value of `name` in the query of `target`, if present.
std::optional<std::string> queryParam(const std::string& target, const std::string& name) {
  size_t q = target.find('?');
  if (q == std::string::npos) return std::nullopt;
  std::string query = target.substr(q + 1, target.find('#', q) == std::string::npos ? std::string::npos
                                                                                    : target.find('#', q) - q - 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    std::string part = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return std::nullopt;
}

/// The page and its assets: the same bytes for everyone (they are in the binary and the
/// repository) and no job data, so they need no token. Being public lets a visit without
/// the token show how to log in instead of a bare 401.
bool isPublicAsset(const std::string& path) {
  return path == "/" || path == "/index.html" || path == "/app.js" || path == "/app.css";
}

bool isIpv6Literal(const std::string& a) {
  in6_addr v6{};
  return inet_pton(AF_INET6, a.c_str(), &v6) == 1;
}

/// `name` with `:port` unless it has a port already ("host:1", "[::1]:1").
bool hasPort(const std::string& name) {
  if (!name.empty() && name[0] == '[') return name.find("]:") != std::string::npos;
  return name.find(':') != std::string::npos;
}

const char* const kLoginHint =
    "open the URL `jobhost ui` printed (`jobhost ui --print-url` shows it again), or send "
    "`Authorization: Bearer <token>`";

}  // namespace

std::string newDashboardToken() {
  unsigned char bytes[kTokenBytes];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

bool tokensEqual(std::string_view a, std::string_view b) {
  // Written here: none of our libraries has a constant-time comparison (OpenSSL's
  // CRYPTO_memcmp would be a new dependency for these lines). The length is not secret.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool isLoopbackAddress(const std::string& address) {
  std::string a = lower(address);
  if (a == "localhost") return true;
  if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  in_addr v4{};
  if (inet_pton(AF_INET, a.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, a.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::optional<std::string> allowedHostProblem(const std::string& name) {
  if (name.empty()) return "an empty name";
  if (name.find("://") != std::string::npos || name.find('/') != std::string::npos)
    return "a URL; give the host name alone, as the browser sends it in the Host header (e.g. dash.example.com)";
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view(".-_:[]").find(c) == std::string_view::npos)
      return std::string("the character '") + c + "' cannot be part of a host name";
  return std::nullopt;
}

DashboardAccess::DashboardAccess(Options options) : options_(std::move(options)) {
  const std::string port = std::to_string(options_.port);
  std::string listen = options_.listenAddress;
  if (isIpv6Literal(listen)) listen = "[" + listen + "]";
  std::vector<std::string> names = {listen, "localhost", "127.0.0.1", "[::1]"};
  names.insert(names.end(), options_.allowedHosts.begin(), options_.allowedHosts.end());
  auto add = [&](const std::string& h) {
    if (std::find(hosts_.begin(), hosts_.end(), h) == hosts_.end()) hosts_.push_back(h);
  };
  for (const auto& n : names) {
    std::string name = lower(n);
    if (hasPort(name)) {
      add(name);
      continue;
    }
    add(name + ":" + port);
    if (options_.port == 80) add(name);  // a browser leaves out the default port
  }
  cookieName_ = "jobhost_token_" + port;
}

std::string DashboardAccess::url() const {
  std::string a = options_.listenAddress;
  if (isIpv6Literal(a)) a = "[" + a + "]";
  std::string u = "http://" + a + ":" + std::to_string(options_.port) + "/";
  return authenticates() ? u + "?token=" + options_.token : u;
}

std::optional<HttpReply> DashboardAccess::checkHost(const Request& r, std::string* host) const {
  auto hosts = values(r, "host");
  if (hosts.empty() || (hosts.size() == 1 && hosts[0].empty()))
    return jsonErrorReply(400, "the request has no Host header; send one of: " + hosts_.front());
  if (hosts.size() > 1) return jsonErrorReply(400, "the request has more than one Host header");
  *host = lower(hosts[0]);
  if (std::find(hosts_.begin(), hosts_.end(), *host) != hosts_.end()) return std::nullopt;
  std::string accepted;
  for (const auto& h : hosts_) accepted += (accepted.empty() ? "" : ", ") + h;
  return jsonErrorReply(403, "the Host header " + echo(hosts[0]) +
                                 " is not a name this dashboard answers for (DNS rebinding?); it accepts " + accepted +
                                 " — behind a reverse proxy, start it with --allowed-host NAME");
}

std::optional<HttpReply> DashboardAccess::checkOrigin(const Request& r, const std::string& host) const {
  if (r.method == "GET" || r.method == "HEAD") return std::nullopt;
  auto origins = values(r, "origin");
  const std::string served = "http://" + host;
  if (origins.empty())
    return jsonErrorReply(403, r.method + " requests need an Origin header equal to " + served +
                                   " (browsers send it; with curl add -H 'Origin: " + served + "')");
  if (origins.size() > 1) return jsonErrorReply(403, "the request has more than one Origin header");
  std::string o = lower(origins[0]);
  if (o == served || o == "https://" + host) return std::nullopt;
  return jsonErrorReply(403, "cross-origin requests are not allowed: Origin " + echo(origins[0]) + " is not " + served);
}

bool DashboardAccess::presentsToken(const Request& r) const {
  bool ok = false;  // every candidate is compared: no early exit that depends on the secret
  for (const auto& h : r.headers) {
    std::string name = lower(h.name);
    if (name == "authorization") {
      std::string v = trim(h.value);
      if (v.size() > 7 && lower(v.substr(0, 7)) == "bearer ") ok |= tokensEqual(trim(v.substr(7)), options_.token);
    } else if (name == "cookie") {
      size_t pos = 0;
      while (pos <= h.value.size()) {
        size_t end = h.value.find_first_of(";,", pos);
        std::string part = trim(std::string_view(h.value).substr(pos, end == std::string::npos ? std::string::npos : end - pos));
        size_t eq = part.find('=');
        if (eq != std::string::npos && part.substr(0, eq) == cookieName_) ok |= tokensEqual(part.substr(eq + 1), options_.token);
        if (end == std::string::npos) break;
        pos = end + 1;
      }
    }
  }
  return ok;
}

std::optional<HttpReply> DashboardAccess::check(const Request& r) const {
  std::string host;
  if (auto refused = checkHost(r, &host)) return refused;
  if (auto refused = checkOrigin(r, host)) return refused;
  if (!authenticates()) return std::nullopt;
  const std::string path = pathOf(r.target);
  const bool get = r.method == "GET" || r.method == "HEAD";
  if (get && isPublicAsset(path)) {
    auto presented = queryParam(r.target, "token");
    if (!presented) return std::nullopt;
    if (!tokensEqual(*presented, options_.token))
      return jsonErrorReply(401, std::string("the token in this URL is not this dashboard's: ") + kLoginHint);
    // Log in: the cookie, and the same page without the token in the address bar (or in
    // the history, or in a Referer).
    HttpReply reply{303, "text/plain; charset=utf-8", "logged in; continue at " + path + "\n", {}};
    reply.headers.emplace_back("Location", path);
    reply.headers.emplace_back("Set-Cookie", cookieName_ + "=" + options_.token + "; HttpOnly; SameSite=Strict; Path=/");
    return reply;
  }
  if (presentsToken(r)) return std::nullopt;
  bool presentedSomething = false;
  for (const auto& h : r.headers) {
    std::string name = lower(h.name);
    presentedSomething |= name == "authorization" || (name == "cookie" && h.value.find(cookieName_ + "=") != std::string::npos);
  }
  HttpReply reply = jsonErrorReply(401, std::string(presentedSomething ? "wrong token: " : "authentication required: ") + kLoginHint);
  reply.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"jobhost\"");
  return reply;
}

}  // namespace jobhost::host
