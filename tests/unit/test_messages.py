"""protocol.answer_wire (build): one dict description served in any version through kio."""

from __future__ import annotations

import datetime
import random
import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from protocol import answer_wire
from protocol.request_wire import DecodeError, decode_request
from protocol.answer_wire import build_request, build_response, decode_response, encode, ms
from protocol.records import RecordBatch, build_batch, decode_records

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS = 0, 1, 2, 3, 18
TOPIC_ID = uuid.UUID("7d3f1a2b-4c5d-4e6f-8a9b-0c1d2e3f4a5b")


def request_round_trip(api_key: int, version: int, data: dict):
    message = build_request(api_key, version, data)
    decoded = decode_request(api_key, version, encode(message))
    assert decoded == message
    return decoded


def response_round_trip(api_key: int, version: int, data: dict):
    """Wire round trip. Compared as bytes: kio reads Kafka's sentinels (the all-zero
    topic id, a -1 timestamp) back as None where the builder wrote a value."""
    message = build_response(api_key, version, data)
    wire = encode(message)
    decoded = decode_response(api_key, version, wire)
    assert encode(decoded) == wire
    return decoded


# ---------------------------------------------------------------------------
# Metadata


METADATA_RESPONSE = {
    "throttle_time": 25,
    "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": "r1"}],
    "cluster_id": "eos-cluster",
    "controller_id": 1,
    "topics": [
        {
            "error_code": 0,
            "name": "orders",
            "topic_id": TOPIC_ID,
            "is_internal": False,
            "partitions": [
                {
                    "error_code": ErrorCode.none,
                    "partition_index": 0,
                    "leader_id": 1,
                    "leader_epoch": 4,
                    "replica_nodes": [1],
                    "isr_nodes": [1],
                    "offline_replicas": [],
                }
            ],
            "topic_authorized_operations": -2147483648,
        },
        {"error_code": 3, "name": "missing", "partitions": []},
    ],
}


def test_metadata_v0_keeps_only_its_fields():
    request = request_round_trip(METADATA, 0, {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False})
    assert [t.name for t in request.topics] == ["orders"]
    response = response_round_trip(METADATA, 0, METADATA_RESPONSE)
    assert {f for f in response.__dataclass_fields__ if not f.startswith("__")} == {"brokers", "topics"}
    assert response.brokers[0].host == "127.0.0.1" and response.brokers[0].port == 9092
    orders, missing = response.topics
    assert orders.name == "orders" and orders.partitions[0].leader_id == 1
    assert not hasattr(orders, "topic_id") and not hasattr(orders.partitions[0], "leader_epoch")
    assert missing.error_code == ErrorCode.unknown_topic_or_partition


def test_metadata_v0_wire_bytes():
    # topics array of one string, as the protocol guide lays it out
    assert encode(build_request(METADATA, 0, {"topics": [{"name": "ab"}]})) == struct.pack(">ih", 1, 2) + b"ab"


def test_metadata_v12_flexible_round_trip():
    request = request_round_trip(
        METADATA, 12, {"topics": [{"topic_id": TOPIC_ID, "name": None}], "allow_auto_topic_creation": True}
    )
    assert request.topics[0].topic_id == TOPIC_ID and request.topics[0].name is None
    all_topics = request_round_trip(METADATA, 12, {"topics": None})
    assert all_topics.topics is None
    response = response_round_trip(METADATA, 12, METADATA_RESPONSE)
    assert ms(response.throttle_time) == 25
    assert response.cluster_id == "eos-cluster"
    orders, missing = response.topics
    assert orders.topic_id == TOPIC_ID and orders.partitions[0].leader_epoch == 4
    assert orders.partitions[0].replica_nodes == (1,)
    # fields the dict leaves out take the schema default or a zero value; kio reads the zero id back as None
    assert build_response(METADATA, 12, METADATA_RESPONSE).topics[1].topic_id == answer_wire.ZERO_UUID
    assert missing.topic_id is None and missing.topic_authorized_operations == -2147483648


# ---------------------------------------------------------------------------
# ApiVersions


API_KEYS = [{"api_key": 0, "min_version": 3, "max_version": 12}, {"api_key": 18, "min_version": 0, "max_version": 4}]


def test_api_versions_v0_round_trip_and_bytes():
    request_round_trip(API_VERSIONS, 0, {"client_software_name": "dropped"})
    response = response_round_trip(
        API_VERSIONS, 0, {"error_code": 0, "api_keys": API_KEYS, "throttle_time": 10, "finalized_features_epoch": 3}
    )
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(0, 3, 12), (18, 0, 4)]
    assert encode(response) == struct.pack(">hi", 0, 2) + struct.pack(">hhh", 0, 3, 12) + struct.pack(">hhh", 18, 0, 4)


