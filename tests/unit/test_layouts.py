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


def as_answer(api_key: int, message, plain: bool, tagged: bool = True):
    """A kio message as the answer a handler builds (``answer_type``): Kafka's field names,
    nested answers; with ``plain``, error codes and times as the ints handlers use; without
    ``tagged``, every tagged field left at its answer type's default, as handlers mostly
    leave them. Fields this version lacks are given None: the layout never reads them."""
    top = answer_wire.answer_type(api_key)
    kind = top if type(message).__name__ == top.__name__ else getattr(top, type(message).__name__)
    values = dict.fromkeys(kind._fields)
    for f in dataclasses.fields(message):
        name = f.name + "_ms" if f.metadata.get("kafka_type") in answer_wire._TIME_TYPES else f.name
        if not tagged and "tag" in f.metadata:
            values[name] = kind._field_defaults[name]
            continue
        value = getattr(message, f.name)
        if dataclasses.is_dataclass(value):
            value = as_answer(api_key, value, plain, tagged)
        elif isinstance(value, tuple):
            value = tuple(as_answer(api_key, v, plain, tagged) if dataclasses.is_dataclass(v) else v for v in value)
        elif plain and isinstance(value, ErrorCode):
            value = int(value)
        elif plain and isinstance(value, (datetime.timedelta, datetime.datetime)):
            value = answer_wire.ms(value)
        values[name] = value
    return kind(**values)


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
    assert encode(as_answer(api_key, message, plain=False)) == expected
    plain = as_answer(api_key, message, plain=True)
    assert encode(plain) == answer_wire.encode(answer_wire.build_response(api_key, version, plain))


@pytest.mark.parametrize(("api_key", "version"), HOT, ids=[f"{api_key_map[k]}-v{v}" for k, v in HOT])
@settings(max_examples=10 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_tagged_fields_left_at_their_defaults_are_written_as_kio_writes_them(api_key, version, data):
    """The layouts write an empty tagged section without a call when every tagged field
    holds its answer type's default: the bytes must be build + kio's for the same answer."""
    message = data.draw(st.from_type(answer_wire.response_class(api_key, version)))
    plain = as_answer(api_key, message, plain=True, tagged=False)
    try:
        expected = answer_wire.encode(answer_wire.build_response(api_key, version, plain))
    except Exception:  # kio refuses some drawn values (a string too long for int16...)
        return
    assert answer_wire.encoder(api_key, version)(plain) == expected


def test_a_misspelt_or_missing_field_fails_at_construction():
    end_txn = answer_wire.answer_type(26)
    with pytest.raises(TypeError):
        end_txn(error_code=0, producer_id=1, producer_epch=0)
    with pytest.raises(TypeError):
        end_txn(producer_id=1, producer_epoch=0)  # error_code has no default
    partition = answer_wire.answer_type(0).PartitionProduceResponse
    with pytest.raises(TypeError):
        partition(index=0, error_code=0)  # base_offset has no default
    assert end_txn(error_code=0).throttle_time_ms == 0  # the broker never throttles


def test_an_answer_with_a_nested_dict_or_kio_message_goes_the_generic_way():
    produce = answer_wire.answer_type(0)
    topic = answer_wire.build(answer_wire.response_class(0, 9).__dataclass_fields__["responses"].type.__args__[0],
                              {"name": "t", "partition_responses": [{"index": 3, "error_code": 0, "base_offset": 7}]})
    for nested in (topic, {"name": "t", "partition_responses": [{"index": 3, "error_code": 0, "base_offset": 7}]}):
        answer = produce(responses=(nested,), throttle_time_ms=5)
        assert answer_wire.encode_response(0, 9, answer) == answer_wire.encode(
            answer_wire.build_response(0, 9, {"responses": [topic], "throttle_time_ms": 5}))


def _produce_answer(**partition):
    produce = answer_wire.answer_type(0)
    return produce(responses=(produce.TopicProduceResponse(name="t", partition_responses=(
        produce.PartitionProduceResponse(index=0, **partition),)),))


def test_tagged_fields_written_only_when_not_default():
    produce = answer_wire.answer_type(0)
    fields = dict(error_code=6, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1, record_errors=(),
                  error_message=None)
    answer = _produce_answer(**fields, current_leader=produce.LeaderIdAndEpoch(leader_id=2, leader_epoch=4))
    answer = answer._replace(node_endpoints=(produce.NodeEndpoint(node_id=2, host="h", port=1, rack=None),))
    body = answer_wire.encoder(0, 11)(answer)
    assert body == answer_wire.encode(answer_wire.build_response(0, 11, answer))
    plain = _produce_answer(**fields)
    assert answer_wire.encoder(0, 11)(plain) == answer_wire.encode(answer_wire.build_response(0, 11, plain))
    assert body != answer_wire.encoder(0, 11)(plain)


@pytest.mark.parametrize("version", range(10, 14))
def test_produce_answer_without_node_endpoints_is_the_empty_list_on_the_wire(version):
    """The Produce handler leaves out node_endpoints when no partition names a leader:
    the bytes must be those of the empty list, by layout and by kio."""
    answer = _produce_answer(error_code=0, base_offset=7, log_append_time_ms=-1, log_start_offset=0,
                             record_errors=(), error_message=None)
    expected = answer_wire.encode(answer_wire.build_response(0, version, answer._replace(node_endpoints=())))
    assert answer_wire.encode_response(0, version, answer) == expected
    assert answer_wire.encode(answer_wire.build_response(0, version, answer)) == expected


@pytest.mark.parametrize("value", [9999, "0", None])
def test_a_value_the_layout_does_not_expect_goes_the_generic_way(value):
    """An unknown error code, a string, a None: the layout gives up and build + kio
    answer (or fail) exactly as before."""
    answer = answer_wire.answer_type(22)(error_code=value, producer_id=1, producer_epoch=0)
    with pytest.raises(answer_wire.GiveUp):
        answer_wire.encoder(22, 4)(answer)
    try:
        expected = answer_wire.encode(answer_wire.build_response(22, 4, answer))
    except Exception as e:
        with pytest.raises(type(e)):
            answer_wire.encode_response(22, 4, answer)
    else:
        assert answer_wire.encode_response(22, 4, answer) == expected


def test_other_apis_have_no_layout():
    assert answer_wire.encoder(18, 3) is None  # ApiVersions
    assert answer_wire.encoder(3, 12) is None  # Metadata
    answer = answer_wire.answer_type(18)(error_code=0, api_keys=[])
    assert answer_wire.encode_response(18, 3, answer) == answer_wire.encode(answer_wire.build_response(18, 3, answer))
