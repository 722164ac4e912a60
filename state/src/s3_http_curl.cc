// s3_http_curl.cc — libjobhost_s3_http.so: the S3 storage's HTTP requests over libcurl
// (s3_http.h says why this is a module of its own).
//
// Requests: libcurl easy handles from one process-wide pool (each keeps its connections
// alive between requests), signed by libcurl's SigV4 (CURLOPT_AWS_SIGV4). Every request
// sends "x-amz-content-sha256: UNSIGNED-PAYLOAD": libcurl signs the header's value as the
// payload hash but does not add the header itself, and Ceph RGW refuses the signature
// without it.
//
// This file uses libcurl and libstdc++ only: nothing of jobhost's own code (no logging,
// no Status), so that the module needs no symbol from the executable that loads it.
//
// Thread-safety: the pool is guarded by its mutex; a handle serves one request at a time.
#include <curl/curl.h>
#include <fcntl.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "s3_http.h"

namespace jobhost::state::s3http {
namespace {

// Connection pool: reusable easy handles (each keeps a connection cache).

class CurlPool {
 public:
  static CurlPool& instance() {
    static CurlPool* pool = new CurlPool();  // never destroyed: handles may be in use at exit
    return *pool;
  }

  CURL* acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        CURL* h = free_.back();
        free_.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }

  void release(CURL* h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < 64) {
      free_.push_back(h);
      return;
    }
    curl_easy_cleanup(h);
  }

 private:
  CurlPool() = default;  // curl_global_init: jobhost_s3_http_transport()
  std::mutex mu_;
  std::vector<CURL*> free_;  // guarded by mu_
};

// ---------------------------------------------------------------------------------------
// Requests

struct Transfer {
  const Request* req;
  Response* resp;
  CURL* handle;
  size_t readPos = 0;
};

size_t onRead(char* buf, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  size_t want = size * n;
  size_t left = t->req->body.size() - t->readPos;
  size_t k = std::min(want, left);
  std::memcpy(buf, t->req->body.data() + t->readPos, k);
  t->readPos += k;
  return k;
}

size_t onWrite(char* data, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  size_t len = size * n;
  // Error bodies always go to resp->body, so they can be parsed.
  long code = 0;
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &code);
  if (code >= 300) {
    t->resp->body.append(data, len);
    return len;
  }
  t->resp->received += len;
  if (t->req->sinkFd >= 0) {
    const char* p = data;
    size_t left = len;
    while (left > 0) {
      ssize_t w = ::write(t->req->sinkFd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        t->resp->writeFailed = true;
        t->resp->writeErrno = errno;
        return 0;
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
    return len;
  }
  std::string* out = t->req->sink != nullptr ? t->req->sink : &t->resp->body;
  out->append(data, len);
  return len;
}

size_t onHeader(char* data, size_t size, size_t n, void* ud) {
  auto* t = static_cast<Transfer*>(ud);
  size_t len = size * n;
  std::string_view line(data, len);
  if (line.size() > 5 && strncasecmp(line.data(), "etag:", 5) == 0) {
    std::string_view v = line.substr(5);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    t->resp->etag = std::string(v);
  } else if (line.size() > 14 && strncasecmp(line.data(), "content-range:", 14) == 0) {
    std::string_view v = line.substr(14);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    t->resp->contentRange = std::string(v);
  } else if (line.size() >= 5 && strncasecmp(line.data(), "HTTP/", 5) == 0) {
    // A new status line (after "100 Continue" or a redirect): headers start over.
    t->resp->etag.clear();
    t->resp->contentRange.clear();
  }
  return len;
}

bool retryableCurl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

void perform(const Request& req, const Target& target, Response* resp) {
  CURL* h = CurlPool::instance().acquire();
  curl_easy_reset(h);
  Transfer t{&req, resp, h};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, target.url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, target.sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, target.accessKey.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, target.secretKey.c_str());
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, target.connectTimeoutMs);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, std::max(1L, target.stallTimeoutS));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, onWrite);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, onHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  struct curl_slist* hdrs = nullptr;
  hdrs = curl_slist_append(hdrs, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  // No "Expect:" override: libcurl 7.88 would sign the empty header it then does not send.
  for (const auto& hd : req.headers) hdrs = curl_slist_append(hdrs, hd.c_str());
  if (req.method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, onRead);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method == "POST") {
    hdrs = curl_slist_append(hdrs, "Content-Type: application/xml");
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    // Never a null pointer: libcurl would then read the body from stdin.
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.empty() ? "" : req.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (req.method == "DELETE") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  if (req.sinkFd >= 0) {
    if (::ftruncate(req.sinkFd, 0) != 0 || ::lseek(req.sinkFd, 0, SEEK_SET) < 0) {
      resp->writeFailed = true;
      resp->writeErrno = errno;
    }
  }
  if (req.sink != nullptr) req.sink->clear();
  CURLcode rc = resp->writeFailed ? CURLE_WRITE_ERROR : curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
  curl_off_t len = -1;
  if (curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len) == CURLE_OK && len >= 0) {
    resp->contentLength = static_cast<uint64_t>(len);
    resp->lengthKnown = true;
  }
  curl_slist_free_all(hdrs);
  if (rc != CURLE_OK && !resp->writeFailed) {
    resp->transportError = true;
    resp->errorMessage = errbuf[0] != 0 ? errbuf : curl_easy_strerror(rc);
    resp->status = retryableCurl(rc) ? -1 : -2;
    // A broken connection should not go back to the pool.
    curl_easy_cleanup(h);
    return;
  }
  CurlPool::instance().release(h);
}

const Transport kTransport{kS3HttpAbi, sizeof(Request), sizeof(Response), sizeof(Target), &perform};

}  // namespace
}  // namespace jobhost::state::s3http

/// The module's one entry point (s3_http.h, kS3HttpEntryPoint). curl_global_init runs
/// here, once, before any thread of the caller uses libcurl: the host calls this while it
/// initialises the function-local static of loadS3Http() (s3_storage.cc), once.
extern "C" [[gnu::visibility("default")]] const jobhost::state::s3http::Transport* jobhost_s3_http_transport() {
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  return initialised ? &jobhost::state::s3http::kTransport : nullptr;
}
