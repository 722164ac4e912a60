// host/supervisor_control.h — the control endpoint's view of a job run by a JobSupervisor
// (list, savepoint, cancel, stop; the dashboard's status and history).
//
// Thread-safety: thread-safe, as JobControl requires.
#pragma once

#include "control/job_control.h"
#include "job_supervisor.h"

namespace jobhost::host {

class SupervisorControl : public JobControl {
 public:
  SupervisorControl(JobSupervisor& supervisor, const JobSetup& setup) : supervisor_(supervisor), setup_(setup) {}

  JobStatusInfo status() override { return supervisor_.status(); }
  std::vector<CheckpointRecord> checkpointHistory() override { return supervisor_.history(); }
  /// Built before the control endpoint starts; read-only since.
  std::map<std::string, std::string> configuration() override { return setup_.config.effective(); }
  state::Result<std::string> savepoint(const std::optional<std::string>& targetDir,
                                       state::SnapshotFormat format) override {
    return supervisor_.savepoint(targetDir, format, /*stop=*/false);
  }
  /// With a savepoint: the job is cancelled only once it succeeded.
  state::Result<std::string> cancel(bool withSavepoint, const std::optional<std::string>& targetDir) override;
  /// Stop-with-savepoint: the sources emit nothing after the savepoint's barrier and the
  /// job ends once the savepoint is complete (if it fails, the job keeps running).
  state::Result<std::string> stop(const std::optional<std::string>& targetDir, bool drain) override {
    return supervisor_.savepoint(targetDir, state::SnapshotFormat::kCanonical, /*stop=*/true, drain);
  }

 private:
  JobSupervisor& supervisor_;
  const JobSetup& setup_;
};

}  // namespace jobhost::host