def test_api_versions_unsupported_version_reply_keeps_its_error_code():
    response = response_round_trip(API_VERSIONS, 0, {"error_code": 35, "api_keys": API_KEYS[1:]})
    assert response.error_code == ErrorCode.unsupported_version


def test_api_versions_v3_round_trip():
    request = request_round_trip(
        API_VERSIONS, 3, {"client_software_name": "eosbroker-tests", "client_software_version": "0.1"}
    )
    assert request.client_software_name == "eosbroker-tests"
    response = response_round_trip(
        API_VERSIONS,
        3,
        {
            "error_code": 0,
            "api_keys": API_KEYS,
            "throttle_time": 10,
            "finalized_features_epoch": 3,
            "supported_features": [{"name": "transaction.version", "min_version": 0, "max_version": 2}],
            "finalized_features": [{"name": "transaction.version", "min_version_level": 2, "max_version_level": 2}],
        },
    )
    assert ms(response.throttle_time) == 10 and response.finalized_features_epoch == 3
    assert response.supported_features[0].max_version == 2
    assert response.finalized_features[0].max_version_level == 2


# ---------------------------------------------------------------------------
# Produce


def produce_request(records: bytes) -> dict:
    return {
        "transactional_id": "tx-1",
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 2, "records": records}]}],
    }


PRODUCE_RESPONSE = {
    "throttle_time": 3,
    "responses": [
        {
            "name": "orders",
            "partition_responses": [
                {
                    "index": 2,
                    "error_code": 87,
                    "base_offset": -1,
                    "log_append_time": -1,
                    "log_start_offset": 0,
                    "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}],
                    "error_message": "invalid record",
                }
            ],
        }
    ],
}


@pytest.mark.parametrize("version", [3, 9])
def test_produce_request_round_trip_carries_the_batch_bytes(version):
    batch = bytes(build_batch([(b"k", b"v", [("h", b"1")], 1000)], producer_id=5, producer_epoch=0, base_sequence=0,
                              transactional=True))
    request = request_round_trip(PRODUCE, version, produce_request(batch))
    assert ms(request.timeout) == 30_000 and request.transactional_id == "tx-1"
    records = request.topic_data[0].partition_data[0].records
    assert bytes(records) == batch
    assert decode_records(RecordBatch(bytes(records)))[0].value == b"v"


def test_produce_response_v3_drops_newer_fields():
    response = response_round_trip(PRODUCE, 3, PRODUCE_RESPONSE)
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.invalid_record and partition.base_offset == -1
    assert not hasattr(partition, "log_start_offset") and not hasattr(partition, "error_message")


def test_produce_response_v9_keeps_record_errors():
    response = response_round_trip(PRODUCE, 9, PRODUCE_RESPONSE)
    partition = response.responses[0].partition_responses[0]
    assert partition.log_start_offset == 0 and partition.error_message == "invalid record"
    assert partition.record_errors[0].batch_index_error_message == "bad"
    assert ms(response.throttle_time) == 3


def test_produce_log_append_time_minus_one_is_kafkas_none():
    response = build_response(PRODUCE, 9, PRODUCE_RESPONSE)
    wire = encode(response)
    # index i32, error i16, base offset i64, then log_append_time i64 = -1
    partition_start = wire.index(b"orders") + len(b"orders") + 1 + 4 + 2 + 8
    assert struct.unpack_from(">q", wire, partition_start)[0] == -1
    decoded = decode_response(PRODUCE, 9, wire)
    assert decoded.responses[0].partition_responses[0].log_append_time is None


def test_produce_log_append_time_as_milliseconds():
    data = {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 7,
                                                                  "log_append_time": 1_700_000_000_123}]}]}
    response = response_round_trip(PRODUCE, 9, data)
    assert ms(response.responses[0].partition_responses[0].log_append_time) == 1_700_000_000_123


# ---------------------------------------------------------------------------
# Fetch


def fetch_response(topic_key: str, topic_value) -> dict:
    records = bytes(build_batch([(None, b"x", (), 5)], base_offset=10))
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                topic_key: topic_value,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": 11,
                        "last_stable_offset": 10,
                        "log_start_offset": 0,
                        "aborted_transactions": [{"producer_id": 5, "first_offset": 3}],
                        "preferred_read_replica": -1,
                        "records": records,
                    },
                    {"partition_index": 1, "error_code": 6, "high_watermark": -1, "records": None,
                     "aborted_transactions": None},
                ],
            }
        ],
    }


