// host/plugin/job_class.h — a job class of a loaded plugin (PluginLibrary::selectClass)
// made into an instance: its constructor runs fenced (user_code.h).
//
// Thread-safety: as the class's constructor; the host calls it on one thread.
#pragma once

#include <memory>

namespace jobhost {
class Job;
struct JobClassInfo;
}  // namespace jobhost

namespace jobhost::host {

/// A new instance of the class (runs its constructor). Throws UserCodeFailure
/// (plugin/user_code.h) for anything the constructor throws.
std::unique_ptr<Job> createJob(const JobClassInfo& info);

}  // namespace jobhost::host
