# The `_metadata` file of a checkpoint or savepoint.
#
# File layout: the 8 bytes "JHMETA\r\n", a little-endian u32 format version, then one
# Cap'n Proto message (flat array) of CheckpointMetadata. Evolve by adding fields with new
# ordinals only; bump kFormatVersion when a reader must refuse older code.
#
# File paths are relative to the directory holding `_metadata` ("../shared/..." for
# shared files of incremental checkpoints), so savepoints can be moved.
@0x8bb4d6848fa5356d;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("jobhost::state::schema");

struct CheckpointMetadata {
  formatVersion @0 :UInt32;
  jobId @1 :Text;
  checkpointId @2 :UInt64;
  kind @3 :Kind;
  format @4 :Format;
  timestampMs @5 :Int64;
  writer @6 :Writer;
  backend @7 :Text;          # "hashmap" | "rocksdb"
  incremental @8 :Bool;
  maxParallelism @9 :UInt32;
  operators @10 :List(OperatorSnapshot);
  stats @11 :Stats;

  enum Kind { checkpoint @0; savepoint @1; }
  enum Format { native @0; canonical @1; }
}

struct Writer {
  jobClass @0 :Text;
  pluginFile @1 :Text;       # file name of the plugin .so
  pluginDigest @2 :Text;
  sdkVersion @3 :Text;
  parallelism @4 :UInt32;
}

struct Stats {
  syncMicros @0 :UInt64;     # longest synchronous part of any subtask
  asyncMicros @1 :UInt64;    # from trigger to all acknowledgements
  newBytes @2 :UInt64;       # bytes of files written by this checkpoint
  totalBytes @3 :UInt64;     # bytes of every file it references
  alignmentMicros @4 :UInt64;  # longest barrier alignment of any subtask (0: none, or older writers)
}

struct OperatorSnapshot {
  uid @0 :Text;
  name @1 :Text;
  parallelism @2 :UInt32;
  keyed @3 :Bool;
  states @4 :List(StateDescriptor);
  subtasks @5 :List(SubtaskSnapshot);
}

struct StateDescriptor {
  name @0 :Text;
  kind @1 :Kind;
  keySerializer @2 :Text;
  keySerializerVersion @3 :UInt32;
  userKeySerializer @4 :Text;
  userKeySerializerVersion @5 :UInt32;
  valueSerializer @6 :Text;
  valueSerializerVersion @7 :UInt32;

  enum Kind { value @0; list @1; map @2; }
}

struct SubtaskSnapshot {
  index @0 :UInt32;
  operatorState @1 :Data;
  keyed :union {
    none @2 :Void;
    keyGroups @3 :KeyGroupsStateHandle;
    incremental @4 :IncrementalRemoteKeyedStateHandle;
    incrementalKeyGroups @5 :IncrementalKeyGroupsStateHandle;
  }
  # An unaligned checkpoint's in-flight records (InputChannelStateHandle): what this
  # subtask's input channels held, or took after its snapshot, before each channel's
  # barrier. Only on the operator that is the exchange receiving them. Format version 2.
  inputChannels @6 :List(InputChannelBuffer);
  # With inputChannels: the receiving task's input watermark when it snapshotted. A
  # restore raises the watermark to it before the records are processed, so that a record
  # that was late then is late again (minimum: not recorded).
  inputWatermark @7 :Int64 = -9223372036854775808;
}

# One buffer of in-flight records from producing subtask `fromSubtask` into input
# `input` of the exchange. `data` is the exchange's wire format, record after record:
# key group (u16 LE, 0xffff: unkeyed), event timestamp (i64 LE), key and record (each a
# varint length and the bytes).
struct InputChannelBuffer {
  input @0 :UInt32;
  fromSubtask @1 :UInt32;
  data @2 :Data;
}

struct FileRef {
  path @0 :Text;
  size @1 :UInt64;
}

struct KeyGroupsStateHandle {
  file @0 :FileRef;
  startKeyGroup @1 :UInt32;
  endKeyGroup @2 :UInt32;
  offsets @3 :List(UInt64);
}

struct SharedFile {
  localName @0 :Text;
  file @1 :FileRef;
  createdByCheckpoint @2 :UInt64;
}

struct IncrementalRemoteKeyedStateHandle {
  backendId @0 :Text;
  checkpointId @1 :UInt64;
  startKeyGroup @2 :UInt32;
  endKeyGroup @3 :UInt32;
  sharedFiles @4 :List(SharedFile);
  privateFiles @5 :List(SharedFile);
  columnFamilies @6 :List(Text);
}

# An incremental checkpoint of the hashmap backend: key-group files in the shared
# directory and, per file, the runs of key groups read from it.
struct IncrementalKeyGroupsStateHandle {
  backendId @0 :Text;
  checkpointId @1 :UInt64;
  startKeyGroup @2 :UInt32;
  endKeyGroup @3 :UInt32;
  parts @4 :List(KeyGroupsFilePart);
}

struct KeyGroupsFilePart {
  file @0 :KeyGroupsStateHandle;
  createdByCheckpoint @1 :UInt64;
  keyGroups @2 :List(KeyGroupRun);
}

struct KeyGroupRun {
  start @0 :UInt32;
  end @1 :UInt32;
}