def fetch_request(topic_key: str, topic_value) -> dict:
    return {
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": 52428800,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{topic_key: topic_value, "partitions": [{"partition": 0, "fetch_offset": 10,
                                                             "partition_max_bytes": 1048576,
                                                             "current_leader_epoch": 4}]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def test_fetch_v4_round_trip():
    request = request_round_trip(FETCH, 4, fetch_request("topic", "orders"))
    assert ms(request.max_wait) == 500 and request.isolation_level == 1
    assert request.topics[0].topic == "orders" and request.topics[0].partitions[0].fetch_offset == 10
    assert not hasattr(request.topics[0].partitions[0], "current_leader_epoch")
    response = response_round_trip(FETCH, 4, fetch_response("topic", "orders"))
    first, second = response.responses[0].partitions
    assert first.last_stable_offset == 10 and first.aborted_transactions[0].producer_id == 5
    assert decode_records(RecordBatch(bytes(first.records)))[0].offset == 10
    assert second.error_code == ErrorCode.not_leader_or_follower and second.records is None
    assert not hasattr(first, "log_start_offset")


def test_fetch_v12_flexible_round_trip_by_topic_name():
    request = request_round_trip(FETCH, 12, fetch_request("topic", "orders"))
    assert request.topics[0].partitions[0].current_leader_epoch == 4
    response = response_round_trip(FETCH, 12, fetch_response("topic", "orders"))
    first, second = response.responses[0].partitions
    assert response.responses[0].topic == "orders"
    assert first.log_start_offset == 0 and first.aborted_transactions[0].first_offset == 3
    assert second.aborted_transactions is None


def test_fetch_v13_uses_topic_ids():
    request = request_round_trip(FETCH, 13, fetch_request("topic_id", TOPIC_ID))
    assert request.topics[0].topic_id == TOPIC_ID
    assert not hasattr(request.topics[0], "topic")
    response = response_round_trip(FETCH, 13, fetch_response("topic_id", TOPIC_ID))
    assert response.responses[0].topic_id == TOPIC_ID
    # tagged sub-structs keep their defaults when the dict leaves them out
    first = response.responses[0].partitions[0]
    assert first.current_leader.leader_id == -1 and first.diverging_epoch.epoch == -1


def test_fetch_v13_tagged_structs_from_dicts():
    data = fetch_response("topic_id", TOPIC_ID)
    data["responses"][0]["partitions"][0]["current_leader"] = {"leader_id": 1, "leader_epoch": 9}
    response = response_round_trip(FETCH, 13, data)
    assert response.responses[0].partitions[0].current_leader.leader_epoch == 9


# ---------------------------------------------------------------------------
# ListOffsets


LIST_OFFSETS_REQUEST = {
    "replica_id": -1,
    "isolation_level": 1,
    "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": 2}]}],
}
LIST_OFFSETS_RESPONSE = {
    "throttle_time": 0,
    "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0, "error_code": 0, "timestamp": -1, "offset": 42,
                                           "leader_epoch": 2}]}
    ],
}


@pytest.mark.parametrize("version", [1, 2, 5, 7, 9])
def test_list_offsets_round_trips(version):
    request = request_round_trip(LIST_OFFSETS, version, LIST_OFFSETS_REQUEST)
    assert request.topics[0].partitions[0].timestamp == -1
    assert hasattr(request, "isolation_level") == (version >= 2)
    response = response_round_trip(LIST_OFFSETS, version, LIST_OFFSETS_RESPONSE)
    partition = response.topics[0].partitions[0]
    assert partition.offset == 42
    assert hasattr(partition, "leader_epoch") == (version >= 4)


# ---------------------------------------------------------------------------
# ms() and value conversions


def test_ms_conversions():
    assert ms(None) is None
    assert ms(1234) == 1234
    assert ms(datetime.timedelta(seconds=1, milliseconds=5)) == 1005
    assert ms(datetime.timedelta(milliseconds=-1)) == -1
    assert ms(datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)) == 1000
    assert ms(answer_wire._EPOCH + datetime.timedelta(milliseconds=1_700_000_000_123)) == 1_700_000_000_123


def test_builder_accepts_ready_made_values():
    # ErrorCode members, timedeltas and nested dataclasses pass through untouched
    inner = build_response(METADATA, 12, METADATA_RESPONSE).topics[0]
    response = build_response(
        METADATA, 12, {"throttle_time": datetime.timedelta(milliseconds=9), "topics": [inner], "brokers": []}
    )
    assert response.topics[0] is inner and ms(response.throttle_time) == 9
    assert build_response(PRODUCE, 9, PRODUCE_RESPONSE).responses[0].partition_responses[0].error_code is \
        ErrorCode.invalid_record


# ---------------------------------------------------------------------------
# malformed requests


