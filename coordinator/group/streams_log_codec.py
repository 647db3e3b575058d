"""The KIP-1071 streams-group records of __consumer_offsets, in Kafka 4.4's layouts.

Keys and values are laid out as the consumer-group records (consumer_log_codec): an
int16 key version naming the record, int16-length strings; flexible version-0 values.

  key 17 StreamsGroupMetadata(group)
         value: epoch int32, metadata hash int64, tag 0: validated topology epoch int32
  key 19 StreamsGroupMemberMetadata(group, member)
         value: instance id?, rack id?, client id, client host, rebalance timeout int32,
                topology epoch int32, process id, user endpoint? (host, port uint16),
                client tags [key, value]
  key 20 StreamsGroupTargetAssignmentMetadata(group)
         value: assignment epoch int32, tag 0: assignment timestamp int64
  key 21 StreamsGroupTargetAssignmentMember(group, member)
         value: active, standby, warm-up [subtopology id, [partition]]
  key 22 StreamsGroupCurrentMemberAssignment(group, member)
         value: member epoch int32, previous member epoch int32, state int8, active,
                standby, warm-up, and the same three pending revocation; active tasks
                carry tag 0: the epoch each partition was assigned at [int32]
  key 23 StreamsGroupTopology(group)
         value: topology epoch int32, subtopologies [id, source topics [], source topic
                regexes [], changelog topics [topic info], repartition sink topics [],
                repartition source topics [topic info], copartition groups [[int16] x3]]
         topic info: name, partitions int32, replication factor int16, configs [key, value]
A None value is a tombstone. (Key 18, the partition metadata of the first 4.0 design,
is no longer written by Kafka and is skipped here.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from coordinator.group import modern_group_records as layout
from coordinator.group.modern_group_records import ValueReader, ValueWriter, record_key
from coordinator.runtime import CoordinatorRecord

GROUP_METADATA = 17
MEMBER_METADATA = 19
TARGET_METADATA = 20
TARGET_MEMBER = 21
CURRENT_ASSIGNMENT = 22
TOPOLOGY = 23
_WITH_MEMBER = frozenset({MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
MEMBER_RECORDS = (CURRENT_ASSIGNMENT, TARGET_MEMBER, MEMBER_METADATA)  # a member's tombstones, in order
_VALIDATED_TOPOLOGY_EPOCH_TAG = 0
_ASSIGNMENT_EPOCHS_TAG = 0

Tasks = dict[str, frozenset[int]]  # subtopology id -> partitions (task ids)


@dataclass(frozen=True, slots=True)
class StreamsKey(layout.ModernGroupKey):
    """A streams group record's key."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int = 0  # 0: derived from the subtopology's source topics
    replication_factor: int = 0  # 0: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Indexes into the subtopology's source topics, regexes and repartition sources."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...] = ()


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: tuple[tuple[str, str], ...]


TaskEpochs = dict[tuple[str, int], int]  # (subtopology id, partition) -> the epoch it was assigned at


@dataclass(frozen=True, slots=True)
class AssignedTasks:
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)
    active_epochs: TaskEpochs = field(default_factory=dict)  # a current assignment's only


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: AssignedTasks
    pending_revocation: AssignedTasks


def decode_key(version: int, data: bytes) -> StreamsKey:
    return layout.decode_key(StreamsKey, version, data, _WITH_MEMBER)


# -- writing -------------------------------------------------------------------------------

def _strings(w: ValueWriter, values) -> None:
    w.varint(len(values) + 1)
    for v in values:
        w.string(v)


def _key_values(w: ValueWriter, pairs) -> None:
    w.varint(len(pairs) + 1)
    for k, v in pairs:
        w.string(k)
        w.string(v)
        w.varint(0)


def _tasks(w: ValueWriter, tasks: Tasks, epochs: TaskEpochs | None = None) -> None:
    """``epochs``: the assignment epochs of active tasks, as tag 0 of each entry."""
    w.varint(len(tasks) + 1)
    for subtopology in sorted(tasks):
        w.string(subtopology)
        partitions = sorted(tasks[subtopology])
        w.varint(len(partitions) + 1)
        for p in partitions:
            w.pack(">i", p)
        if epochs is None:
            w.varint(0)
            continue
        tag = ValueWriter(None)
        tag.varint(len(partitions) + 1)
        for p in partitions:
            tag.pack(">i", epochs.get((subtopology, p), 0))
        w.varint(1)
        w.varint(_ASSIGNMENT_EPOCHS_TAG)
        data = b"".join(tag.parts)
        w.varint(len(data))
        w.parts.append(data)


