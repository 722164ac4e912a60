# Messages between `jobhost run` (the supervisor) and its worker process, one Cap'n Proto
# message per frame over a socketpair. The worker runs the job's tasks; a crash of user
# code takes only the worker down.
@0x8436f4e43ffd6b77;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("jobhost::host::wire");

struct ToWorker {
  union {
    savepoint :group {
      requestId @0 :UInt64;
      targetDir @1 :Text;
      canonical @2 :Bool;
      # jobhost stop: the sources emit nothing after this savepoint's barrier, and the
      # worker ends the job (CANCELLED) once it is complete.
      stop @4 :Bool;
      # jobhost stop --drain: the maximum watermark before the barrier (every event-time
      # timer fires first).
      drain @5 :Bool;
    }
    cancel @3 :Void;
    # The job directory's lease (object stores, checkpoint/job_directory_lock.h), each time
    # the supervisor renews it or fails to: the worker publishes and deletes in the job
    # directory only until `publishUntilNanos` (CLOCK_MONOTONIC, the same clock in both
    # processes); 0 while it does not hold the lease.
    lease :group {
      publishUntilNanos @6 :Int64;
      why @7 :Text;  # why not, when publishUntilNanos is 0 or in the past
    }
  }
}

struct FromWorker {
  union {
    running @0 :Void;
    stats :group {
      recordsIn @1 :UInt64;
      recordsOut @2 :UInt64;
      lastCheckpointId @3 :UInt64;
      lastCheckpointPath @4 :Text;
      tasks @15 :List(TaskStats);  # every task's counters (runtime/task_metrics.h)
      # The checkpoint store as this attempt's coordinator sees it (StoreHealth).
      storeUnavailableSinceMs @16 :Int64;  # 0: it answers
      storeError @17 :Text;
      storeOutages @18 :UInt64;
      checkpointsDeclinedUnavailable @19 :UInt64;
    }
    savepointDone :group {
      requestId @5 :UInt64;
      path @6 :Text;
      error @7 :Text;
    }
    ended :group {
      kind @8 :EndKind;
      message @9 :Text;
      operatorName @10 :Text;
      subtask @11 :Text;
      restoreFailure @12 :Bool;
      exitCode @13 :Int32;
      # The attempt could not start because the checkpoint store did not answer (or the
      # disk is full) while restoring: the supervisor waits and tries again, without
      # counting it against the restart strategy.
      storeUnavailable @20 :Bool;
      # User code threw DependencyUnavailable (a database, a broker did not answer): the
      # supervisor waits with backoff and restarts the attempt, without counting it.
      dependencyUnavailable @21 :Bool;
    }
    checkpointEvent @14 :CheckpointEvent;  # a history record was added or changed
  }
}

# One task's counters at one moment (TaskMetricsSample): cumulative since the attempt
# started; the supervisor turns them into rates.
struct TaskStats {
  name @0 :Text;                 # "Source: Lines -> Flat Map"
  subtask @1 :Int32;             # 0-based
  parallelism @2 :Int32;
  recordsIn @3 :UInt64;
  recordsOut @4 :UInt64;
  idleNanos @5 :UInt64;
  backPressuredNanos @6 :UInt64;
  inputWatermark @7 :Int64;      # INT64_MIN: none yet
  backends @8 :List(BackendStats);

  struct BackendStats {
    operatorUid @0 :Text;
    backend @1 :Text;            # "hashmap", "rocksdb"
    entries @2 :UInt64;          # keys, as of the restore or the last checkpoint
  }
}

# One record of the coordinator's checkpoint history (checkpoint/checkpoint_record.h);
# (id, triggerTimeMs) identifies it.
struct CheckpointEvent {
  id @0 :UInt64;
  status @1 :CheckpointStatus;
  savepoint @2 :Bool;
  incremental @3 :Bool;
  canonical @4 :Bool;
  triggerTimeMs @5 :Int64;
  durationMicros @6 :UInt64;
  syncMicros @7 :UInt64;
  asyncMicros @8 :UInt64;
  newBytes @9 :UInt64;
  totalBytes @10 :UInt64;
  dependsOn @11 :List(Dependency);
  path @12 :Text;
  failureReason @13 :Text;
  subsumed @14 :Bool;
  alignmentMicros @15 :UInt64;  # the longest barrier alignment of any task

  struct Dependency {
    checkpointId @0 :UInt64;
    files @1 :UInt32;
    bytes @2 :UInt64;
  }
}

enum CheckpointStatus {
  inProgress @0;
  completed @1;
  failed @2;
}

enum EndKind {
  finished @0;
  failed @1;
  cancelled @2;
  setupFailed @3;
}
