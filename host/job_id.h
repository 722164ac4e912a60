// host/job_id.h — what may be a job id. A job id names the job's checkpoint directory
// (<state.checkpoints.dir>/<id>), its working directory and its control socket, so it is
// one plain path component.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

namespace jobhost::host {

/// Why `id` cannot be a job id (empty if it can): 1 to 64 letters, digits, '-' and '_',
/// not starting with '-'. The ids the supervisor makes up (32 hex digits) are valid.
std::string jobIdProblem(const std::string& id);

}  // namespace jobhost::host
