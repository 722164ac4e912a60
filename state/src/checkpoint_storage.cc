// checkpoint_storage.cc — CheckpointStorage's defaults: a FileBatch of one putFile() per
// file, and probe().
//
// For a storage whose every put is atomic and durable on its own (S3: a PUT or a
// completed multipart upload), batching saves nothing, so the default publishes each
// file as it is added and, when the batch goes away uncommitted, removes them again.
//
// Thread-safety: as FileBatch (checkpoint_storage.h); mu_ guards the list of published
// files, putFile() itself runs unlocked so that files are uploaded in parallel.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jobhost/state/checkpoint_storage.h"

namespace jobhost::state {
namespace {

class PutEachFileBatch final : public FileBatch {
 public:
  explicit PutEachFileBatch(CheckpointStorage& storage) : storage_(storage) {}

  ~PutEachFileBatch() override {
    if (committed_) return;
    for (const std::string& path : published_) storage_.remove(path).ignoreError();
  }

  Status putFile(const std::string& path, const std::string& localSourcePath) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (committed_) return committedError(path);
    }
    Status s = storage_.putFile(path, localSourcePath);
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    published_.push_back(path);
    return s;
  }

  Status commit() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (committed_) return Status::InvalidArgument("cannot commit a batch of files twice");
    committed_ = true;
    return Status::OK();
  }

 private:
  Status committedError(const std::string& path) const {
    return Status::InvalidArgument("cannot add " + storage_.describe(path) + " to a batch already committed");
  }

  CheckpointStorage& storage_;
  std::mutex mu_;
  std::vector<std::string> published_;  // GUARDED_BY(mu_)
  bool committed_ = false;              // GUARDED_BY(mu_)
};

}  // namespace

std::unique_ptr<FileBatch> CheckpointStorage::createBatch() { return std::make_unique<PutEachFileBatch>(*this); }

Status CheckpointStorage::probe() {
  // A name no file ever has (a reserved temporary name is refused by validation, so a
  // plain one): NotFound is an answer.
  auto size = fileSize(".jobhost-probe");
  if (size.ok() || size.status().isNotFound()) return Status::OK();
  return size.status();
}

}  // namespace jobhost::state
