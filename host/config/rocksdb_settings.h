// host/config/rocksdb_settings.h — the state.backend.rocksdb.* configuration keys, read
// into the state backend's RocksDbOptions: the one place that knows their names, limits
// and spelling (job setup uses it to run a job, `jobhost info` to show the settings).
//
// Thread-safety: pure functions.
#pragma once

#include "config/configuration.h"
#include "jobhost/state/keyed_backend.h"

namespace jobhost::host {

/// The RocksDB options the configuration chooses. Throws ConfigError naming the key, its
/// value, where it came from and what is accepted, for the first bad value.
state::RocksDbOptions rocksDbOptionsFrom(const Configuration& config);

}  // namespace jobhost::host
