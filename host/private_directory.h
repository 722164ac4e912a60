// host/private_directory.h — directories only this user may enter: the runtime directory
// of the control sockets (control/control_server.h) and the working directories of jobs
// (job_work_directory.h). One owner of the checks, so both refuse the same things.
//
// Thread-safety: free functions; the umask is not touched (mkdir's mode is checked
// afterwards, and chmod-ed only on a directory this call created).
#pragma once

#include <string>

#include "jobhost/state/status.h"

namespace jobhost::host {

/// Creates directory `path` if it does not exist (mode 0700; its parent must exist) and
/// checks, through a descriptor opened with O_NOFOLLOW | O_DIRECTORY (so a symbolic link
/// planted at `path` is never followed), that it is a directory owned by the effective
/// user with mode 0700. Returns `path`, or PermissionDenied naming `what` (e.g. "the
/// control directory"), the path and the reason, followed by `hint` (how to fix it); an
/// OS error from mkdir/open as its Status.
state::Result<std::string> ensurePrivateDirectory(const std::string& path, const std::string& what,
                                                  const std::string& hint);

}  // namespace jobhost::host
