"""Message schemas kio does not have, written here from Kafka's message definitions.

Each is a dataclass in kio's own form (the same class variables and field metadata), so
kio's readers and writers, the shape check and the compiled answers handle them like
kio's. `request_class` and `response_class` look here before asking kio.

- StreamsGroupHeartbeat v1 (KIP-1331): the request is v0's; the answer drops the int32
  AcceptableRecoveryLagLegacy and adds the int64 AcceptableRecoveryLag after
  TaskOffsetIntervalMs and TopologyDescriptionRequired after WarmupTasks.
- StreamsGroupDescribe v1 (KIP-1331): the request adds IncludeTopologyDescription; each
  described group adds TopologyDescription, TopologyDescriptionStatus and AssignorName.
- StreamsGroupTopologyDescriptionUpdate v0 (API 93, KIP-1331).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field, make_dataclass
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.streams_group_describe.v0 import request as describe_v0_request
from kio.schema.streams_group_describe.v0 import response as describe_v0_response
from kio.schema.streams_group_heartbeat.v0 import request as heartbeat_v0_request
from kio.schema.streams_group_heartbeat.v0 import response as heartbeat_v0_response
from kio.schema.types import GroupId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE, STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 88, 89, 93


def _class_vars(entity_type, version: int, api_key: int, header) -> dict[str, Any]:
    return {"__type__": entity_type, "__version__": i16(version), "__flexible__": True,
            "__api_key__": i16(api_key), "__header_schema__": header}


def _schema(name: str, fields_: list[tuple], entity_type, version: int, api_key: int, header) -> type:
    cls = make_dataclass(name, fields_, frozen=True, slots=True, kw_only=True)
    # make_dataclass would take class variables for fields; set them after
    for key, value in _class_vars(entity_type, version, api_key, header).items():
        setattr(cls, key, value)
    cls.__annotations__.update({key: ClassVar for key in _class_vars(entity_type, 0, 0, None)})
    return cls


def _fields_of(cls: type) -> list[tuple]:
    """`cls`'s fields as make_dataclass takes them, with their kio metadata and defaults."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kwargs: dict[str, Any] = {"metadata": f.metadata}
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        out.append((f.name, hints[f.name], field(**kwargs)))
    return out


def _edited(cls: type, *, drop: tuple[str, ...] = (), after: dict[str, list[tuple]] | None = None) -> list[tuple]:
    out = []
    for spec in _fields_of(cls):
        if spec[0] not in drop:
            out.append(spec)
        out.extend((after or {}).get(spec[0], ()))
    return out


def _int(kafka_type: str, **default):
    return field(metadata={"kafka_type": kafka_type}, **default)


# -- StreamsGroupHeartbeat v1 --------------------------------------------------------------

StreamsGroupHeartbeatRequestV1 = _schema(
    "StreamsGroupHeartbeatRequest", _fields_of(heartbeat_v0_request.StreamsGroupHeartbeatRequest),
    EntityType.request, 1, STREAMS_GROUP_HEARTBEAT, RequestHeader)

StreamsGroupHeartbeatResponseV1 = _schema(
    "StreamsGroupHeartbeatResponse",
    _edited(heartbeat_v0_response.StreamsGroupHeartbeatResponse, drop=("acceptable_recovery_lag",), after={
        "task_offset_interval": [("acceptable_recovery_lag", i64, _int("int64", default=i64(-1)))],
        "warmup_tasks": [("topology_description_required", bool, _int("bool", default=False))],
    }),
    EntityType.response, 1, STREAMS_GROUP_HEARTBEAT, ResponseHeader)

# -- the topology description (KIP-1331), the same in API 93's request and Describe v1 -----