def _assigned(w: ValueWriter, tasks: AssignedTasks, with_epochs: bool = False) -> None:
    _tasks(w, tasks.active, tasks.active_epochs if with_epochs else None)
    _tasks(w, tasks.standby)
    _tasks(w, tasks.warmup)


def _topic_info(w: ValueWriter, info: TopicInfo) -> None:
    w.string(info.name)
    w.pack(">i", info.partitions)
    w.pack(">h", info.replication_factor)
    _key_values(w, info.configs)
    w.varint(0)


def _int16s(w: ValueWriter, values) -> None:
    w.varint(len(values) + 1)
    for v in values:
        w.pack(">h", v)


def group_metadata_record(group: str, epoch: int | None, metadata_hash: int = 0,
                          validated_topology_epoch: int = -1) -> CoordinatorRecord:
    tagged = ({_VALIDATED_TOPOLOGY_EPOCH_TAG: struct.pack(">i", validated_topology_epoch)}
              if validated_topology_epoch != -1 else None)
    return layout.group_epoch_record(GROUP_METADATA, group, epoch, metadata_hash, tagged)


def member_metadata_record(group: str, member: str, value: MemberMetadataValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(record_key(MEMBER_METADATA, group, member), None)
    w = ValueWriter()
    w.string(value.instance_id)
    w.string(value.rack_id)
    w.string(value.client_id)
    w.string(value.client_host)
    w.pack(">i", value.rebalance_timeout_ms)
    w.pack(">i", value.topology_epoch)
    w.string(value.process_id)
    if value.user_endpoint is None:
        w.pack(">b", -1)
    else:
        w.pack(">b", 1)
        w.string(value.user_endpoint[0])
        w.pack(">H", value.user_endpoint[1])
        w.varint(0)
    _key_values(w, value.client_tags)
    return CoordinatorRecord(record_key(MEMBER_METADATA, group, member), w.done())


def target_metadata_record(group: str, assignment_epoch: int | None, timestamp_ms: int = 0) -> CoordinatorRecord:
    return layout.assignment_epoch_record(TARGET_METADATA, group, assignment_epoch, timestamp_ms)


def target_member_record(group: str, member: str, tasks: AssignedTasks | None) -> CoordinatorRecord:
    if tasks is None:
        return CoordinatorRecord(record_key(TARGET_MEMBER, group, member), None)
    w = ValueWriter()
    _assigned(w, tasks)
    return CoordinatorRecord(record_key(TARGET_MEMBER, group, member), w.done())


def current_assignment_record(group: str, member: str, value: CurrentAssignmentValue | None) -> CoordinatorRecord:
    if value is None:
        return CoordinatorRecord(record_key(CURRENT_ASSIGNMENT, group, member), None)
    w = ValueWriter()
    w.pack(">i", value.member_epoch)
    w.pack(">i", value.previous_member_epoch)
    w.pack(">b", value.state)
    _assigned(w, value.assigned, with_epochs=True)
    _assigned(w, value.pending_revocation, with_epochs=True)
    return CoordinatorRecord(record_key(CURRENT_ASSIGNMENT, group, member), w.done())


def topology_record(group: str, topology: Topology | None) -> CoordinatorRecord:
    if topology is None:
        return CoordinatorRecord(record_key(TOPOLOGY, group), None)
    w = ValueWriter()
    w.pack(">i", topology.epoch)
    w.varint(len(topology.subtopologies) + 1)
    for s in topology.subtopologies:
        w.string(s.subtopology_id)
        _strings(w, s.source_topics)
        _strings(w, s.source_topic_regex)
        w.varint(len(s.changelog_topics) + 1)
        for info in s.changelog_topics:
            _topic_info(w, info)
        _strings(w, s.repartition_sink_topics)
        w.varint(len(s.repartition_source_topics) + 1)
        for info in s.repartition_source_topics:
            _topic_info(w, info)
        w.varint(len(s.copartition_groups) + 1)
        for g in s.copartition_groups:
            _int16s(w, g.source_topics)
            _int16s(w, g.source_topic_regex)
            _int16s(w, g.repartition_source_topics)
            w.varint(0)
        w.varint(0)
    return CoordinatorRecord(record_key(TOPOLOGY, group), w.done())


# -- reading -------------------------------------------------------------------------------

def _read_strings(r: ValueReader) -> tuple[str, ...]:
    return tuple(r.string() or "" for _ in range(r.varint() - 1))


def _read_key_values(r: ValueReader) -> tuple[tuple[str, str], ...]:
    out = []
    for _ in range(r.varint() - 1):
        out.append((r.string() or "", r.string() or ""))
        r.skip_tags()
    return tuple(out)


def _read_tasks(r: ValueReader, epochs: TaskEpochs | None = None) -> Tasks:
    """Tasks by subtopology; their assignment epochs (tag 0) into ``epochs`` if given."""
    out: Tasks = {}
    for _ in range(r.varint() - 1):
        subtopology = r.string() or ""
        partitions = [r.unpack(">i") for _ in range(r.varint() - 1)]
        out[subtopology] = frozenset(partitions)
        tagged = r.tags().get(_ASSIGNMENT_EPOCHS_TAG)
        if tagged is not None and epochs is not None:
            t = ValueReader(tagged, versioned=False)
            for p in partitions[:t.varint() - 1]:
                epochs[(subtopology, p)] = t.unpack(">i")
    return out


def _read_assigned(r: ValueReader) -> AssignedTasks:
    epochs: TaskEpochs = {}
    active = _read_tasks(r, epochs)
    return AssignedTasks(active, _read_tasks(r), _read_tasks(r), epochs)


def _read_topic_info(r: ValueReader) -> TopicInfo:
    info = TopicInfo(r.string() or "", r.unpack(">i"), r.unpack(">h"), _read_key_values(r))
    r.skip_tags()
    return info


def decode_group_metadata(data: bytes) -> tuple[int, int, int]:
    """(epoch, metadata hash, validated topology epoch)."""
    r = ValueReader(data)
    epoch, metadata_hash = r.unpack(">i"), r.unpack(">q")
    tags = r.tags()
    validated = tags.get(_VALIDATED_TOPOLOGY_EPOCH_TAG)
    return epoch, metadata_hash, struct.unpack(">i", validated)[0] if validated and len(validated) == 4 else -1


def decode_member_metadata(data: bytes) -> MemberMetadataValue:
    r = ValueReader(data)
    instance_id, rack_id, client_id, client_host = r.string(), r.string(), r.string(), r.string()
    rebalance_timeout_ms, topology_epoch = r.unpack(">i"), r.unpack(">i")
    process_id = r.string() or ""
    endpoint = None
    if r.unpack(">b") >= 0:
        endpoint = (r.string() or "", r.unpack(">H"))
        r.skip_tags()
    return MemberMetadataValue(instance_id, rack_id, client_id or "", client_host or "", rebalance_timeout_ms,
                               topology_epoch, process_id, endpoint, _read_key_values(r))


decode_target_metadata = layout.decode_assignment_epoch_and_timestamp  # (epoch, timestamp or None)


def decode_target_member(data: bytes) -> AssignedTasks:
    return _read_assigned(ValueReader(data))


def decode_current_assignment(data: bytes) -> CurrentAssignmentValue:
    r = ValueReader(data)
    member_epoch, previous, state = r.unpack(">i"), r.unpack(">i"), r.unpack(">b")
    return CurrentAssignmentValue(member_epoch, previous, state, _read_assigned(r), _read_assigned(r))


def decode_topology(data: bytes) -> Topology:
    r = ValueReader(data)
    epoch = r.unpack(">i")
    subtopologies = []
    for _ in range(r.varint() - 1):
        subtopology_id = r.string() or ""
        source_topics, regexes = _read_strings(r), _read_strings(r)
        changelogs = tuple(_read_topic_info(r) for _ in range(r.varint() - 1))
        sinks = _read_strings(r)
        repartition_sources = tuple(_read_topic_info(r) for _ in range(r.varint() - 1))
        groups = []
        for _ in range(r.varint() - 1):
            groups.append(CopartitionGroup(*(tuple(r.unpack(">h") for _ in range(r.varint() - 1))
                                             for _ in range(3))))
            r.skip_tags()
        r.skip_tags()
        subtopologies.append(Subtopology(subtopology_id, source_topics, regexes, changelogs, sinks,
                                         repartition_sources, tuple(groups)))
    return Topology(epoch, tuple(subtopologies))
