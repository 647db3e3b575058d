"""The requests nodes send each other through the in-process network (WriteTxnMarkers,
AddPartitionsToTxn verification, the replica fetcher's Fetch, the share-state calls)
are built of their API's request type (protocol.answer_wire.request_type), so a
misspelt or missing field fails where the request is built; the network's request
encoder refuses a dict, which would silently drop a misspelt key."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

from protocol import answer_wire
from protocol.answer_wire import kio_request, nested_type, request_type

ROOT = Path(__file__).resolve().parents[2]
# api key -> the version its sender uses
NODE_TO_NODE = {1: 17, 24: 5, 27: 2, 83: 0, 84: 0, 85: 1, 86: 0, 87: 1}
SENDERS = ["broker/coordinators/markers.py", "broker/coordinators/txn_verification.py",
           "broker/cluster/replication.py", "broker/coordinators/share_persister.py"]


def test_a_misspelt_field_is_refused_at_construction():
    markers = request_type(27)
    with pytest.raises(TypeError, match="producer_epok"):
        markers.WritableTxnMarker(producer_id=1, producer_epok=0, transaction_result=True, topics=(),
                                  coordinator_epoch=0)
    fetch = request_type(1)
    with pytest.raises(TypeError, match="fetch_ofset"):
        fetch.FetchPartition(partition=0, fetch_ofset=0, partition_max_bytes=1)
    write = nested_type(nested_type(request_type(85), "topics"), "partitions")
    with pytest.raises(TypeError, match="start_ofset"):
        write(partition=0, state_epoch=0, leader_epoch=0, start_ofset=0, state_batches=())


def test_a_missing_field_is_refused_at_construction():
    verification = request_type(24)
    with pytest.raises(TypeError, match="producer_epoch"):
        verification.AddPartitionsToTxnTransaction(transactional_id="t", producer_id=1, topics=())


@pytest.mark.parametrize("api_key", sorted(NODE_TO_NODE))
def test_the_network_encoder_refuses_a_dict_naming_the_api(api_key):
    version = NODE_TO_NODE[api_key]
    name = answer_wire.request_class(api_key, version).__name__
    with pytest.raises(TypeError, match=f"{name} \\(API {api_key} v{version}\\).*request_type\\({api_key}\\)"):
        kio_request(api_key, version, {"group_id": "g", "topics": []})


def test_a_typed_request_becomes_the_kio_request_a_dict_builds():
    """Time fields keep Kafka's names (``max_wait_ms``) and become kio's timedeltas; nested
    types and defaults come out as the generic build from Kafka's field names makes them."""
    topic_id = uuid.uuid4()
    fetch = request_type(1)
    typed = fetch(max_wait_ms=500, min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1,
                  replica_state=fetch.ReplicaState(replica_id=2, replica_epoch=-1), rack_id="",
                  topics=(fetch.FetchTopic(topic_id=topic_id, partitions=(fetch.FetchPartition(
                      partition=0, current_leader_epoch=3, fetch_offset=10, partition_max_bytes=1 << 20),)),),
                  forgotten_topics_data=())
    from_dict = answer_wire.build_request(1, 17, {
        "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1024, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "replica_state": {"replica_id": 2, "replica_epoch": -1}, "rack_id": "",
        "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, "current_leader_epoch": 3,
                                                          "fetch_offset": 10, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    built = kio_request(1, 17, typed)
    assert built == from_dict
    assert answer_wire.encode(built) == answer_wire.encode(from_dict)


def _dict_displays(path: Path) -> list[str]:
    """Dict displays keyed by strings (requests as they were written), by line."""
    return [f"line {node.lineno}" for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                  for k in node.keys)]


@pytest.mark.parametrize("path", SENDERS)
def test_the_senders_build_no_request_as_a_dict(path):
    assert _dict_displays(ROOT / path) == []
