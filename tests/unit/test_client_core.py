"""The sans-IO client core: request bytes out, response bytes in, typed responses by
correlation id, whatever order and however split the bytes arrive."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from protocol import answer_wire
from protocol.client import (
    ClientConnection,
    find_coordinator_request,
    metadata_request,
    parse_find_coordinator,
    parse_metadata,
    response_header_size,
)
from protocol.request_wire import FrameError, FrameTooLarge, peek_request_header
from protocol.answer_wire import encode_response_frame, request_type


def _response_bytes(correlation_id: int, api_key: int, version: int, body: dict) -> bytes:
    encoded = answer_wire.encode(answer_wire.build_response(api_key, version, body))
    return encode_response_frame(correlation_id, response_header_size(api_key, version) == 5, encoded)


def test_request_bytes_carry_header_and_body():
    core = ClientConnection("me")
    cid, data = core.send(3, 12, metadata_request(["t"]))
    header, _ = peek_request_header(data[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, cid, "me")
    assert core.pending == [cid]


def test_responses_matched_by_correlation_id_in_any_order_and_split_anywhere():
    core = ClientConnection()
    a, _ = core.send(26, 3, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": True})
    b, _ = core.send(26, 0, {"transactional_id": "y", "producer_id": 2, "producer_epoch": 0, "committed": False})
    data = _response_bytes(b, 26, 0, {"error_code": 51}) + _response_bytes(a, 26, 3, {"error_code": 0})
    got = []
    for i in range(len(data)):  # one byte at a time
        got += core.receive_data(data[i:i + 1])
    assert [(r.correlation_id, r.value.error_code) for r in got] == [(b, ErrorCode.concurrent_transactions),
                                                                      (a, ErrorCode.none)]
    assert core.pending == []


def test_api_versions_response_header_is_v0_even_for_flexible_versions():
    core = ClientConnection()
    cid, _ = core.send(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    body = {"error_code": 0, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 12}]}
    encoded = answer_wire.encode(answer_wire.build_response(18, 3, body))
    (response,) = core.receive_data(encode_response_frame(cid, False, encoded))
    assert response.error is None and response.value.api_keys[0].max_version == 12


def test_undecodable_response_fails_only_its_request_and_unknown_ids_are_dropped():
    core = ClientConnection()
    bad, _ = core.send(26, 0, {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": True})
    good, _ = core.send(26, 0, {"transactional_id": "y", "producer_id": 1, "producer_epoch": 0, "committed": True})
    out = core.receive_data(encode_response_frame(bad, False, b"\x00") + _response_bytes(999, 26, 0, {})
                            + _response_bytes(good, 26, 0, {"error_code": 0}))
    assert [(r.correlation_id, r.error is not None) for r in out] == [(bad, True), (good, False)]


def test_requests_without_response_are_not_tracked():
    core = ClientConnection()
    core.send(0, 9, {"acks": 0, "timeout_ms": 1, "topic_data": []}, expect_response=False)
    assert core.pending == []


def test_broken_framing_raises():
    core = ClientConnection(max_response_bytes=100)
    with pytest.raises(FrameTooLarge):
        core.receive_data(b"\x00\x00\x10\x00")
    with pytest.raises(FrameError):
        ClientConnection().receive_data(b"\xff\xff\xff\xff")


def test_describe_transactions_reads_a_start_time_of_minus_one():
    core = ClientConnection()
    cid, _ = core.send(65, 0, {"transactional_ids": ["x"]})
    body = answer_wire.build_response(65, 0, {"transaction_states": [{
        "error_code": 0, "transactional_id": "x", "transaction_state": "Empty", "transaction_timeout": 60000,
        "transaction_start_time": 0, "producer_id": 7, "producer_epoch": 1, "topics": []}]})
    encoded = bytearray(answer_wire.encode(body))
    # transaction_start_time follows the timeout (int32) after error (int16), compact id and state
    at = encoded.index(b"\x00\x00\xea\x60") + 4
    encoded[at:at + 8] = b"\xff" * 8
    (response,) = core.receive_data(encode_response_frame(cid, True, bytes(encoded)))
    assert response.error is None
    assert response.value.transaction_states[0].transaction_start_time == -1


def test_metadata_and_coordinator_answers():
    response = answer_wire.build_response(3, 12, {
        "brokers": [{"node_id": 1, "host": "h", "port": 9}],
        "topics": [{"error_code": 0, "name": "t", "is_internal": False,
                    "partitions": [{"partition_index": 0, "leader_id": 1}, {"partition_index": 1, "leader_id": -1}]}]})
    metadata = parse_metadata(response)
    assert metadata.nodes[1].address == ("h", 9)
    assert metadata.leaders() == {("t", 0): 1, ("t", 1): -1}

    assert find_coordinator_request(3, ["x"]) == request_type(10)(key="x", key_type=1)
    with pytest.raises(ValueError):
        find_coordinator_request(3, ["x", "y"])
    old = answer_wire.build_response(10, 3, {"error_code": 0, "node_id": 1, "host": "h", "port": 9})
    assert parse_find_coordinator(3, ["x"], old)[0].node.address == ("h", 9)
    new = answer_wire.build_response(10, 4, {"coordinators": [
        {"key": "x", "node_id": 1, "host": "h", "port": 9, "error_code": 0},
        {"key": "y", "node_id": -1, "host": "", "port": -1, "error_code": 14}]})
    answers = parse_find_coordinator(4, ["x", "y"], new)
    assert [(a.key, a.error, a.node is None) for a in answers] == [
        ("x", ErrorCode.none, False), ("y", ErrorCode.coordinator_load_in_progress, True)]
