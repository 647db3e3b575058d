"""Every handler behind the server's frame entry point, in process, with hypothesis:
requests of every API and accepted version with arbitrary field values (negative and
huge numbers, unknown and internal topic names, garbage record batches), and the same
requests' bytes mutated. The server must answer, or refuse with a ProtocolViolation
(the connection is closed with a log line), within a bound, and log no stack trace."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import Records, i32, i32Timedelta, i64Timedelta

from broker.process import Broker
from broker.config import BrokerConfig
from broker.handlers.create_topics import MAX_PARTITIONS_PER_REQUEST
from broker.wire.server import Connection, ProtocolViolation
from broker.virtual_clock import VirtualClock
from protocol import answer_wire, request_wire
from protocol.request_wire import KAFKA_4_0, ApiTable, encode_request_frame
from protocol.records import NewRecord, build_batch
from tests.unit.test_fuzz_wire import mutated

SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))
TOPIC = "fz"
API_VERSIONS = [(key, v) for key, r in ApiTable(set(KAFKA_4_0), "4.4").ranges.items()
                for v in range(r.accepted_min, r.max + 1)]


def _batch(producer_id: int, transactional: bool) -> Records:
    return Records(bytes(build_batch([NewRecord(b"k", b"v", (), 0)], producer_id=producer_id,
                                     producer_epoch=0 if producer_id >= 0 else -1,
                                     base_sequence=0 if producer_id >= 0 else -1, transactional=transactional)))


def _millis(low: int, high: int, cls):
    # Timeouts stay short so a request that legitimately waits (Fetch max_wait, JoinGroup)
    # still ends well within the test's bound; negatives are in.
    return st.integers(low, high).map(lambda ms: cls.parse(datetime.timedelta(milliseconds=ms)))


st.register_type_strategy(TopicName, st.sampled_from([TOPIC, "__transaction_state", "__consumer_offsets", ""])
                          | st.text(max_size=10))
st.register_type_strategy(TransactionalId, st.sampled_from(["tx-1", "tx-2", ""]) | st.text(max_size=10))
st.register_type_strategy(GroupId, st.sampled_from(["g-1", ""]) | st.text(max_size=10))
st.register_type_strategy(ProducerId, st.sampled_from([-1, 0, 1000]) | st.integers(-(2**63), 2**63 - 1))
st.register_type_strategy(i32Timedelta, _millis(-1000, 200, i32Timedelta))
st.register_type_strategy(i64Timedelta, _millis(-1000, 200, i64Timedelta))
st.register_type_strategy(Records, st.sampled_from([_batch(-1, False), _batch(0, False), _batch(1000, True)])
                          | st.binary(max_size=120).map(Records))

# Partition counts stay small or over the per-request bound: the examples share one
# broker, and counts of thousands, added up over them, ran the test process out of file
# handles (every partition keeps its segment files open, as Kafka's do).
_PARTITION_COUNTS = (st.integers(-(2**31), 8) | st.integers(MAX_PARTITIONS_PER_REQUEST + 1, 2**31 - 1)).map(i32)
for _key, _field in ((19, "num_partitions"), (37, "count")):
    _range = ApiTable(set(KAFKA_4_0)).ranges[_key]
    for _version in range(_range.accepted_min, _range.max + 1):
        _topic = typing.get_args(typing.get_type_hints(request_wire.request_class(_key, _version))["topics"])[0]
        st.register_type_strategy(_topic, st.builds(_topic, **{_field: _PARTITION_COUNTS}))

HANDLER_BOUND_S = 30.0
# A request may rightly wait as long as its own timeout says (a mutated Fetch max_wait,
# Produce or JoinGroup timeout: up to 2^31 ms), as Kafka would. Once one has waited this
# long in real time, the harness jumps the broker's clock past any such timeout instead.
PATIENCE_S = 0.5
LONGEST_TIMEOUT_MS = 2**31


class _StackTraces(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@pytest.fixture
def broker_loop(tmp_path):
    """A broker started on its own event loop (hypothesis drives examples synchronously)."""
    loop = asyncio.new_event_loop()
    clock = VirtualClock()
    broker = Broker(BrokerConfig({"emulate.kafka.version": "4.4", "group.initial.rebalance.delay.ms": 0, "num.partitions": 2,
                                  "transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}),
                    tmp_path / "data", "127.0.0.1", 0, clock=clock)
    loop.run_until_complete(broker.start())
    traces = _StackTraces()
    logging.getLogger().addHandler(traces)
    conn = Connection(1, "127.0.0.1:1", broker.nodes[0].node_id, 0.0, None)

    async def answer(frame: bytes):
        handling = asyncio.ensure_future(broker.nodes[0].server.handle_frame(frame, conn))
        give_up = loop.time() + HANDLER_BOUND_S
        while not (await asyncio.wait({handling}, timeout=PATIENCE_S))[0]:
            if loop.time() > give_up:
                handling.cancel()
                raise AssertionError(f"no answer within {HANDLER_BOUND_S} s, past every timeout the request gave")
            clock.advance(LONGEST_TIMEOUT_MS)
        return handling.result()

    def send(frame: bytes):
        return loop.run_until_complete(answer(frame))

    send(encode_request_frame(19, 7, 1, "fz", True, answer_wire.encode(answer_wire.build_request(19, 7, {
        "topics": [{"name": TOPIC, "num_partitions": 2, "replication_factor": 1}], "timeout_ms": 1000})))[4:])
    yield send, traces
    logging.getLogger().removeHandler(traces)
    loop.run_until_complete(broker.stop())
    loop.close()


def _frame(key: int, version: int, body: bytes) -> bytes:
    flexible = ApiTable(set(KAFKA_4_0), "4.4").get(key).flexible(version)
    return encode_request_frame(key, version, 7, "fuzz", flexible, body)[4:]


def _answer(send, frame: bytes) -> None:
    try:
        out = send(frame)
    except ProtocolViolation:
        return
    assert out is None or isinstance(out, (bytes, bytearray))


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_handler_answers_requests_with_arbitrary_field_values(broker_loop, data):
    send, traces = broker_loop
    key, version = data.draw(st.sampled_from(API_VERSIONS))
    request = data.draw(st.from_type(request_wire.request_class(key, version)))
    _answer(send, _frame(key, version, answer_wire.encode(request)))
    assert not traces.records, [r.getMessage() for r in traces.records]


@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_handler_survives_mutated_frames(broker_loop, data):
    send, traces = broker_loop
    key, version = data.draw(st.sampled_from(API_VERSIONS))
    request = data.draw(st.from_type(request_wire.request_class(key, version)))
    _answer(send, data.draw(mutated(_frame(key, version, answer_wire.encode(request)))))
    assert not traces.records, [r.getMessage() for r in traces.records]


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_null_topic_name_before_v12_is_refused(broker_loop, version):
    # The v10-v11 response cannot carry a null name: encoding it failed with a stack trace.
    send, traces = broker_loop
    body = answer_wire.encode(answer_wire.build_request(3, version, {"topics": [{"name": None}]}))
    with pytest.raises(ProtocolViolation, match="Topic name can not be null"):
        send(_frame(3, version, body))
    body = answer_wire.encode(answer_wire.build_request(3, 12, {"topics": [{"name": None}]}))
    assert send(_frame(3, 12, body))  # v12 looks the topic up by id: UNKNOWN_TOPIC_ID
    assert not traces.records


def test_truncated_produce_v2_is_refused_not_a_stack_trace(broker_loop):
    # Produce v2 is answered UNSUPPORTED_VERSION per partition, which needs its body
    # decoded: a truncated one raised out of the server (found by make fuzz).
    send, traces = broker_loop
    v3 = answer_wire.encode(answer_wire.build_request(0, 3, {"acks": 1, "timeout_ms": 100, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": b""}]}]}))
    body = v3[2:]  # v2 is v3 without the leading (null) transactional_id
    frame = encode_request_frame(0, 2, 7, "fuzz", False, body[:-3])[4:]
    with pytest.raises(ProtocolViolation, match="cannot decode"):
        send(frame)
    assert send(encode_request_frame(0, 2, 7, "fuzz", False, body)[4:])  # whole: UNSUPPORTED_VERSION
    assert not traces.records


def test_a_fetch_waiting_out_a_huge_max_wait_is_answered_once_the_clock_jumps(broker_loop):
    # What a mutated frame can ask for: the harness must not hang on it, nor fail it.
    send, traces = broker_loop
    body = answer_wire.encode(answer_wire.build_request(1, 12, {
        "replica_id": -1, "max_wait_ms": 2**31 - 1, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}))
    assert send(_frame(1, 12, body))
    assert not traces.records
