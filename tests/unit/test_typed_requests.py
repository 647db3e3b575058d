"""The requests nodes send each other through the in-process network (WriteTxnMarkers,
AddPartitionsToTxn verification, the replica fetcher's Fetch, the share-state calls)
and those the broker's command-line tools and the Spark data source send (topics,
transactions, healthcheck, the Spark client's reads and transactions, and the Metadata
and FindCoordinator requests of protocol/client.py) are built of their API's request
type (protocol.answer_wire.request_type), so a misspelt or missing field fails where
the request is built; the network's request encoder and the tools' admin client refuse
a dict, which would silently drop a misspelt key."""

from __future__ import annotations

import ast
import asyncio
import uuid
from pathlib import Path

import pytest

from broker.tools.admin_client import Admin
from protocol import answer_wire
from protocol.client import ClientConnection, find_coordinator_request, metadata_request
from protocol.answer_wire import kio_request, nested_type, request_type

ROOT = Path(__file__).resolve().parents[2]
# api key -> the version its sender uses
NODE_TO_NODE = {1: 17, 24: 5, 27: 2, 83: 0, 84: 0, 85: 1, 86: 0, 87: 1}
SENDERS = ["broker/coordinators/transaction_service.py", "broker/coordinators/txn_verification.py",
           "broker/cluster/replication.py", "broker/coordinators/share_persister.py",
           "broker/tools/admin_client.py", "broker/tools/topics.py", "broker/tools/transaction_admin.py",
           "broker/tools/healthcheck.py", "spark_client/wire.py", "spark_client/reading.py",
           "spark_client/open_transactions.py"]


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


def test_the_clients_metadata_and_find_coordinator_requests_are_typed():
    """protocol/client.py's requests, which every client and tool asks first: of their
    request types, and the bytes the client writes for them are those their dicts made."""
    metadata = metadata_request(["a", "b"])
    assert answer_wire.is_request(metadata)
    assert answer_wire.encode(kio_request(3, 12, metadata)) == answer_wire.encode(answer_wire.build_request(3, 12, {
        "topics": [{"name": "a"}, {"name": "b"}], "allow_auto_topic_creation": False}))
    assert kio_request(3, 0, metadata_request(None)) == answer_wire.build_request(3, 0, {"topics": None})
    for version, keys, as_dict in ((3, ["x"], {"key": "x", "key_type": 1}),
                                   (4, ["x", "y"], {"key_type": 1, "coordinator_keys": ["x", "y"]})):
        request = find_coordinator_request(version, keys)
        assert answer_wire.is_request(request)
        sent = ClientConnection("c").send(10, version, request)[1]
        assert sent == ClientConnection("c").send(10, version, as_dict)[1]


def test_the_tools_admin_client_refuses_a_dict():
    admin = Admin("127.0.0.1:1", {3: (0, 12)}, "tool")
    with pytest.raises(TypeError, match=r"metadata request is a dict.*request_type\(3\)"):
        asyncio.run(admin.request(None, 3, {"topics": [], "allow_auto_topic_creaton": False}))


def _dict_displays(path: Path) -> list[str]:
    """Dict displays keyed by strings (requests as they were written), by line. Settings
    keyed by their dotted names (a coordinator topic's configs) are no request: no
    field's name has a dot."""
    def request_like(k) -> bool:
        return isinstance(k, ast.Constant) and isinstance(k.value, str) and "." not in k.value

    return [f"line {node.lineno}" for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Dict) and any(request_like(k) for k in node.keys)]


@pytest.mark.parametrize("path", SENDERS)
def test_the_senders_build_no_request_as_a_dict(path):
    assert _dict_displays(ROOT / path) == []


def test_a_request_written_as_a_dict_fails_on_a_name_no_version_has():
    """Requests written by hand (tests, the fuzzer's templates) stay dicts; a misspelt key,
    at any depth, is refused where it is written rather than dropped."""
    connection = ClientConnection()
    fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "fetch_ofset": 5}]}]}
    with pytest.raises(TypeError, match=r"FetchRequest\.topics\.partitions has no field 'fetch_ofset'"):
        connection.send(1, 12, fetch)
    with pytest.raises(TypeError, match="MetadataRequest has no field 'topicz'"):
        connection.send(3, 12, {"topicz": None})
    # a field of another version is left out of this one; a time field by kio's name too
    connection.send(22, 2, {"transactional_id": "x", "transaction_timeout_ms": 1000, "producer_id": 7,
                            "producer_epoch": 0})
    connection.send(11, 5, {"group_id": "g", "session_timeout": 10_000, "rebalance_timeout_ms": 10_000,
                            "member_id": "", "protocol_type": "consumer", "protocols": []})
