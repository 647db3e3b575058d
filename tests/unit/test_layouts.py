"""protocol.answer_wire (the compiled layouts): every hot response, in every version kio knows, written by its
prepared layout byte for byte as build + kio write it (hypothesis draws the messages)."""

from __future__ import annotations

import dataclasses
import datetime
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.static.primitive import Records

from protocol import answer_wire
from protocol.request_wire import KAFKA_4_0, ApiTable

SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

# Every version a profile of the broker accepts (kio knows older ones the broker refuses).
HOT = [(key, version) for key in sorted(answer_wire.HOT_APIS)
       for version in range(ApiTable(set(KAFKA_4_0)).get(key).accepted_min, ApiTable(set(KAFKA_4_0)).get(key).max + 1)]


def as_dict(message, plain: bool, tagged: bool = True):
    """A dataclass as the dict a handler would return: Kafka's field names, nested dicts;
    with ``plain``, error codes and times as the ints handlers use (``_ms`` names); without
    ``tagged``, every tagged field left out, as handlers mostly leave them."""
    out = {}
    for f in dataclasses.fields(message):
        if not tagged and "tag" in f.metadata:
            continue
        value = getattr(message, f.name)
        name = f.name
        if dataclasses.is_dataclass(value):
            value = as_dict(value, plain, tagged)
        elif isinstance(value, tuple):
            value = [as_dict(v, plain, tagged) if dataclasses.is_dataclass(v) else v for v in value]
        elif plain and isinstance(value, ErrorCode):
            value = int(value)
        elif plain and isinstance(value, (datetime.timedelta, datetime.datetime)):
            value = answer_wire.ms(value)
            if f.metadata.get("kafka_type") in answer_wire._TIME_TYPES:
                name += "_ms"
        out[name] = value
    return out


@pytest.mark.parametrize(("api_key", "version"), HOT, ids=[f"{api_key_map[k]}-v{v}" for k, v in HOT])
@settings(max_examples=10 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_layout_writes_what_kio_writes(api_key, version, data):
    encode = answer_wire.encoder(api_key, version)
    assert encode is not None
    message = data.draw(st.from_type(answer_wire.response_class(api_key, version)))
    try:
        expected = answer_wire.encode(message)
    except Exception:  # kio refuses some drawn values (a string too long for int16...)
        return
    assert encode(as_dict(message, plain=False)) == expected
    plain = as_dict(message, plain=True)
    assert encode(plain) == answer_wire.encode(answer_wire.build_response(api_key, version, plain))


@pytest.mark.parametrize(("api_key", "version"), HOT, ids=[f"{api_key_map[k]}-v{v}" for k, v in HOT])
@settings(max_examples=10 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_tagged_fields_left_out_of_the_dict_are_written_as_kio_writes_their_defaults(api_key, version, data):
    """The layouts write an empty tagged section without a call when the dict names no
    tagged field: the bytes must be build + kio's for the same dict."""
    message = data.draw(st.from_type(answer_wire.response_class(api_key, version)))
    plain = as_dict(message, plain=True, tagged=False)
    try:
        expected = answer_wire.encode(answer_wire.build_response(api_key, version, plain))
    except Exception:  # kio refuses some drawn values (a string too long for int16...)
        return
    assert answer_wire.encoder(api_key, version)(plain) == expected


def test_missing_fields_take_the_builders_defaults():
    for api_key, version in HOT:
        assert answer_wire.encoder(api_key, version)({}) == answer_wire.encode(answer_wire.build_response(api_key, version, {}))


def test_nested_dataclasses_are_written_by_kio():
    topic = answer_wire.build(answer_wire.response_class(0, 9).__dataclass_fields__["responses"].type.__args__[0],
                           {"name": "t", "partition_responses": [{"index": 3, "error_code": 0, "base_offset": 7}]})
    data = {"responses": [topic], "throttle_time_ms": 5}
    assert answer_wire.encoder(0, 9)(data) == answer_wire.encode(answer_wire.build_response(0, 9, data))


def test_tagged_fields_written_only_when_not_default():
    data = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 6, "current_leader": {"leader_id": 2, "leader_epoch": 4}}]}],
        "node_endpoints": [{"node_id": 2, "host": "h", "port": 1, "rack": None}]}
    body = answer_wire.encoder(0, 11)(data)
    assert body == answer_wire.encode(answer_wire.build_response(0, 11, data))
    assert body != answer_wire.encoder(0, 11)({"responses": data["responses"][:0]})


@pytest.mark.parametrize("version", range(10, 14))
def test_produce_answer_without_node_endpoints_is_the_empty_list_on_the_wire(version):
    """The Produce handler leaves out node_endpoints when no partition names a leader:
    the bytes must be those of the empty list it used to send, by layout and by kio."""
    responses = [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 7, "log_append_time": None, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}]
    with_empty = {"responses": responses, "node_endpoints": []}
    expected = answer_wire.encode(answer_wire.build_response(0, version, with_empty))
    assert answer_wire.encode_response(0, version, {"responses": responses}) == expected
    assert answer_wire.encode(answer_wire.build_response(0, version, {"responses": responses})) == expected


@pytest.mark.parametrize("value", [9999, "0", None])
def test_a_value_the_layout_does_not_expect_goes_the_generic_way(value):
    """An unknown error code, a string, a None: the layout gives up and build + kio
    answer (or fail) exactly as before."""
    data = {"error_code": value, "producer_id": 1, "producer_epoch": 0}
    with pytest.raises(answer_wire.GiveUp):
        answer_wire.encoder(22, 4)(data)
    try:
        expected = answer_wire.encode(answer_wire.build_response(22, 4, data))
    except Exception as e:
        with pytest.raises(type(e)):
            answer_wire.encode_response(22, 4, data)
    else:
        assert answer_wire.encode_response(22, 4, data) == expected


def test_other_apis_have_no_layout():
    assert answer_wire.encoder(18, 3) is None  # ApiVersions
    assert answer_wire.encoder(3, 12) is None  # Metadata
    assert answer_wire.encode_response(18, 3, {"error_code": 0}) == answer_wire.encode(
        answer_wire.build_response(18, 3, {"error_code": 0}))
