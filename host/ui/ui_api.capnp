# host/ui/ui_api.capnp — the JSON documents of `jobhost ui`'s REST API (README "Web
# dashboard"), encoded with capnp::JsonCodec. Field names are the JSON keys.
#
# JsonCodec writes 64-bit integers as JSON strings; counts, bytes, ids and epoch
# milliseconds are therefore Float64 here (exact up to 2^53, which is what JavaScript can
# hold anyway) so that they are JSON numbers.
@0xb5e3f1a4c7d20e91;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("jobhost::host::uiapi");

struct Job {
  id @0 :Text;                  # 32 hex digits
  jobClass @1 :Text;
  pluginPath @2 :Text;          # absolute; only the file name for jobs known from disk alone
  backend @3 :Text;             # "hashmap", "rocksdb (incremental)", ...
  parallelism @4 :Int32;
  status @5 :Text;              # CREATED RUNNING RESTARTING CANCELLING FINISHED FAILED CANCELED, or ENDED
  running @6 :Bool;             # answers on its control socket
  source @7 :Text;              # "control" (a running job) or "disk" (found under the checkpoint directory)
  startTimeMs @8 :Float64;      # epoch ms; 0 if unknown
  restarts @9 :Int32;
  lastFailure @10 :Text;        # the cause of the last failure ("" if none)
  lastFailureTimeMs @11 :Float64;
  recordsIn @12 :Float64;
  recordsOut @13 :Float64;
  sampledAtMs @14 :Float64;     # when the counters were read (for rates)
  lastCheckpointId @15 :Float64;
  lastCheckpointPath @16 :Text;
  checkpointDir @17 :Text;      # <state.checkpoints.dir>/<jobId>
  checkpointsCompleted @18 :Float64;
  checkpointsFailed @19 :Float64;
  pid @20 :Int32;
  # Metrics, as the job's supervisor computes them (the same numbers as its /metrics):
  recordsInPerSecond @21 :Float64;   # over the last 5 s
  recordsOutPerSecond @22 :Float64;
  checkpointsInProgress @23 :Float64;
  lastCheckpointDurationMs @24 :Float64;
  lastCheckpointSizeBytes @25 :Float64;
  lastCheckpointFullSizeBytes @26 :Float64;
  lastCheckpointCompletedMs @27 :Float64;   # epoch ms; 0: none
  lastRestoreMs @28 :Float64;               # epoch ms; 0: never restored
  storeUnavailableSinceMs @29 :Float64;     # epoch ms; 0: the checkpoint store is available
  tasks @30 :List(Task);                    # running jobs only
  checkpointStoreError @31 :Text;           # the store's last error while storeUnavailableSinceMs != 0
  checkpointsDeclinedUnavailable @32 :Float64;
  publishingFencedSinceMs @33 :Float64;     # 0: the job publishes checkpoints
}

# One task (a subtask of a chain of operators between exchanges), Flink's task metrics.
struct Task {
  name @0 :Text;
  subtask @1 :Int32;                        # 0-based
  parallelism @2 :Int32;
  recordsIn @3 :Float64;
  recordsOut @4 :Float64;
  recordsInPerSecond @5 :Float64;
  recordsOutPerSecond @6 :Float64;
  busyTimeMsPerSecond @7 :Float64;
  backPressuredTimeMsPerSecond @8 :Float64;
  idleTimeMsPerSecond @9 :Float64;
  inputWatermark @10 :Float64;              # epoch ms (event time); only if hasInputWatermark
  hasInputWatermark @11 :Bool;              # false: a source task, or no watermark yet
  stateEntries @12 :Float64;                # keys in the task's keyed backends
}

struct JobList {
  jobs @0 :List(Job);
  readOnly @1 :Bool;            # savepoint and cancel are disabled
  checkpointDir @2 :Text;       # where finished jobs are looked for
  problems @3 :List(Text);      # jobs that could not be asked, ...
  serverTimeMs @4 :Float64;
}

struct ConfigEntry {
  key @0 :Text;
  value @1 :Text;
}

struct JobDetail {
  job @0 :Job;
  configuration @1 :List(ConfigEntry);  # in effect (running jobs; else the last seen)
  readOnly @2 :Bool;
}

struct Dependency {
  checkpointId @0 :Float64;
  files @1 :UInt32;
  bytes @2 :Float64;
}

struct Checkpoint {
  id @0 :Float64;
  status @1 :Text;              # COMPLETED, FAILED, IN_PROGRESS
  kind @2 :Text;                # checkpoint, savepoint
  type @3 :Text;                # full, incremental, canonical, native
  triggerTimeMs @4 :Float64;
  durationMs @5 :Float64;       # end to end
  syncDurationMs @6 :Float64;
  asyncDurationMs @7 :Float64;
  newBytes @8 :Float64;
  totalBytes @9 :Float64;
  dependsOn @10 :List(Float64); # checkpoint ids whose files it references
  dependencies @11 :List(Dependency);
  path @12 :Text;
  failureReason @13 :Text;
  subsumed @14 :Bool;           # deleted by retention
  restorable @15 :Bool;         # complete and still on disk
  restoreCommand @16 :Text;     # jobhost run -s <path> -c <Class> <plugin.so>; "" unless restorable
  alignmentMs @17 :Float64;     # the longest barrier alignment of any task
}

struct CheckpointList {
  jobId @0 :Text;
  jobClass @1 :Text;
  source @2 :Text;              # "control" or "disk"
  checkpoints @3 :List(Checkpoint);  # oldest first
}

struct SavepointRequest {
  format @0 :Text;              # "canonical" (default) or "native"; nothing else is accepted
}

struct SavepointResult {
  jobId @0 :Text;
  path @1 :Text;
  restoreCommand @2 :Text;
}

struct CancelResult {
  jobId @0 :Text;
  status @1 :Text;
}

struct Error {
  status @0 :Int32;
  error @1 :Text;
}

# GET /api/jobs/<id>/checkpoints/<n>/state: the keyed state of a completed checkpoint (the
# reading and decoding of `jobhost state ls`).
struct StateInfo {
  name @0 :Text;
  kind @1 :Text;                # ValueState, ListState, MapState
  keyType @2 :Text;             # serializer ids ("string", "pair<string,i64>", "com.example.Point v1")
  userKeyType @3 :Text;         # MapState only, else "-"
  valueType @4 :Text;
  entries @5 :Float64;          # keys (MapState: map entries)
  bytes @6 :Float64;            # serialized keys and values
}

struct OperatorState {
  uid @0 :Text;
  name @1 :Text;
  states @2 :List(StateInfo);
}

struct StateView {
  jobId @0 :Text;
  checkpointId @1 :Float64;
  path @2 :Text;
  backend @3 :Text;
  maxParallelism @4 :Int32;
  operators @5 :List(OperatorState);   # those with keyed state
}

# GET /api/jobs/<id>/checkpoints/<n>/state/<uid>/<state>?limit=N: its first entries, in
# the order of `jobhost state dump` (key group by key group, sorted inside each).
struct StateEntry {
  key @0 :Text;
  userKey @1 :Text;             # MapState only
  value @2 :Text;               # user serializers: hex with the serializer id
}

struct StateEntries {
  jobId @0 :Text;
  checkpointId @1 :Float64;
  operatorUid @2 :Text;
  state @3 :Text;
  kind @4 :Text;
  entries @5 :List(StateEntry);
  limit @6 :UInt32;
  more @7 :Bool;                # there are more entries than shown
  undecoded @8 :List(Text);     # serializers shown as hex (decode with jobhost state dump --plugin)
}