def _topology_description_types(entity_type, version: int, api_key: int, header) -> tuple[type, type]:
    """(TopologyDescription, TopologyDescriptionNode) nested types for one message."""
    def nested(name, fields_):
        return _schema(name, fields_, EntityType.nested, version, api_key, header)

    node = nested("TopologyDescriptionNode", [
        ("name", str, _int("string")),
        ("node_type", i8, _int("int8")),
        ("source_topics", tuple[TopicName, ...], _int("string", default=())),
        ("sink_topic", TopicName | None, _int("string", default=None)),
        ("stores", tuple[str, ...], _int("string", default=())),
        ("successors", tuple[str, ...], _int("string", default=())),
    ])
    subtopology = nested("TopologyDescriptionSubtopology", [
        ("subtopology_id", str, _int("string")),
        ("nodes", tuple[node, ...], field(default=())),
    ])
    global_store = nested("TopologyDescriptionGlobalStore", [
        ("source", node, field()),
        ("processor", node, field()),
    ])
    description = nested("TopologyDescription", [
        ("subtopologies", tuple[subtopology, ...], field(default=())),
        ("global_stores", tuple[global_store, ...], field(default=())),
    ])
    return description, node


# -- StreamsGroupDescribe v1 ---------------------------------------------------------------

StreamsGroupDescribeRequestV1 = _schema(
    "StreamsGroupDescribeRequest",
    _fields_of(describe_v0_request.StreamsGroupDescribeRequest)
    + [("include_topology_description", bool, _int("bool", default=False))],
    EntityType.request, 1, STREAMS_GROUP_DESCRIBE, RequestHeader)

DescribeTopologyDescription, _ = _topology_description_types(EntityType.nested, 1, STREAMS_GROUP_DESCRIBE,
                                                             ResponseHeader)
DescribedGroupV1 = _schema(
    "DescribedGroup",
    _fields_of(describe_v0_response.DescribedGroup) + [
        ("topology_description", DescribeTopologyDescription | None, field(default=None)),
        ("topology_description_status", i8, _int("int8", default=i8(0))),
        ("assignor_name", str | None, _int("string", default=None)),
    ],
    EntityType.nested, 1, STREAMS_GROUP_DESCRIBE, ResponseHeader)

StreamsGroupDescribeResponseV1 = _schema(
    "StreamsGroupDescribeResponse",
    [("throttle_time", i32Timedelta, _int("timedelta_i32")),
     ("groups", tuple[DescribedGroupV1, ...], field(default=()))],
    EntityType.response, 1, STREAMS_GROUP_DESCRIBE, ResponseHeader)

# TopologyDescriptionStatus values of a described group
TOPOLOGY_DESCRIPTION_NOT_REQUESTED, TOPOLOGY_DESCRIPTION_NOT_STORED = 0, 1

# -- StreamsGroupTopologyDescriptionUpdate v0 (API 93) -------------------------------------

UpdateTopologyDescription, _ = _topology_description_types(EntityType.nested, 0,
                                                           STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, RequestHeader)
StreamsGroupTopologyDescriptionUpdateRequest = _schema(
    "StreamsGroupTopologyDescriptionUpdateRequest", [
        ("group_id", GroupId, _int("string")),
        ("member_id", str, _int("string")),
        ("topology_epoch", i32, _int("int32")),
        ("topology_description", UpdateTopologyDescription, field()),
    ],
    EntityType.request, 0, STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, RequestHeader)

StreamsGroupTopologyDescriptionUpdateResponse = _schema(
    "StreamsGroupTopologyDescriptionUpdateResponse", [
        ("throttle_time", i32Timedelta, _int("timedelta_i32")),
        ("error_code", ErrorCode, _int("error_code")),
        ("error_message", str | None, _int("string", default=None)),
    ],
    EntityType.response, 0, STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, ResponseHeader)

REQUESTS: dict[tuple[int, int], type] = {
    (STREAMS_GROUP_HEARTBEAT, 1): StreamsGroupHeartbeatRequestV1,
    (STREAMS_GROUP_DESCRIBE, 1): StreamsGroupDescribeRequestV1,
    (STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0): StreamsGroupTopologyDescriptionUpdateRequest,
}
RESPONSES: dict[tuple[int, int], type] = {
    (STREAMS_GROUP_HEARTBEAT, 1): StreamsGroupHeartbeatResponseV1,
    (STREAMS_GROUP_DESCRIBE, 1): StreamsGroupDescribeResponseV1,
    (STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0): StreamsGroupTopologyDescriptionUpdateResponse,
}


def versions(api_key: int, kio_versions) -> list[int]:
    """The versions of `api_key` there are schemas for: kio's and these."""
    return sorted(set(kio_versions) | {v for k, v in RESPONSES if k == api_key})
