// s3_storage.cc — CheckpointStorage on an S3-compatible object store (s3_storage.h).
//
// Requests: one try at a time through the HTTP module (s3_http.h: libcurl, loaded on the
// first openS3Storage(), so that processes that never use S3 do not load libcurl), with
// the retries, backoff and error mapping here. Query strings are built already sorted
// and encoded (the canonical form), because libcurl 7.88's SigV4 signs the query as
// written.
//
// Publishing: small files are one PutObject with "If-None-Match: *" (412: already
// exists). Larger ones: CreateMultipartUpload, UploadPart as the buffer fills, a HEAD
// (exists? then abort and fail), CompleteMultipartUpload (also with If-None-Match, which
// AWS honours and RGW ignores); any failure aborts the upload (AbortMultipartUpload).
//
// XML: the few answers read here (ListObjectsV2, CreateMultipartUpload,
// CompleteMultipartUpload, errors) go through expat into a list of (element path, text).
//
// Thread-safety: S3Storage holds immutable settings and a shared, thread-safe client;
// the HTTP module's connection pool is guarded by its mutex.
#include "jobhost/state/s3_storage.h"

#include <expat.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "s3_http.h"

namespace jobhost::state {
namespace {

constexpr uint64_t kMaxParts = 10000;

// ---------------------------------------------------------------------------------------
// Encoding

bool isUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

// AWS URI encoding (uppercase hex); '/' kept when keepSlash (object key in the path).
std::string uriEncode(std::string_view s, bool keepSlash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (isUnreserved(c) || (keepSlash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

// A canonical (sorted, encoded) query string from name/value pairs.
std::string canonicalQuery(std::vector<std::pair<std::string, std::string>> params) {
  std::sort(params.begin(), params.end());
  std::string q;
  for (const auto& [k, v] : params) {
    if (!q.empty()) q += '&';
    q += uriEncode(k, false) + "=" + uriEncode(v, false);
  }
  return q;
}

std::string xmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// XML: element path ("ListBucketResult/Contents/Key") and text of every element, in
// document order.

struct XmlLeaf {
  std::string path;
  std::string text;
};

struct XmlState {
  std::vector<std::string> stack;
  std::vector<XmlLeaf> leaves;
  std::vector<size_t> open;  // index into leaves of each open element
};

void XMLCALL xmlStart(void* ud, const XML_Char* name, const XML_Char**) {
  auto* st = static_cast<XmlState*>(ud);
  std::string path = st->stack.empty() ? std::string(name) : st->stack.back() + "/" + name;
  st->stack.push_back(path);
  st->leaves.push_back({path, {}});
  st->open.push_back(st->leaves.size() - 1);
}

void XMLCALL xmlEnd(void* ud, const XML_Char*) {
  auto* st = static_cast<XmlState*>(ud);
  st->stack.pop_back();
  st->open.pop_back();
}

void XMLCALL xmlText(void* ud, const XML_Char* s, int len) {
  auto* st = static_cast<XmlState*>(ud);
  if (!st->open.empty()) st->leaves[st->open.back()].text.append(s, static_cast<size_t>(len));
}

bool parseXml(const std::string& body, std::vector<XmlLeaf>* out) {
  XmlState st;
  XML_Parser p = XML_ParserCreate(nullptr);
  XML_SetUserData(p, &st);
  XML_SetElementHandler(p, xmlStart, xmlEnd);
  XML_SetCharacterDataHandler(p, xmlText);
  bool ok = XML_Parse(p, body.data(), static_cast<int>(body.size()), 1) == XML_STATUS_OK;
  XML_ParserFree(p);
  *out = std::move(st.leaves);
  return ok;
}

std::string xmlFind(const std::vector<XmlLeaf>& leaves, std::string_view path) {
  for (const auto& l : leaves) {
    if (l.path == path) return l.text;
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// Requests (s3_http.h): one try goes through the HTTP module, loaded on first use.

using s3http::Request;
using s3http::Response;

bool retryableStatus(long status, const std::string& code) {
  return status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
         code == "InternalError" || code == "ServiceUnavailable";
}


class S3Client {
 public:
  S3Client(const s3http::Transport* http, S3Options options, std::string bucket)
      : http_(http), o_(std::move(options)), bucket_(std::move(bucket)) {
    std::string ep = o_.endpoint.empty() ? "https://s3." + o_.region + ".amazonaws.com" : o_.endpoint;
    while (!ep.empty() && ep.back() == '/') ep.pop_back();
    size_t schemeEnd = ep.find("://");
    scheme_ = ep.substr(0, schemeEnd + 3);
    host_ = ep.substr(schemeEnd + 3);
    sigv4_ = "aws:amz:" + o_.region + ":s3";
    // A bucket cannot be a subdomain of an IP address or of localhost: path style there.
    std::string hostOnly = host_.substr(0, host_.find(':'));
    bool numeric = !hostOnly.empty() && hostOnly.find_first_not_of("0123456789.") == std::string::npos;
    pathStyle_ = o_.pathStyleAccess || numeric || hostOnly == "localhost" || host_.front() == '[';
  }

  const std::string& bucket() const { return bucket_; }
  const S3Options& options() const { return o_; }

  std::string urlFor(const std::string& key, const std::string& query) const {
    std::string url = scheme_;
    if (pathStyle_) {
      url += host_ + "/" + uriEncode(bucket_, false);
      if (!key.empty()) url += "/" + uriEncode(key, true);
    } else {
      url += uriEncode(bucket_, false) + "." + host_ + "/" + uriEncode(key, true);
    }
    if (!query.empty()) url += "?" + query;
    return url;
  }

  // One request with retries (at most maxAttempts tries; 0: S3Options::maxAttempts). The
  // returned response is the last try's.
  Response perform(const Request& req, int maxAttempts = 0) const {
    Response resp;
    std::chrono::milliseconds backoff = o_.initialBackoff;
    const int attempts = maxAttempts > 0 ? maxAttempts : o_.maxAttempts;
    for (int attempt = 1;; ++attempt) {
      resp = Response();
      bool retry = false;
      int injected = o_.faultHook ? o_.faultHook(req.method, req.key) : 0;
      if (injected != 0) {
        resp.status = injected;
        resp.errorCode = "Injected";
        resp.errorMessage = "fault injected by the test hook";
        retry = retryableStatus(resp.status, resp.errorCode);
      } else {
        once(req, &resp);
        if (resp.writeFailed) return resp;
        checkComplete(req, &resp);
        retry = resp.transportError ? resp.status == -1
                                    : !resp.incomplete.empty() || retryableStatus(resp.status, resp.errorCode);
      }
      if (!retry || attempt >= attempts) {
        if (attempt > 1 && retry) resp.errorMessage += " (after " + std::to_string(attempt) + " attempts)";
        return resp;
      }
      thread_local std::mt19937_64 rng(std::random_device{}());
      auto lo = backoff.count() / 2;
      auto wait = std::uniform_int_distribution<long long>(lo, std::max<long long>(lo, backoff.count()))(rng);
      spdlog::debug("s3: {} s3://{}/{} failed ({}), retry {} in {} ms", req.method, bucket_, req.key,
                    describeFailure(resp), attempt, wait);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait));
      backoff = std::min(o_.maxBackoff, backoff * 2);
    }
  }

  // A 2xx answer must be complete to count as one (see Response::incomplete).
  static void checkComplete(const Request& req, Response* r) {
    if (r->transportError || r->status < 200 || r->status >= 300) return;
    if (req.method == "HEAD" && !r->lengthKnown) {
      r->incomplete = "HTTP " + std::to_string(r->status) + " to HEAD without Content-Length (incomplete answer)";
    } else if (req.method == "GET" && r->lengthKnown && r->received != r->contentLength) {
      r->incomplete = "HTTP " + std::to_string(r->status) + " with " + std::to_string(r->received) +
                      " bytes of the " + std::to_string(r->contentLength) +
                      " its Content-Length announced (incomplete answer)";
    }
  }

  // "HTTP 503 SlowDown: message" or the transport error.
  static std::string describeFailure(const Response& r) {
    if (r.transportError) return "connection error: " + r.errorMessage;
    if (!r.incomplete.empty()) return r.incomplete;
    std::string s = "HTTP " + std::to_string(r.status);
    if (!r.errorCode.empty()) s += " " + r.errorCode;
    if (!r.errorMessage.empty()) s += ": " + r.errorMessage;
    return s;
  }

  // A Status for a failed response of an operation on key. This is where this storage
  // decides "try again later" (Unavailable) against everything else (status.h): a
  // connection that failed, reset or timed out, an incomplete answer, 5xx, 429 and the
  // store's throttling codes are Unavailable; 404 NotFound; 401/403 PermissionDenied.
  Status failure(const std::string& what, const std::string& key, const Response& r) const {
    std::string msg = "cannot " + what + " s3://" + bucket_ + "/" + key + ": " + describeFailure(r);
    if (r.transportError) return r.status == -1 ? Status::Unavailable(msg) : Status::IOError(msg);
    if (!r.incomplete.empty() || retryableStatus(r.status, r.errorCode)) return Status::Unavailable(msg);
    switch (r.status) {
      case 404: return Status::NotFound(msg);
      case 401:
      case 403: return Status::PermissionDenied(msg);
      default: return Status::IOError(msg);
    }
  }

 private:
  void once(const Request& req, Response* resp) const {
    s3http::Target target{urlFor(req.key, req.query), sigv4_, o_.accessKey, o_.secretKey,
                          static_cast<long>(o_.connectTimeout.count()),
                          static_cast<long>(o_.stallTimeout.count() / 1000)};
    http_->perform(req, target, resp);
    if (!resp->transportError && resp->status >= 300) {
      std::vector<XmlLeaf> leaves;
      if (!resp->body.empty() && parseXml(resp->body, &leaves)) {
        resp->errorCode = xmlFind(leaves, "Error/Code");
        resp->errorMessage = xmlFind(leaves, "Error/Message");
      }
    }
  }

  const s3http::Transport* const http_;
  const S3Options o_;
  const std::string bucket_;
  std::string scheme_;
  std::string host_;
  std::string sigv4_;
  bool pathStyle_ = false;
};

// A complete 2xx answer (an incomplete one is a failure: S3Client::checkComplete).
bool ok2xx(const Response& r) {
  return !r.transportError && r.incomplete.empty() && r.status >= 200 && r.status < 300;
}

// ---------------------------------------------------------------------------------------
// Key layout (prefix, entropy)

std::vector<std::string> splitComponents(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('/', start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string joinComponents(const std::vector<std::string>& comps) {
  std::string out;
  for (const auto& c : comps) {
    if (!out.empty()) out += '/';
    out += c;
  }
  return out;
}

std::string baseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

class KeyLayout {
 public:
  KeyLayout(const std::string& prefix, const std::string& entropyKey, int entropyLength)
      : entropyLength_(entropyLength) {
    auto comps = splitComponents(prefix);
    auto it = entropyKey.empty() ? comps.end() : std::find(comps.begin(), comps.end(), entropyKey);
    if (it == comps.end()) {
      pre_ = joinComponents(comps);
      entropy_ = false;
    } else {
      pre_ = joinComponents(std::vector<std::string>(comps.begin(), it));
      post_ = joinComponents(std::vector<std::string>(it + 1, comps.end()));
      entropy_ = true;
    }
  }

  bool hasEntropy() const { return entropy_; }

  std::string keyFor(const std::string& rel) const {
    std::vector<std::string> parts;
    if (!pre_.empty()) parts.push_back(pre_);
    if (entropy_ && baseName(rel) != "_metadata") parts.push_back(entropyFor(rel));
    if (!post_.empty()) parts.push_back(post_);
    parts.push_back(rel);
    return joinComponents(parts);
  }

  // The prefix to list for dirPrefix (with a trailing '/' unless it is the bucket root).
  std::string listPrefix(const std::string& dirPrefix) const {
    std::string p = entropy_ ? pre_ : keyFor(dirPrefix.empty() ? std::string() : dirPrefix);
    if (!entropy_ && dirPrefix.empty()) p = pre_;
    while (!p.empty() && p.back() == '/') p.pop_back();
    if (!p.empty()) p += '/';
    return p;
  }

  // The relative path of an object key, or "" if the key is not one of this storage's.
  std::string relativeOf(const std::string& key) const {
    std::string_view k = key;
    if (!pre_.empty()) {
      if (k.size() <= pre_.size() || k.substr(0, pre_.size()) != pre_ || k[pre_.size()] != '/') return {};
      k.remove_prefix(pre_.size() + 1);
    }
    if (!entropy_) return std::string(k);
    auto stripPost = [&](std::string_view rest) -> std::string {
      if (post_.empty()) return std::string(rest);
      if (rest.size() <= post_.size() || rest.substr(0, post_.size()) != post_ || rest[post_.size()] != '/') return {};
      return std::string(rest.substr(post_.size() + 1));
    };
    // Metadata form: no entropy component.
    std::string rel = stripPost(k);
    if (!rel.empty() && baseName(rel) == "_metadata") return rel;
    // Data form: entropy component, checked against the path's own entropy.
    size_t slash = k.find('/');
    if (slash == std::string_view::npos) return {};
    rel = stripPost(k.substr(slash + 1));
    if (rel.empty() || baseName(rel) == "_metadata") return {};
    if (k.substr(0, slash) != entropyFor(rel)) return {};
    return rel;
  }

  std::string entropyFor(const std::string& rel) const {
    // FNV-1a 64 of the path, stretched by re-hashing for long entropy.
    static const char* alphabet = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string out;
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : rel) h = (h ^ c) * 1099511628211ull;
    for (int i = 0; i < entropyLength_; ++i) {
      out.push_back(alphabet[h % 36]);
      h /= 36;
      if (h < 36) h = (h ^ 0x9e3779b97f4a7c15ull) * 1099511628211ull;
    }
    return out;
  }

 private:
  std::string pre_;
  std::string post_;
  bool entropy_ = false;
  int entropyLength_;
};

// ---------------------------------------------------------------------------------------
// Files

Status alreadyExists(const std::string& where) {
  return Status::InvalidArgument("cannot create " + where + ": already exists");
}

class S3ReadableFile final : public ReadableFile {
 public:
  S3ReadableFile(std::shared_ptr<const S3Client> client, std::string key, uint64_t size)
      : client_(std::move(client)), key_(std::move(key)), size_(size) {}

  uint64_t size() const override { return size_; }

  Status read(uint64_t offset, size_t n, std::string* out) const override {
    out->clear();
    if (n == 0) return offset <= size_ ? Status::OK() : truncated(offset, n);
    if (offset + n > size_) return truncated(offset, n);
    Request req{"GET", key_, "", {"Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + n - 1)}};
    req.sink = out;
    Response r = client_->perform(req);
    if (!ok2xx(r)) {
      // 416: a complete answer of the store that the object is now shorter than offset.
      if (r.status == 416) return replaced(offset, n, "the store refused the range (HTTP 416)");
      return client_->failure("read", key_, r);
    }
    if (out->size() == n) return Status::OK();
    // A complete answer with other bytes than asked for. The object's size in
    // Content-Range ("bytes a-b/total") differing from the size it was opened with is
    // the store saying the object changed: corruption. Anything else (a 200 for the
    // whole object, no total) says nothing about the object: try again later.
    size_t slash = r.contentRange.rfind('/');
    if (slash != std::string::npos && r.contentRange.substr(slash + 1) != "*") {
      uint64_t total = std::strtoull(r.contentRange.c_str() + slash + 1, nullptr, 10);
      if (total != size_) return replaced(offset, n, "the store now reports " + std::to_string(total) + " bytes");
    }
    return Status::Unavailable("cannot read s3://" + client_->bucket() + "/" + key_ + ": HTTP " +
                               std::to_string(r.status) + " with " + std::to_string(out->size()) + " bytes for the " +
                               std::to_string(n) + " asked for at offset " + std::to_string(offset) +
                               " (incomplete answer)");
  }

 private:
  Status replaced(uint64_t offset, size_t n, const std::string& why) const {
    return Status::Corruption("s3://" + client_->bucket() + "/" + key_ + " changed while being read: wanted " +
                              std::to_string(n) + " bytes at offset " + std::to_string(offset) + " of " +
                              std::to_string(size_) + ", " + why + " (truncated or replaced)");
  }
  Status truncated(uint64_t offset, size_t n) const {
    return Status::Corruption("truncated s3://" + client_->bucket() + "/" + key_ + ": wanted " + std::to_string(n) +
                              " bytes at offset " + std::to_string(offset) + " of " + std::to_string(size_));
  }

  std::shared_ptr<const S3Client> client_;
  std::string key_;
  uint64_t size_;
};

class S3WritableFile final : public WritableFile {
 public:
  S3WritableFile(std::shared_ptr<const S3Client> client, std::string key)
      : client_(std::move(client)), key_(std::move(key)), where_("s3://" + client_->bucket() + "/" + key_) {}

  ~S3WritableFile() override {
    if (!uploadId_.empty()) abortUpload();
  }

  Status append(std::string_view data) override {
    if (closed_) return Status::InvalidArgument("append after close of " + where_);
    if (!error_.ok()) return error_;
    buffer_.append(data);
    size_ += data.size();
    const uint64_t partSize = std::max<uint64_t>(1, client_->options().minPartSize);
    while (buffer_.size() > partSize) {
      if (Status s = uploadPart(std::string_view(buffer_).substr(0, partSize)); !s.ok()) return fail(std::move(s));
      buffer_.erase(0, partSize);
    }
    return Status::OK();
  }

  uint64_t size() const override { return size_; }

  Status close() override {
    if (closed_) return Status::InvalidArgument("close called twice on " + where_);
    closed_ = true;
    if (!error_.ok()) return error_;
    if (uploadId_.empty()) {
      Request req{"PUT", key_, "", {"If-None-Match: *"}, buffer_};
      Response r = client_->perform(req);
      buffer_.clear();
      if (r.status == 412) return alreadyExists(where_);
      if (!ok2xx(r)) return client_->failure("write", key_, r);
      return Status::OK();
    }
    if (!buffer_.empty()) {
      if (Status s = uploadPart(buffer_); !s.ok()) return fail(std::move(s));
      buffer_.clear();
    }
    // RGW ignores If-None-Match on CompleteMultipartUpload: look first (see header).
    Response head = client_->perform(Request{"HEAD", key_, ""});
    if (ok2xx(head)) {
      abortUpload();
      return alreadyExists(where_);
    }
    if (head.status != 404) return fail(client_->failure("check", key_, head));
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags_.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + xmlEscape(etags_[i]) +
             "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    Response r = client_->perform(
        Request{"POST", key_, canonicalQuery({{"uploadId", uploadId_}}), {"If-None-Match: *"}, xml});
    if (r.status == 412) {
      abortUpload();
      return alreadyExists(where_);
    }
    if (!ok2xx(r)) return fail(client_->failure("complete the multipart upload of", key_, r));
    // A 200 answer may still carry an <Error> body.
    std::vector<XmlLeaf> leaves;
    if (parseXml(r.body, &leaves) && !leaves.empty() && leaves.front().path == "Error") {
      r.errorCode = xmlFind(leaves, "Error/Code");
      r.errorMessage = xmlFind(leaves, "Error/Message");
      return fail(client_->failure("complete the multipart upload of", key_, r));
    }
    uploadId_.clear();
    return Status::OK();
  }

 private:
  Status uploadPart(std::string_view bytes) {
    if (uploadId_.empty()) {
      Response r = client_->perform(Request{"POST", key_, canonicalQuery({{"uploads", ""}}), {}});
      if (!ok2xx(r)) return client_->failure("start a multipart upload of", key_, r);
      std::vector<XmlLeaf> leaves;
      parseXml(r.body, &leaves);
      uploadId_ = xmlFind(leaves, "InitiateMultipartUploadResult/UploadId");
      if (uploadId_.empty()) {
        return Status::Unavailable("cannot start a multipart upload of " + where_ + ": no UploadId in the answer");
      }
      spdlog::debug("s3: multipart upload {} of {}", uploadId_, where_);
    }
    if (etags_.size() >= kMaxParts) {
      return Status::InvalidArgument("cannot write " + where_ + ": more than 10000 parts; raise s3.upload.min.part.size");
    }
    int partNumber = static_cast<int>(etags_.size()) + 1;
    Response r = client_->perform(Request{
        "PUT", key_, canonicalQuery({{"partNumber", std::to_string(partNumber)}, {"uploadId", uploadId_}}), {}, bytes});
    if (!ok2xx(r)) return client_->failure("upload part " + std::to_string(partNumber) + " of", key_, r);
    etags_.push_back(r.etag);
    return Status::OK();
  }

  void abortUpload() {
    Response r = client_->perform(Request{"DELETE", key_, canonicalQuery({{"uploadId", uploadId_}})});
    if (!ok2xx(r) && r.status != 404) {
      spdlog::warn("s3: cannot abort multipart upload {} of {}: {}", uploadId_, where_, S3Client::describeFailure(r));
    }
    uploadId_.clear();
  }

  Status fail(Status s) {
    if (!uploadId_.empty()) abortUpload();
    buffer_.clear();
    buffer_.shrink_to_fit();
    error_ = s;
    return s;
  }

  std::shared_ptr<const S3Client> client_;
  const std::string key_;
  const std::string where_;
  std::string buffer_;
  uint64_t size_ = 0;
  std::string uploadId_;
  std::vector<std::string> etags_;
  Status error_;
  bool closed_ = false;
};

// ---------------------------------------------------------------------------------------
// Storage

class S3Storage final : public CheckpointStorage {
 public:
  S3Storage(std::shared_ptr<const S3Client> client, std::string prefix, KeyLayout layout)
      : client_(std::move(client)), prefix_(std::move(prefix)), layout_(std::move(layout)) {}

  Result<std::unique_ptr<WritableFile>> create(const std::string& path) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    Response head = client_->perform(Request{"HEAD", key, ""});
    if (ok2xx(head)) return alreadyExists(describe(path));
    if (head.status != 404) return client_->failure("check", key, head);
    return std::unique_ptr<WritableFile>(new S3WritableFile(client_, key));
  }

  Status putFile(const std::string& path, const std::string& localSourcePath) override {
    int fd = ::open(localSourcePath.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fromErrno("cannot read " + localSourcePath, errno);
    auto file = create(path);
    if (!file.ok()) {
      ::close(fd);
      return file.status();
    }
    std::string chunk;
    chunk.resize(std::min<uint64_t>(std::max<uint64_t>(client_->options().minPartSize, 1 << 16), 64ull << 20));
    for (;;) {
      ssize_t n = ::read(fd, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::close(fd);
        return fromErrno("cannot read " + localSourcePath, err);
      }
      if (n == 0) break;
      if (Status s = file.value()->append(std::string_view(chunk.data(), static_cast<size_t>(n))); !s.ok()) {
        ::close(fd);
        return s;
      }
    }
    ::close(fd);
    return file.value()->close();
  }

  Status put(const std::string& path, std::string_view bytes) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    if (bytes.size() <= client_->options().minPartSize) {
      // One conditional PUT: no HEAD needed, 412 says it exists.
      Response r = client_->perform(Request{"PUT", key, "", {"If-None-Match: *"}, bytes});
      if (r.status == 412) return alreadyExists(describe(path));
      if (!ok2xx(r)) return client_->failure("write", key, r);
      return Status::OK();
    }
    auto file = create(path);
    if (!file.ok()) return file.status();
    if (Status s = file.value()->append(bytes); !s.ok()) return s;
    return file.value()->close();
  }

  Result<std::unique_ptr<ReadableFile>> open(const std::string& path) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    Response head = client_->perform(Request{"HEAD", key, ""});
    if (!ok2xx(head)) return notFoundOr("open", path, key, head);
    return std::unique_ptr<ReadableFile>(new S3ReadableFile(client_, key, head.contentLength));
  }

  Status get(const std::string& path, std::string* out) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    Request req{"GET", key, ""};
    req.sink = out;
    Response r = client_->perform(req);
    if (!ok2xx(r)) {
      out->clear();
      return notFoundOr("read", path, key, r);
    }
    return Status::OK();
  }

  Status getToLocalFile(const std::string& path, const std::string& localDest) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    int fd = ::open(localDest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fromErrno("cannot write " + localDest, errno);
    Request req{"GET", key, ""};
    req.sinkFd = fd;
    Response r = client_->perform(req);
    Status result;
    if (r.writeFailed) {
      result = fromErrno("cannot write " + localDest, r.writeErrno);
    } else if (!ok2xx(r)) {
      result = notFoundOr("read", path, key, r);
    } else if (::fsync(fd) != 0) {
      result = fromErrno("cannot sync " + localDest, errno);
    }
    ::close(fd);
    if (!result.ok()) ::unlink(localDest.c_str());
    return result;
  }

  Result<uint64_t> fileSize(const std::string& path) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    Response head = client_->perform(Request{"HEAD", key, ""});
    if (!ok2xx(head)) return notFoundOr("stat", path, key, head);
    return head.contentLength;
  }

  bool exists(const std::string& path) override {
    if (!validateStoragePath(path).ok()) return false;
    return ok2xx(client_->perform(Request{"HEAD", layout_.keyFor(path), ""}));
  }

  Status list(const std::string& dirPrefix, std::vector<FileEntry>* out) override {
    out->clear();
    if (Status s = validateStoragePrefix(dirPrefix); !s.ok()) return s;
    std::string dir = dirPrefix;
    if (!dir.empty() && dir.back() != '/') dir += '/';
    std::string listPrefix = layout_.listPrefix(dirPrefix);
    std::string token;
    for (;;) {
      std::vector<std::pair<std::string, std::string>> q = {
          {"list-type", "2"}, {"max-keys", std::to_string(client_->options().listPageSize)}};
      if (!listPrefix.empty()) q.emplace_back("prefix", listPrefix);
      if (!token.empty()) q.emplace_back("continuation-token", token);
      Response r = client_->perform(Request{"GET", "", canonicalQuery(q)});
      if (!ok2xx(r)) return client_->failure("list", listPrefix, r);
      std::vector<XmlLeaf> leaves;
      if (!parseXml(r.body, &leaves)) {
        return Status::Unavailable("cannot list s3://" + client_->bucket() + "/" + listPrefix +
                                   ": unreadable XML answer");
      }
      bool truncated = false;
      std::string next;
      FileEntry* current = nullptr;
      std::string currentKey;
      for (const auto& l : leaves) {
        if (l.path == "ListBucketResult/Contents/Key") {
          std::string rel = layout_.relativeOf(l.text);
          current = nullptr;
          if (!rel.empty() && validateStoragePath(rel).ok() && rel.compare(0, dir.size(), dir) == 0) {
            out->push_back({rel, 0});
            current = &out->back();
          }
        } else if (l.path == "ListBucketResult/Contents/Size" && current != nullptr) {
          current->size = std::strtoull(l.text.c_str(), nullptr, 10);
        } else if (l.path == "ListBucketResult/IsTruncated") {
          truncated = l.text == "true";
        } else if (l.path == "ListBucketResult/NextContinuationToken") {
          next = l.text;
        }
      }
      if (!truncated) break;
      if (next.empty()) {
        return Status::Unavailable("cannot list s3://" + client_->bucket() + "/" + listPrefix +
                                   ": truncated answer without a continuation token");
      }
      token = next;
    }
    std::sort(out->begin(), out->end(), [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    return Status::OK();
  }

  Status remove(const std::string& path) override {
    if (Status s = validateStoragePath(path); !s.ok()) return s;
    std::string key = layout_.keyFor(path);
    // DELETE answers 204 for a missing key too: look first, for the interface's NotFound.
    Response head = client_->perform(Request{"HEAD", key, ""});
    if (!ok2xx(head)) return notFoundOr("remove", path, key, head);
    Response r = client_->perform(Request{"DELETE", key, ""});
    if (!ok2xx(r) && r.status != 404) return client_->failure("remove", key, r);
    return Status::OK();
  }

  // The temporary files of an object store are its unfinished multipart uploads (a crash
  // between CreateMultipartUpload and Complete/Abort), named like the local ones:
  // "<dir>/.<name>.tmp.<uploadId>". Their size is reported as 0.
  Status listTemporary(const std::string& dirPrefix, std::vector<FileEntry>* out) override {
    out->clear();
    if (Status s = validateStoragePrefix(dirPrefix); !s.ok()) return s;
    std::string dir = dirPrefix;
    if (!dir.empty() && dir.back() != '/') dir += '/';
    std::string listPrefix = layout_.listPrefix(dirPrefix);
    std::string keyMarker, idMarker;
    for (;;) {
      std::vector<std::pair<std::string, std::string>> q = {{"uploads", ""},
                                                            {"max-uploads", std::to_string(client_->options().listPageSize)}};
      if (!listPrefix.empty()) q.emplace_back("prefix", listPrefix);
      if (!keyMarker.empty()) q.emplace_back("key-marker", keyMarker);
      if (!idMarker.empty()) q.emplace_back("upload-id-marker", idMarker);
      Response r = client_->perform(Request{"GET", "", canonicalQuery(q)});
      if (!ok2xx(r)) return client_->failure("list the multipart uploads under", listPrefix, r);
      std::vector<XmlLeaf> leaves;
      if (!parseXml(r.body, &leaves)) {
        return Status::Unavailable("cannot list the multipart uploads under s3://" + client_->bucket() + "/" +
                                   listPrefix + ": unreadable XML answer");
      }
      bool truncated = false;
      std::string key, nextKey, nextId;
      for (const auto& l : leaves) {
        if (l.path == "ListMultipartUploadsResult/Upload/Key") {
          key = l.text;
        } else if (l.path == "ListMultipartUploadsResult/Upload/UploadId") {
          std::string rel = layout_.relativeOf(key);
          if (rel.empty() || rel.compare(0, dir.size(), dir) != 0 || l.text.find('/') != std::string::npos) continue;
          size_t slash = rel.rfind('/');
          std::string parent = slash == std::string::npos ? "" : rel.substr(0, slash + 1);
          out->push_back({parent + "." + baseName(rel) + ".tmp." + l.text, 0});
        } else if (l.path == "ListMultipartUploadsResult/IsTruncated") {
          truncated = l.text == "true";
        } else if (l.path == "ListMultipartUploadsResult/NextKeyMarker") {
          nextKey = l.text;
        } else if (l.path == "ListMultipartUploadsResult/NextUploadIdMarker") {
          nextId = l.text;
        }
      }
      if (!truncated || (nextKey.empty() && nextId.empty())) break;
      keyMarker = nextKey;
      idMarker = nextId;
    }
    std::sort(out->begin(), out->end(), [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    return Status::OK();
  }

  Status removeTemporary(const std::string& path) override {
    size_t slash = path.rfind('/');
    std::string parent = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    std::string name = path.substr(parent.size());
    size_t marker = name.find(".tmp.");
    if (name.size() < 2 || name[0] != '.' || marker == std::string::npos || marker < 2 ||
        marker + 5 >= name.size()) {
      return Status::InvalidArgument("'" + path + "' is not a temporary file (an unfinished multipart upload)");
    }
    std::string rel = parent + name.substr(1, marker - 1);
    if (Status s = validateStoragePath(rel); !s.ok()) return s;
    std::string key = layout_.keyFor(rel);
    Response r = client_->perform(Request{"DELETE", key, canonicalQuery({{"uploadId", name.substr(marker + 5)}})});
    if (r.status == 404) return Status::NotFound("no unfinished upload " + path + " (" + describe(rel) + ")");
    if (!ok2xx(r)) return client_->failure("abort the multipart upload of", key, r);
    return Status::OK();
  }

  Status removeAll(const std::string& dirPrefix) override {
    std::vector<FileEntry> files, temporary;
    if (Status s = list(dirPrefix, &files); !s.ok()) return s;
    for (const auto& f : files) {
      std::string key = layout_.keyFor(f.path);
      Response r = client_->perform(Request{"DELETE", key, ""});
      if (!ok2xx(r) && r.status != 404) return client_->failure("remove", key, r);
    }
    if (Status s = listTemporary(dirPrefix, &temporary); !s.ok()) return s;
    for (const auto& t : temporary) {
      if (Status s = removeTemporary(t.path); !s.ok() && !s.isNotFound()) return s;
    }
    return Status::OK();
  }

  std::string describe(const std::string& path) const override {
    return "s3://" + client_->bucket() + "/" + layout_.keyFor(path);
  }

  std::string rootUri() const override {
    return "s3://" + client_->bucket() + (prefix_.empty() ? "" : "/" + prefix_);
  }

  // One HEAD, one try: a 404 is an answer.
  Status probe() override {
    std::string key = layout_.keyFor(".jobhost-probe");
    Response head = client_->perform(Request{"HEAD", key, ""}, 1);
    if (ok2xx(head) || (!head.transportError && head.status == 404)) return Status::OK();
    return client_->failure("reach", key, head);
  }

 private:
  Status notFoundOr(const std::string& what, const std::string& path, const std::string& key, const Response& r) {
    if (!r.transportError && r.status == 404) return Status::NotFound("cannot " + what + " " + describe(path) + ": no such file");
    return client_->failure(what, key, r);
  }

  std::shared_ptr<const S3Client> client_;
  const std::string prefix_;
  const KeyLayout layout_;
};

std::mutex defaultMu;
std::unique_ptr<S3Options> defaultOptions;  // guarded by defaultMu

const char* envOrNull(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? v : nullptr;
}

Result<uint64_t> parseCount(const std::string& key, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || value[0] == '-' || errno != 0 || end == nullptr || *end != 0) {
    return Status::InvalidArgument(key + ": '" + value + "' is not a whole number");
  }
  return static_cast<uint64_t>(v);
}

// A byte size: a whole number with an optional unit b, kb, mb, gb (binary, any case, also
// k/m/g and kib/mib/gib), as the host's other size keys.
Result<uint64_t> parseBytes(const std::string& key, const std::string& value) {
  size_t digits = 0;
  while (digits < value.size() && value[digits] >= '0' && value[digits] <= '9') ++digits;
  std::string unit;
  for (size_t i = digits; i < value.size(); ++i) {
    if (value[i] == ' ') continue;
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(value[i]))));
  }
  const std::map<std::string, uint64_t> units = {{"", 1},        {"b", 1},          {"k", 1ull << 10}, {"kb", 1ull << 10},
                                                 {"kib", 1ull << 10}, {"m", 1ull << 20}, {"mb", 1ull << 20}, {"mib", 1ull << 20},
                                                 {"g", 1ull << 30}, {"gb", 1ull << 30}, {"gib", 1ull << 30}};
  auto u = units.find(unit);
  if (digits == 0 || u == units.end()) {
    return Status::InvalidArgument(key + ": '" + value + "' is not a size (e.g. 5242880, 8mb, 64 MiB)");
  }
  auto n = parseCount(key, value.substr(0, digits));
  if (!n.ok()) return n.status();
  if (n.value() > (UINT64_MAX / u->second)) return Status::InvalidArgument(key + ": '" + value + "' is too large");
  return n.value() * u->second;
}

}  // namespace

bool isObjectStoreUri(std::string_view uriOrPath) {
  for (std::string_view scheme : {"s3://", "s3a://", "s3p://", "S3://"}) {
    if (uriOrPath.substr(0, scheme.size()) == scheme) return true;
  }
  return false;
}

Result<S3Options> s3OptionsFrom(const std::map<std::string, std::string>& keys) {
  S3Options o;
  for (const auto& [k, v] : keys) {
    if (k.rfind("s3.", 0) != 0) continue;
    if (k == "s3.endpoint") {
      if (v.rfind("http://", 0) != 0 && v.rfind("https://", 0) != 0) {
        return Status::InvalidArgument("s3.endpoint: '" + v + "' is not an http:// or https:// URL");
      }
      o.endpoint = v;
    } else if (k == "s3.path.style.access") {
      if (v != "true" && v != "false") return Status::InvalidArgument("s3.path.style.access: expected true or false, got '" + v + "'");
      o.pathStyleAccess = v == "true";
    } else if (k == "s3.access-key") {
      o.accessKey = v;
    } else if (k == "s3.secret-key") {
      o.secretKey = v;
    } else if (k == "s3.entropy.key") {
      if (v.empty() || v.find('/') != std::string::npos) {
        return Status::InvalidArgument("s3.entropy.key: must be a non-empty path component without '/'");
      }
      o.entropyKey = v;
    } else if (k == "s3.entropy.length") {
      auto n = parseCount(k, v);
      if (!n.ok()) return n.status();
      if (n.value() < 1 || n.value() > 32) return Status::InvalidArgument("s3.entropy.length: must be 1..32, got " + v);
      o.entropyLength = static_cast<int>(n.value());
    } else if (k == "s3.upload.min.part.size") {
      auto n = parseBytes(k, v);
      if (!n.ok()) return n.status();
      if (n.value() < 1) return Status::InvalidArgument("s3.upload.min.part.size: must be at least 1 byte");
      o.minPartSize = n.value();
    } else {
      return Status::InvalidArgument("unknown configuration key '" + k +
                                     "' (known: s3.endpoint, s3.path.style.access, s3.access-key, s3.secret-key, "
                                     "s3.entropy.key, s3.entropy.length, s3.upload.min.part.size)");
    }
  }
  if (o.endpoint.empty()) {
    if (const char* v = envOrNull("AWS_ENDPOINT_URL_S3")) {
      o.endpoint = v;
    } else if (const char* e = envOrNull("AWS_ENDPOINT_URL")) {
      o.endpoint = e;
    }
  }
  if (o.accessKey.empty()) {
    if (const char* v = envOrNull("AWS_ACCESS_KEY_ID")) o.accessKey = v;
  }
  if (o.secretKey.empty()) {
    if (const char* v = envOrNull("AWS_SECRET_ACCESS_KEY")) o.secretKey = v;
  }
  if (const char* v = envOrNull("AWS_REGION")) {
    o.region = v;
  } else if (const char* d = envOrNull("AWS_DEFAULT_REGION")) {
    o.region = d;
  }
  return o;
}

namespace {

// The HTTP module (s3_http.h), loaded once per process on the first openS3Storage().
// Looked for, in this order:
//   - $JOBHOST_MODULE_DIR, and only there when it is set (tests; unusual installs);
//   - <directory of the executable>/../lib/jobhost: an installed jobhost (bin/jobhost,
//     lib/jobhost/), and in the build tree host/jobhost and tests/<binary>;
//   - JOBHOST_BUILD_MODULE_DIR: the build tree's module directory, for binaries deeper in
//     it (the benchmark); only for binaries inside the build tree (JOBHOST_BUILD_ROOT).
// Never unloaded: its handles and libcurl's state live until the process ends.
struct LoadedHttp {
  const s3http::Transport* transport = nullptr;
  std::string error;  // why it could not be loaded: every place tried
};

const LoadedHttp& loadS3Http() {
  static const LoadedHttp loaded = [] {
    LoadedHttp r;
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("JOBHOST_MODULE_DIR"); env != nullptr && env[0] != 0) {
      dirs.emplace_back(env);
    } else {
      char exe[PATH_MAX];
      ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
      std::string path = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string();
      if (!path.empty()) dirs.push_back(path.substr(0, path.rfind('/')) + "/../lib/jobhost");
#if defined(JOBHOST_BUILD_ROOT) && defined(JOBHOST_BUILD_MODULE_DIR)
      // Only for a binary of the build tree itself: an installed jobhost never loads code
      // from the directory it was built in (which may not be ours on this machine).
      if (path.rfind(JOBHOST_BUILD_ROOT "/", 0) == 0) dirs.emplace_back(JOBHOST_BUILD_MODULE_DIR);
#endif
    }
    std::string tried;
    for (const std::string& dir : dirs) {
      std::string file = dir + "/" + s3http::kS3HttpModuleFile;
      if (::access(file.c_str(), F_OK) != 0) {
        tried += (tried.empty() ? "" : ", ") + file + " (no such file)";
        continue;
      }
      void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* why = ::dlerror();
        tried += (tried.empty() ? "" : ", ") + file + " (" + (why != nullptr ? why : "dlopen failed") + ")";
        continue;
      }
      using Entry = const s3http::Transport* (*)();
      auto entry = reinterpret_cast<Entry>(::dlsym(handle, s3http::kS3HttpEntryPoint));
      const s3http::Transport* t = entry != nullptr ? entry() : nullptr;
      const bool fits = t != nullptr && t->abi == s3http::kS3HttpAbi && t->requestSize == sizeof(s3http::Request) &&
                        t->responseSize == sizeof(s3http::Response) && t->targetSize == sizeof(s3http::Target);
      if (!fits) {
        tried += (tried.empty() ? "" : ", ") + file +
                 (entry == nullptr ? std::string(" (not a jobhost S3 module)")
                  : t == nullptr   ? std::string(" (libcurl failed to initialise)")
                                   : std::string(" (a module of another jobhost build: its interface differs)"));
        continue;  // left loaded: a module's static state may be in use by the entry call
      }
      r.transport = t;
      spdlog::debug("s3: HTTP module {}", file);
      return r;
    }
    if (tried.empty()) tried = "nowhere: the location of the jobhost binary is unknown";
    r.error = std::string("cannot load jobhost's S3 module ") + s3http::kS3HttpModuleFile +
              ", which s3:// locations need (tried " + tried +
              "); it is installed with jobhost, into <prefix>/lib/jobhost/: reinstall jobhost, or set "
              "JOBHOST_MODULE_DIR to the directory that holds it";
    return r;
  }();
  return loaded;
}

}  // namespace

