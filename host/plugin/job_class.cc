#include "host/plugin/job_class.h"

#include "host/plugin/user_code.h"
#include "jobhost/job.h"

namespace jobhost::host {

std::unique_ptr<Job> createJob(const JobClassInfo& info) {
  return fenceUserCode(info.name, "the constructor", [&] { return std::unique_ptr<Job>(info.create()); });
}

}  // namespace jobhost::host
