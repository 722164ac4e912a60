// jobhost/state/s3_storage.h — CheckpointStorage on an S3-compatible object store.
//
// openS3Storage("s3://bucket/prefix", options) returns a CheckpointStorage whose files are
// the objects "prefix/<path>" of the bucket. HTTP through libcurl, AWS Signature V4 by
// libcurl (CURLOPT_AWS_SIGV4), one pool of reusable connections per process.
//
// Object-store semantics (see s3_storage.cc for the protocol):
//   - create-once: a file is published by a PutObject with "If-None-Match: *"; a 412
//     answer is InvalidArgument "already exists". Files above S3Options::minPartSize go
//     up as a multipart upload; it is aborted on any failure and by a WritableFile
//     destroyed before close(). CompleteMultipartUpload cannot be made conditional on
//     every store (Ceph RGW ignores If-None-Match there), so for large files the
//     "never overwrites" rule is checked by a HEAD just before completing: two
//     concurrent creators of one large file can both succeed, the later one winning.
//     Checkpoint files have unique names, so only `_metadata`-sized (small) files need
//     the strict rule, and those always go up with the conditional PutObject.
//   - no rename: an object is visible exactly when complete. The "temporary files" of
//     this storage are its unfinished multipart uploads (left by a crash): listTemporary()
//     names them "<dir>/.<name>.tmp.<uploadId>" (size 0), removeTemporary() aborts one,
//     removeAll() aborts those under its prefix too. As for local storage, only the owner
//     of a directory (the holder of its lease) may remove them.
//   - list() uses ListObjectsV2 with pagination (S3Options::listPageSize keys a page).
//   - retries with exponential backoff and jitter on HTTP 5xx, 429, "SlowDown",
//     connection failures, resets and time-outs, at most S3Options::maxAttempts tries;
//     the final error names the operation, s3://bucket/key, the HTTP status and the
//     store's error code.
//   - entropy injection (Flink's s3.entropy.key / s3.entropy.length): when the prefix
//     contains the marker as one whole component, a file's key has the marker replaced
//     by entropyLength characters [0-9a-z], except files named `_metadata`, whose key
//     has the marker component removed (so checkpoints stay findable by a listing). The
//     characters are derived from a hash of the file's path (not drawn at random as in
//     Flink) because this interface addresses files by path alone: they spread keys over
//     the store's partitions the same way and need no lookup table. Cost: list() then
//     scans every key under the part of the prefix before the marker.
//
// Thread-safety: as CheckpointStorage. Options are copied at open.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "jobhost/state/checkpoint_storage.h"
#include "jobhost/state/status.h"

namespace jobhost::state {

struct S3Options {
  /// s3.endpoint: "http(s)://host[:port]". Default: https://s3.<region>.amazonaws.com.
  std::string endpoint;
  /// s3.path.style.access: address buckets as endpoint/bucket/key (true) or as
  /// bucket.endpoint/key (false). Default: false; always path style for an endpoint that
  /// is an IP address or localhost.
  bool pathStyleAccess = false;
  /// s3.access-key / AWS_ACCESS_KEY_ID. Required.
  std::string accessKey;
  /// s3.secret-key / AWS_SECRET_ACCESS_KEY. Required; never logged nor shown.
  std::string secretKey;
  /// AWS_REGION (else AWS_DEFAULT_REGION). Default: us-east-1.
  std::string region = "us-east-1";
  /// s3.entropy.key: the marker replaced by entropy (see above). Default: none.
  std::string entropyKey;
  /// s3.entropy.length: characters that replace the marker, 1..32. Default: 4.
  int entropyLength = 4;
  /// s3.upload.min.part.size: files larger than this go up as multipart uploads, in parts
  /// of this size. At least 5 MiB on AWS and Ceph RGW (the last part may be smaller).
  /// Default: 5 MiB.
  uint64_t minPartSize = 5ull << 20;
  /// Tries of one request, the first included, before its error is final. Default: 8.
  int maxAttempts = 8;
  /// Backoff before the second try; doubles up to maxBackoff; each wait is drawn
  /// uniformly from [backoff/2, backoff] (jitter). Defaults: 50 ms, 5 s.
  std::chrono::milliseconds initialBackoff{50};
  std::chrono::milliseconds maxBackoff{5000};
  /// Connect time-out, and the time a transfer may stall below 1 byte/s. Defaults: 10 s, 60 s.
  std::chrono::milliseconds connectTimeout{10000};
  std::chrono::milliseconds stallTimeout{60000};
  /// ListObjectsV2 max-keys (1..1000). Default: 1000. Tests use small pages.
  int listPageSize = 1000;
  /// Test hook, called before each try of each request with the HTTP method and the
  /// object key ("" for bucket-level requests): a non-zero return is taken as the HTTP
  /// status of that try without sending it (e.g. 503 to test retries). Default: none.
  std::function<int(std::string_view method, std::string_view key)> faultHook;
};

/// Builds S3Options from Flink-style keys (s3.endpoint, s3.path.style.access,
/// s3.access-key, s3.secret-key, s3.entropy.key, s3.entropy.length,
/// s3.upload.min.part.size as bytes or with a unit b/kb/mb/gb, binary) and, for what the keys leave unset, the
/// environment (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
/// AWS_SECRET_ACCESS_KEY, AWS_REGION or AWS_DEFAULT_REGION). Unknown s3.* keys are InvalidArgument; so are bad values.
Result<S3Options> s3OptionsFrom(const std::map<std::string, std::string>& keys);

/// Opens the bucket/prefix of an "s3://bucket[/prefix]" URI. InvalidArgument for a bad
/// URI or options (missing credentials, bad endpoint, part size below 5 MiB is allowed
/// but the store may refuse it). Does no I/O.
Result<std::unique_ptr<CheckpointStorage>> openS3Storage(const std::string& uri, const S3Options& options);

/// The options openStorage() uses for s3:// locations: set once by the program from its
/// configuration before storage is opened (the host does it at start-up). Until then,
/// s3OptionsFrom({}) (the environment only). Thread-safe.
void setDefaultS3Options(const S3Options& options);
S3Options defaultS3Options();

/// True if uriOrPath names an object store ("s3://", "s3a://" or "s3p://").
bool isObjectStoreUri(std::string_view uriOrPath);

}  // namespace jobhost::state
