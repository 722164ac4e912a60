// Small shared definitions of the state module.
#include "jobhost/state/keyed_backend.h"

namespace jobhost::state {

const char* backendTypeName(BackendType t) {
  return t == BackendType::kRocksDb ? "rocksdb" : "hashmap";
}

}  // namespace jobhost::state
