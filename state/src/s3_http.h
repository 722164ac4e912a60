// s3_http.h — the HTTP half of the S3 storage: one request, one try, over libcurl.
//
// It lives in a module of its own, libjobhost_s3_http.so (s3_http_curl.cc), that the S3
// storage loads the first time an s3:// location is opened (s3_storage.cc,
// loadS3Http()). Linked into jobhost, libcurl and the ~30 libraries it pulls in (TLS,
// Kerberos, LDAP, SSH, IDN, ...) cost every jobhost process about 19 ms of dynamic
// loading on the VMs here, 40 % of a `jobhost check` (issue 33, H1), though most
// commands never talk to S3. Flink loads its S3 file systems as plugins for the same
// reason. The module depends on libcurl and libstdc++ only, not on jobhost's code, so it
// can be a plain shared object (no symbols exported from the executable).
//
// The interface is C++ over one compiler and one libstdc++: module and host are built
// together and installed together; kS3HttpAbi changes whenever these structs do, and a
// module of another ABI, or whose structs have other sizes, is refused at load.
//
// Thread-safety: perform() may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace jobhost::state::s3http {

inline constexpr uint32_t kS3HttpAbi = 1;

/// The symbol the module exports (extern "C", returns its Transport).
inline constexpr const char* kS3HttpEntryPoint = "jobhost_s3_http_transport";

/// The module's file name; installed into <prefix>/lib/jobhost/.
inline constexpr const char* kS3HttpModuleFile = "libjobhost_s3_http.so";

struct Request {
  Request(std::string m, std::string k, std::string q = {}, std::vector<std::string> h = {}, std::string_view b = {})
      : method(std::move(m)), key(std::move(k)), query(std::move(q)), headers(std::move(h)), body(b) {}
  std::string method;  // GET, PUT, POST, HEAD, DELETE
  std::string key;     // object key ("" = the bucket)
  std::string query;   // canonical query string
  std::vector<std::string> headers;
  std::string_view body;   // request body (PUT/POST)
  std::string* sink = nullptr;  // response body (default: Response::body)
  int sinkFd = -1;              // or a local file (truncated before each try)
};

struct Response {
  long status = 0;
  std::string body;
  std::string etag;
  uint64_t contentLength = 0;
  bool lengthKnown = false;  // the answer had a Content-Length header
  uint64_t received = 0;     // body bytes of a 2xx answer received (into any sink)
  std::string contentRange;  // the Content-Range header of a ranged GET
  /// A 2xx answer that is not complete: a HEAD without Content-Length, a body shorter
  /// than its Content-Length. Never taken as an answer (ok2xx() is false); retried, and
  /// in the end Unavailable.
  std::string incomplete;
  std::string errorCode;     // <Error><Code> of the body
  std::string errorMessage;  // <Error><Message>, or libcurl's error text
  /// The request did not get an answer; status is then -1 if trying again may help (a
  /// connection refused, reset or timed out), -2 if not.
  bool transportError = false;
  bool writeFailed = false;  // writing the body into Request::sinkFd failed (errno in writeErrno)
  int writeErrno = 0;
};

/// Where and how one request goes.
struct Target {
  std::string url;          // scheme://host[:port]/path?query, encoded
  std::string sigv4;        // CURLOPT_AWS_SIGV4 provider string, "aws:amz:<region>:s3"
  std::string accessKey;
  std::string secretKey;
  long connectTimeoutMs = 10000;
  long stallTimeoutS = 60;  // a transfer below 1 byte/s for this long fails
};

struct Transport {
  uint32_t abi;  // kS3HttpAbi of the module's build
  /// sizeof(Request), sizeof(Response), sizeof(Target) in the module's build: a module
  /// whose structs differ from the host's (an upgrade that forgot kS3HttpAbi, a worker
  /// of an older binary next to a newer module) is refused, never called.
  uint32_t requestSize, responseSize, targetSize;
  /// One try of req at target; fills *resp (status, body or sink, ETag, Content-Range,
  /// Content-Length, or the transport error). Error bodies (status >= 300) always go to
  /// resp->body. Parses nothing.
  void (*perform)(const Request& req, const Target& target, Response* resp);
};

}  // namespace jobhost::state::s3http