Result<std::unique_ptr<CheckpointStorage>> openS3Storage(const std::string& uri, const S3Options& options) {
  size_t schemeEnd = uri.find("://");
  if (!isObjectStoreUri(uri) || schemeEnd == std::string::npos) {
    return Status::InvalidArgument("invalid S3 URI '" + uri + "': expected s3://bucket[/prefix]");
  }
  std::string rest = uri.substr(schemeEnd + 3);
  size_t slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (bucket.empty()) return Status::InvalidArgument("invalid S3 URI '" + uri + "': no bucket (expected s3://bucket[/prefix])");
  for (char c : bucket) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || (c >= 'A' && c <= 'Z'))) {
      return Status::InvalidArgument("invalid S3 URI '" + uri + "': bad bucket name '" + bucket + "'");
    }
  }
  if (!prefix.empty()) {
    if (Status s = validateStoragePath(prefix); !s.ok()) {
      return Status::InvalidArgument("invalid S3 URI '" + uri + "': " + s.message());
    }
  }
  if (options.accessKey.empty() || options.secretKey.empty()) {
    return Status::InvalidArgument("no S3 credentials for " + uri +
                                   ": set s3.access-key and s3.secret-key (e.g. -D s3.access-key=...) or the "
                                   "environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
  }
  if (!options.endpoint.empty() && options.endpoint.rfind("http://", 0) != 0 && options.endpoint.rfind("https://", 0) != 0) {
    return Status::InvalidArgument("s3.endpoint: '" + options.endpoint + "' is not an http:// or https:// URL");
  }
  if (options.listPageSize < 1 || options.listPageSize > 1000 || options.maxAttempts < 1) {
    return Status::InvalidArgument("bad S3 options: listPageSize must be 1..1000 and maxAttempts at least 1");
  }
  const LoadedHttp& http = loadS3Http();
  if (http.transport == nullptr) return Status::InvalidArgument(http.error);
  auto client = std::make_shared<const S3Client>(http.transport, options, bucket);
  KeyLayout layout(prefix, options.entropyKey, options.entropyLength);
  return std::unique_ptr<CheckpointStorage>(new S3Storage(std::move(client), prefix, std::move(layout)));
}

void setDefaultS3Options(const S3Options& options) {
  std::lock_guard<std::mutex> lock(defaultMu);
  defaultOptions = std::make_unique<S3Options>(options);
}

S3Options defaultS3Options() {
  {
    std::lock_guard<std::mutex> lock(defaultMu);
    if (defaultOptions != nullptr) return *defaultOptions;
  }
  auto fromEnv = s3OptionsFrom({});
  return fromEnv.ok() ? fromEnv.value() : S3Options();
}

}  // namespace jobhost::state
