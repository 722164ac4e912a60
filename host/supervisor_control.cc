#include "supervisor_control.h"

namespace jobhost::host {

state::Result<std::string> SupervisorControl::cancel(bool withSavepoint, const std::optional<std::string>& targetDir) {
  std::string path;
  if (withSavepoint) {
    auto sp = supervisor_.savepoint(targetDir, state::SnapshotFormat::kCanonical, /*stop=*/false);
    if (!sp.ok()) return sp.status();
    path = *sp;
  }
  supervisor_.requestCancel();
  return path;
}

}  // namespace jobhost::host
