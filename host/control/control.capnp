# host/control/control.capnp — the control protocol of a running job.
#
# Every `jobhost run` serves one JobControlService (the bootstrap capability) on a Unix
# domain socket `<runtime dir>/<jobId>.sock` (see control_server.h). Only the socket
# owner's uid may connect (SO_PEERCRED is checked on every connection).
#
# Errors travel as Cap'n Proto exceptions (type FAILED) whose reason is our message,
# e.g. "cannot create savepoint directory /x/y: Not a directory". The client strips the
# "remote exception: " prefix capnp adds.
#
# Compatibility: fields and methods are only ever added (standard capnp evolution). A
# change that old clients must not talk to bumps `protocolVersion`; clients compare it
# with their own and refuse a job that speaks a newer major protocol.
@0xd84776cf3338f1ff;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("jobhost::host::rpc");

const protocolVersion :UInt32 = 1;

enum JobState {
  created @0;
  running @1;
  restarting @2;
  cancelling @3;
  finished @4;
  failed @5;
  canceled @6;
}

enum Format {
  canonical @0;  # backend-independent: restorable into hashmap and rocksdb
  native @1;     # the backend's own format: fast, bound to the backend
}

struct JobStatus {
  protocolVersion @0 :UInt32;   # of the job's side
  jobId @1 :Text;
  jobClass @2 :Text;
  pluginPath @3 :Text;          # absolute
  backend @4 :Text;             # "hashmap", "rocksdb (incremental)", ...
  parallelism @5 :Int32;
  state @6 :JobState;
  startedMs @7 :Int64;          # epoch ms
  restarts @8 :Int32;
  lastFailure @9 :Text;
  lastCheckpointId @10 :UInt64; # 0: none yet
  lastCheckpointPath @11 :Text;
  checkpointDir @12 :Text;      # <state.checkpoints.dir>/<jobId>; empty if checkpoints are off
  recordsIn @13 :UInt64;
  recordsOut @14 :UInt64;
  pid @15 :Int32;
  lastFailureMs @16 :Int64;     # epoch ms of lastFailure; 0: none
  checkpointsCompleted @17 :UInt64;  # since the job started, all attempts
  checkpointsFailed @18 :UInt64;
  pluginDigest @19 :Text;       # of the plugin bytes the job loaded; `jobhost list` compares the file
  # Metrics (control/job_control.h JobStatusInfo; the dashboard shows them, /metrics too).
  recordsInPerSecond @20 :Float64;
  recordsOutPerSecond @21 :Float64;
  tasks @22 :List(TaskStatus);
  checkpointsInProgress @23 :UInt64;
  lastCheckpointDurationMs @24 :UInt64;    # the newest completed checkpoint; 0: none
  lastCheckpointSizeBytes @25 :UInt64;     # what it wrote
  lastCheckpointFullSizeBytes @26 :UInt64; # everything it references
  lastCheckpointCompletedMs @27 :Int64;    # epoch ms; 0: none
  lastRestoreMs @28 :Int64;                # epoch ms of the last restore; 0: never
  runningSinceMs @29 :Int64;               # epoch ms the running attempt started running; 0: none runs
  storeUnavailableSinceMs @30 :Int64;      # epoch ms; 0: the checkpoint store is available
  # The checkpoint store and the job directory's lease (JobStatusInfo, issue 31).
  checkpointStoreError @31 :Text;          # its last error during the current outage
  checkpointStoreOutages @32 :UInt64;
  checkpointsDeclinedUnavailable @33 :UInt64;
  restoreRetries @34 :UInt64;
  leaseRenewedMs @35 :Int64;
  publishingFencedSinceMs @36 :Int64;
}

# One task (a subtask of a chain of operators) of the running attempt.
struct TaskStatus {
  name @0 :Text;
  subtask @1 :Int32;
  parallelism @2 :Int32;
  recordsIn @3 :UInt64;
  recordsOut @4 :UInt64;
  recordsInPerSecond @5 :Float64;
  recordsOutPerSecond @6 :Float64;
  busyTimeMsPerSecond @7 :Float64;
  backPressuredTimeMsPerSecond @8 :Float64;
  idleTimeMsPerSecond @9 :Float64;
  inputWatermark @10 :Int64;     # INT64_MIN: none yet
  backends @11 :List(Backend);

  struct Backend {
    operatorUid @0 :Text;
    backend @1 :Text;
    entries @2 :UInt64;
  }
}

enum CheckpointStatus {
  inProgress @0;
  completed @1;
  failed @2;
}

# One entry of a job's checkpoint history (host/checkpoint/checkpoint_record.h).
struct CheckpointRecord {
  id @0 :UInt64;
  status @1 :CheckpointStatus;
  savepoint @2 :Bool;           # kind: savepoint, else checkpoint
  incremental @3 :Bool;         # rocksdb incremental (may reference older checkpoints' files)
  canonical @4 :Bool;           # canonical format (savepoints)
  triggerTimeMs @5 :Int64;      # epoch ms
  durationMicros @6 :UInt64;    # trigger to published _metadata
  syncMicros @7 :UInt64;        # synchronous part (slowest task)
  asyncMicros @8 :UInt64;       # the rest: durationMicros - syncMicros
  newBytes @9 :UInt64;          # files written by this checkpoint
  totalBytes @10 :UInt64;       # all files it references (shared files included)
  dependsOn @11 :List(Dependency);  # older checkpoints whose files it references
  path @12 :Text;               # absolute directory
  failureReason @13 :Text;
  subsumed @14 :Bool;           # deleted by retention since it completed
  alignmentMicros @15 :UInt64;  # the longest barrier alignment of any task (issue 14)

  struct Dependency {
    checkpointId @0 :UInt64;
    files @1 :UInt32;
    bytes @2 :UInt64;
  }
}

struct ConfigEntry {
  key @0 :Text;
  value @1 :Text;
}

interface JobControlService {
  # `targetDir`: an absolute directory (the client makes relative paths absolute against
  # its own working directory); empty means the job's state.savepoints.dir.

  status @0 () -> (status :JobStatus);
  # Answers at once, also while a savepoint is being taken.

  savepoint @1 (targetDir :Text, format :Format) -> (path :Text);
  # Blocks until the savepoint is complete; `path` is its absolute directory. A failed
  # savepoint is an exception; the job keeps running.

  cancel @2 (withSavepoint :Bool, targetDir :Text) -> (savepointPath :Text);
  # With `withSavepoint`, a (canonical) savepoint first; if it fails the job keeps running
  # and the call throws. `savepointPath` is empty without a savepoint.

  stop @3 (targetDir :Text, drain :Bool) -> (savepointPath :Text);
  # A savepoint, then a clean stop (sinks flushed). `drain`: the sources first send the
  # maximum watermark, so every event-time window and timer fires before the savepoint
  # (Flink's stop --drain; a job restored from it sees the end of time).

  checkpointHistory @4 () -> (records :List(CheckpointRecord));
  # The newest checkpoints and savepoints (at most 200), oldest first, including failed and
  # subsumed ones. Jobs of older jobhost versions answer UNIMPLEMENTED.

  configuration @5 () -> (entries :List(ConfigEntry));
  # The configuration in effect (all layers applied), sorted by key.
}
