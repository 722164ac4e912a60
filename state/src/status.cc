// status.cc — Status, fromErrno and Result support.
#include "jobhost/state/status.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>

namespace jobhost::state {
namespace {

// strerror_r has a GNU (char*) and an XSI (int) flavour; accept either.
[[maybe_unused]] const char* pickStrerror(char* result, char* /*buf*/) { return result; }
[[maybe_unused]] const char* pickStrerror(int result, char* buf) {
  return result == 0 ? buf : "Unknown error";
}

std::string errnoText(int err) {
  char buf[256];
  buf[0] = '\0';
  const char* text = pickStrerror(strerror_r(err, buf, sizeof(buf)), buf);
  return text;
}

}  // namespace

Status::Status(Code code, std::string_view msg)
    : rep_(new Rep{code, std::string(msg)}) {}

Status::Status(const Status& other)
    : rep_(other.rep_ == nullptr ? nullptr : new Rep(*other.rep_)) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    rep_.reset(other.rep_ == nullptr ? nullptr : new Rep(*other.rep_));
  }
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ == nullptr ? kEmpty : rep_->message;
}

std::string_view codeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kNotFound: return "Not found";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kInvalidArgument: return "Invalid argument";
    case Status::Code::kIOError: return "IO error";
    case Status::Code::kNoSpace: return "No space";
    case Status::Code::kPermissionDenied: return "Permission denied";
    case Status::Code::kIncompatible: return "Incompatible";
    case Status::Code::kUnavailable: return "Unavailable";
  }
  return "Unknown code";
}

std::string Status::toString() const {
  if (rep_ == nullptr) return "OK";
  std::string out(codeName(rep_->code));
  out += ": ";
  out += rep_->message;
  return out;
}

Status Status::withContext(std::string_view context) const {
  if (rep_ == nullptr) return Status();
  return Status(rep_->code, std::string(context) + ": " + rep_->message);
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.toString();
}

Status fromErrno(const std::string& context, int err) {
  std::string msg = context + ": " + errnoText(err);
  switch (err) {
    case ENOENT:
      return Status::NotFound(msg);
    case ENOSPC:
#if defined(EDQUOT)
    case EDQUOT:
#endif
      return Status::NoSpace(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return Status::PermissionDenied(msg);
    // The device or the network did not answer: the same call may succeed later.
    case EIO:
    case ETIMEDOUT:
    case ECONNRESET:
    case ECONNREFUSED:
    case ECONNABORTED:
    case ENETDOWN:
    case ENETUNREACH:
    case ENETRESET:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ESTALE:
    case ENOLINK:
    case EAGAIN:
      return Status::Unavailable(msg);
    default:
      return Status::IOError(msg);
  }
}

namespace internal {
void badResultAccess(const Status& status) {
  std::fprintf(stderr, "jobhost: value() called on an error Result: %s\n",
               status.toString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace jobhost::state
