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

  stop @3 (targetDir :Text) -> (savepointPath :Text);
  # A savepoint, then a clean stop (sinks flushed).
}
