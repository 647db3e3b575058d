"""protocol.wire_shape: the compiled walk of every request schema refuses exactly what a
plain interpretation of its plan refuses, with the same reason, and ends where it does."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from protocol import messages, wire_shape
from protocol.wire_shape import _FIXED, ShapeError, _length, _plan, _uvarint
from tests.unit.test_fuzz_wire import API_VERSIONS, mutated

SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))
st.register_type_strategy(Records, st.binary(max_size=200).map(Records))


def _skip(kafka_type, buf, pos, end, flexible, nullable=True):
    size = _FIXED.get(kafka_type)
    if size is None:
        n, pos = _length(buf, pos, end, flexible, wide=kafka_type != "string")
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
    flexible, steps = _plan(cls)
    for kind, arg, nullable in steps:
        if kind == "skip":
            pos += arg
            if pos > end:
                raise ShapeError("request truncated")
        elif kind == "value":
            pos = _skip(arg, buf, pos, end, flexible, nullable)
        elif kind == "entity":
            pos = reference_walk(arg, buf, pos, end, depth + 1)
        else:
            count, pos = _length(buf, pos, end, flexible, wide=True)
            if count < 0 and not nullable:
                raise ShapeError("non-nullable array was serialized as null")
            if count > end - pos:
                raise ShapeError(f"array of {count} elements in {end - pos} remaining bytes")
            for _ in range(count):
                pos = (reference_walk(arg, buf, pos, end, depth + 1) if kind == "entities"
                       else _skip(arg, buf, pos, end, flexible))
    if flexible:
        tags, pos = _uvarint(buf, pos, end)
        if tags > end - pos:
            raise ShapeError(f"{tags} tagged fields in {end - pos} remaining bytes")
        for _ in range(tags):
            _tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
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
    return wire_shape._compiled(cls)(body, pos, end, 0)


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_compiled_walk_matches_the_plan_on_valid_and_mutated_requests(data):
    key, version = data.draw(st.sampled_from(API_VERSIONS))
    cls = messages.request_class(key, version)
    body = messages.encode(data.draw(st.from_type(cls)))
    assert compiled_walk(cls, body, 0, len(body)) == reference_walk(cls, body, 0, len(body)) == len(body)
    bad = data.draw(mutated(body))
    assert outcome(compiled_walk, cls, bad) == outcome(reference_walk, cls, bad)


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(API_VERSIONS), st.binary(max_size=300))
def test_compiled_walk_matches_the_plan_on_arbitrary_bytes(api_version, body):
    cls = messages.request_class(*api_version)
    assert outcome(compiled_walk, cls, body) == outcome(reference_walk, cls, body)
