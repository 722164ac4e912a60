// tests/support/forwarding_storage.h — a CheckpointStorage that forwards every operation to
// another one, for tests that wrap a real storage to observe or change one call (count the
// uploads, fail one, record read sizes) and override only that.
//
// createBatch() and fetchToLocal() are not forwarded: the base class's defaults run over the
// forwarded putFile()/getToLocalFile(), so a wrapper sees every file a batch or a fetch
// moves (a test that wants the wrapped storage's own batch overrides createBatch()).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"

namespace jobhost::testing {

class ForwardingStorage : public state::CheckpointStorage {
 public:
  explicit ForwardingStorage(state::CheckpointStorage& base) : base_(base) {}

  state::Result<std::unique_ptr<state::WritableFile>> create(const std::string& p) override {
    return base_.create(p);
  }
  state::Status putFile(const std::string& p, const std::string& local) override { return base_.putFile(p, local); }
  state::Status put(const std::string& p, std::string_view bytes) override { return base_.put(p, bytes); }
  state::Result<std::unique_ptr<state::ReadableFile>> open(const std::string& p) override { return base_.open(p); }
  state::Status get(const std::string& p, std::string* out) override { return base_.get(p, out); }
  state::Status getToLocalFile(const std::string& p, const std::string& dest) override {
    return base_.getToLocalFile(p, dest);
  }
  state::Result<uint64_t> fileSize(const std::string& p) override { return base_.fileSize(p); }
  bool exists(const std::string& p) override { return base_.exists(p); }
  state::Status list(const std::string& dir, std::vector<state::FileEntry>* out) override {
    return base_.list(dir, out);
  }
  state::Status listTemporary(const std::string& dir, std::vector<state::FileEntry>* out) override {
    return base_.listTemporary(dir, out);
  }
  state::Status remove(const std::string& p) override { return base_.remove(p); }
  state::Status removeTemporary(const std::string& p) override { return base_.removeTemporary(p); }
  state::Status removeAll(const std::string& dir) override { return base_.removeAll(dir); }
  std::string describe(const std::string& p) const override { return base_.describe(p); }
  std::string rootUri() const override { return base_.rootUri(); }

 protected:
  state::CheckpointStorage& base_;
};

}  // namespace jobhost::testing