CASES = [
    (METADATA, 0, {"topics": [{"name": "orders"}, {"name": "payments"}]}),
    (METADATA, 12, {"topics": [{"topic_id": TOPIC_ID, "name": "orders"}], "allow_auto_topic_creation": True}),
    (API_VERSIONS, 3, {"client_software_name": "eos", "client_software_version": "1"}),
    (PRODUCE, 3, produce_request(bytes(build_batch([(None, b"v", (), 1)])))),
    (PRODUCE, 9, produce_request(bytes(build_batch([(None, b"v", (), 1)])))),
    (FETCH, 4, fetch_request("topic", "orders")),
    (FETCH, 13, fetch_request("topic_id", TOPIC_ID)),
    (LIST_OFFSETS, 7, LIST_OFFSETS_REQUEST),
]


@pytest.mark.parametrize("api_key,version,data", CASES)
def test_every_truncation_is_a_decode_error(api_key, version, data):
    body = encode(build_request(api_key, version, data))
    for cut in range(len(body)):
        with pytest.raises(DecodeError):
            decode_request(api_key, version, body[:cut])


@pytest.mark.parametrize("api_key,version,data", CASES)
def test_garbage_is_a_decode_error_or_a_message_that_re_encodes(api_key, version, data):
    rng = random.Random(api_key * 100 + version)
    good = encode(build_request(api_key, version, data))
    decoded_some = False
    for _ in range(200):
        body = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        try:
            message = decode_request(api_key, version, bytes(body))
        except DecodeError:
            continue
        decoded_some = True
        assert decode_request(api_key, version, encode(message)) == message
    assert decoded_some  # flips inside values decode, so the re-encoding check ran


def test_decode_error_names_the_api():
    with pytest.raises(DecodeError) as info:
        decode_request(METADATA, 12, b"\xff\xff\xff")
    assert "v12" in str(info.value)


def test_huge_array_count_fails_fast():
    with pytest.raises(DecodeError):
        decode_request(METADATA, 0, struct.pack(">i", 0x7FFFFFFF))
    with pytest.raises(DecodeError):
        decode_request(FETCH, 4, struct.pack(">iiiib", -1, 500, 1, 100, 0) + struct.pack(">i", 0x7FFFFFFF))


def test_flexible_versions_table_matches_the_schemas():
    from kio.schema.index import api_key_map, schema_name_map

    from protocol.request_wire import KAFKA_4_0, flexible_from
    from protocol.own_schemas import versions
    from protocol.request_wire import request_class

    for api_key in KAFKA_4_0:
        kio_versions = schema_name_map[api_key_map[api_key]] if api_key in api_key_map else ()
        for version in versions(api_key, kio_versions):
            assert request_class(api_key, version).__flexible__ == (version >= flexible_from(api_key)), (api_key, version)


def test_a_repeated_end_txn_body_decodes_the_same_and_a_bad_one_fails_each_time():
    """EndTxn bodies repeat in every transaction: a repeat decodes to the same message,
    one that differs in a byte decodes anew, and a malformed one is refused every time."""
    body = encode(build_request(26, 3, {"transactional_id": "t", "producer_id": 7, "producer_epoch": 1,
                                        "committed": True}))
    first = decode_request(26, 3, body)
    assert decode_request(26, 3, bytes(body)) is first
    assert decode_request(26, 3, b"\x00" * 3 + body, 3) is first
    aborted = decode_request(26, 3, body[:-2] + b"\x00" + body[-1:])
    assert aborted.committed is False and first.committed is True
    for _ in range(2):
        with pytest.raises(DecodeError):
            decode_request(26, 3, body[:-3])


def test_a_repeated_body_over_a_kilobyte_is_not_kept():
    """What a client can make the broker keep is bounded: a long body decodes anew."""
    body = encode(build_request(26, 3, {"transactional_id": "t" * 2000, "producer_id": 7, "producer_epoch": 1,
                                        "committed": True}))
    first = decode_request(26, 3, body)
    again = decode_request(26, 3, body)
    assert again == first and again is not first


def test_own_schemas_load_when_one_of_their_apis_is_first_used():
    """protocol/own_schemas.py (and the kio modules it builds on) is not on a start's path:
    it loads when a streams-group message is first decoded or answered."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import sys\n"
        "from protocol.answer_wire import answer_type, response_class\n"
        "from protocol.request_wire import request_class, OWN_SCHEMA_APIS\n"
        "answer_type(3); request_class(3, 12)\n"
        "assert 'protocol.own_schemas' not in sys.modules\n"
        "from protocol import own_schemas\n"
        "assert {k for k, _ in own_schemas.REQUESTS} | {k for k, _ in own_schemas.RESPONSES} <= OWN_SCHEMA_APIS\n"
        "assert request_class(93, 0) is own_schemas.REQUESTS[(93, 0)]\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
