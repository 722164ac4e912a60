// host/private_directory.cc — see private_directory.h.
#include "private_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace jobhost::host {

namespace {

std::string octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

}  // namespace

state::Result<std::string> ensurePrivateDirectory(const std::string& path, const std::string& what,
                                                  const std::string& hint) {
  bool created = ::mkdir(path.c_str(), 0700) == 0;
  if (!created && errno != EEXIST) return state::fromErrno("cannot create " + what + " " + path, errno);
  const std::string refuse = "refusing to use " + what + " " + path + ": ";
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    struct stat st {};
    if (err == ELOOP || (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)))
      return state::Status::PermissionDenied(refuse + "it is a symbolic link" + hint);
    if (err == ENOTDIR) return state::Status::PermissionDenied(refuse + "it is not a directory" + hint);
    return state::fromErrno("cannot open " + what + " " + path, err);
  }
  struct stat st {};
  int rc = ::fstat(fd, &st);
  int err = errno;
  // mkdir() applied the umask; only a directory we just created is ours to widen back.
  if (rc == 0 && created && (st.st_mode & 07777) != 0700 && st.st_uid == ::geteuid() && ::fchmod(fd, 0700) == 0)
    st.st_mode = (st.st_mode & ~07777) | 0700;
  ::close(fd);
  if (rc != 0) return state::fromErrno("cannot stat " + what + " " + path, err);
  if (st.st_uid != ::geteuid())
    return state::Status::PermissionDenied(refuse + "it is owned by uid " + std::to_string(st.st_uid) +
                                           ", not by you (uid " + std::to_string(::geteuid()) + ")" + hint);
  if ((st.st_mode & 07777) != 0700)
    return state::Status::PermissionDenied(refuse + "its mode is " + octal(st.st_mode) +
                                           ", not 0700 (other users could reach what is in it) — chmod 700 " + path +
                                           " if it is yours");
  return path;
}

}  // namespace jobhost::host
