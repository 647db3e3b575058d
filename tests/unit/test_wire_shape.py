"""protocol.request_wire (the shape check): the compiled walk of every request schema refuses exactly what a
plain interpretation of its plan refuses, with the same reason, and ends where it does."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from protocol import answer_wire, request_wire
from protocol.request_wire import _FIXED_SIZES, ShapeError, _shape_length, _shape_plan, _shape_uvarint
from tests.unit.test_fuzz_wire import API_VERSIONS, mutated

SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))
st.register_type_strategy(Records, st.binary(max_size=200).map(Records))


def _skip(kafka_type, buf, pos, end, flexible, nullable=True):
    size = _FIXED_SIZES.get(kafka_type)
    if size is None:
        n, pos = _shape_length(buf, pos, end, flexible, wide=kafka_type != "string")
        if n < 0 and not nullable:
            raise ShapeError(f"non-nullable {kafka_type} was serialized as null")
        size = max(n, 0)
    pos += size
    if pos > end:
        raise ShapeError(f"{kafka_type} runs past the end of the request")
    return pos


def reference_walk(cls, buf, pos, end, depth=0):
    """The plan read step by step, as the walk was before it was compiled."""
    if depth > 16:
        raise ShapeError("structures nested too deep")
    flexible, steps = _shape_plan(cls)
    for kind, arg, nullable in steps:
        if kind == "skip":
            pos += arg
            if pos > end:
                raise ShapeError("request truncated")
        elif kind == "value":
            pos = _skip(arg, buf, pos, end, flexible, nullable)
        elif kind == "entity":
            if nullable:  # KIP-893: an int8 marker first, -1 for null
                if pos >= end:
                    raise ShapeError("request truncated")
                pos += 1
                if buf[pos - 1] >= 0x80:
                    continue
            pos = reference_walk(arg, buf, pos, end, depth + 1)
        else:
            count, pos = _shape_length(buf, pos, end, flexible, wide=True)
            if count < 0 and not nullable:
                raise ShapeError("non-nullable array was serialized as null")
            if count > end - pos:
                raise ShapeError(f"array of {count} elements in {end - pos} remaining bytes")
            for _ in range(count):
                pos = (reference_walk(arg, buf, pos, end, depth + 1) if kind == "entities"
                       else _skip(arg, buf, pos, end, flexible))
    if flexible:
        tags, pos = _shape_uvarint(buf, pos, end)
        if tags > end - pos:
            raise ShapeError(f"{tags} tagged fields in {end - pos} remaining bytes")
        for _ in range(tags):
            _tag, pos = _shape_uvarint(buf, pos, end)
            size, pos = _shape_uvarint(buf, pos, end)
            pos += size
            if pos > end:
                raise ShapeError("tagged field runs past the end of the request")
    return pos


def outcome(walk, cls, body):
    try:
        return walk(cls, body, 0, len(body))
    except ShapeError as e:
        return str(e)


def compiled_walk(cls, body, pos, end):
    return request_wire._shape_walk(cls)(body, pos, end, 0)


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_compiled_walk_matches_the_plan_on_valid_and_mutated_requests(data):
    key, version = data.draw(st.sampled_from(API_VERSIONS))
    cls = request_wire.request_class(key, version)
    body = answer_wire.encode(data.draw(st.from_type(cls)))
    assert compiled_walk(cls, body, 0, len(body)) == reference_walk(cls, body, 0, len(body)) == len(body)
    bad = data.draw(mutated(body))
    assert outcome(compiled_walk, cls, bad) == outcome(reference_walk, cls, bad)


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(API_VERSIONS), st.binary(max_size=300))
def test_compiled_walk_matches_the_plan_on_arbitrary_bytes(api_version, body):
    cls = request_wire.request_class(*api_version)
    assert outcome(compiled_walk, cls, body) == outcome(reference_walk, cls, body)


def test_nullable_structs_are_walked_after_their_marker():
    """StreamsGroupHeartbeat's Topology and Endpoint are nullable structs (KIP-893): an int8
    marker, then the struct unless it is -1. A Kafka Streams client's first heartbeat."""
    from kio.schema.streams_group_heartbeat.v0 import request as r

    cls = request_wire.request_class(88, 0)
    topology = r.Topology(epoch=0, subtopologies=(r.Subtopology(
        subtopology_id="0", source_topics=("in",), source_topic_regex=(), state_changelog_topics=(
            r.TopicInfo(name="app-store-changelog", partitions=0, replication_factor=1, topic_configs=()),),
        repartition_sink_topics=(), repartition_source_topics=(), copartition_groups=()),))
    for present in (True, False):
        request = cls(group_id="app", member_id="m", member_epoch=0, endpoint_information_epoch=-1,
                      topology=topology if present else None, active_tasks=(), standby_tasks=(), warmup_tasks=(),
                      process_id="p", user_endpoint=r.Endpoint(host="h", port=8080) if present else None,
                      client_tags=(), task_offsets=None, task_end_offsets=None)
        body = answer_wire.encode(request)
        assert compiled_walk(cls, body, 0, len(body)) == reference_walk(cls, body, 0, len(body)) == len(body)
        assert request_wire.decode_request(88, 0, body) == request
