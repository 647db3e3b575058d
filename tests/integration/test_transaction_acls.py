"""ACLs on the transaction APIs with the authorizer on, checked as Kafka checks them:
DESCRIBE on the group or transactional id for FindCoordinator; WRITE on the transactional
id for InitProducerId, AddPartitionsToTxn, EndTxn, AddOffsetsToTxn and TxnOffsetCommit,
WRITE on the topics for AddPartitionsToTxn (an internal topic never has it), READ on the
group for AddOffsetsToTxn; CLUSTER_ACTION for the brokers' own AddPartitionsToTxn v4+ and
WriteTxnMarkers; DESCRIBE for DescribeTransactions and ListTransactions, READ on the topic
for DescribeProducers; IDEMPOTENT_WRITE (or WRITE on some topic) for an idempotent
InitProducerId."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from broker.wire.client import KafkaConnection
from broker.errors import code
from tests.acl_setup import allow, broker_with_acls

HOST = "127.0.0.1"
TXN_DENIED = code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
TOPIC_DENIED = code("TOPIC_AUTHORIZATION_FAILED")
GROUP_DENIED = code("GROUP_AUTHORIZATION_FAILED")
CLUSTER_DENIED = code("CLUSTER_AUTHORIZATION_FAILED")
NOT_ATTEMPTED = code("OPERATION_NOT_ATTEMPTED")


def _add(tid, pid, epoch, *topics):
    return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics]}


def _added(response):
    return {(t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}


@pytest.fixture
def acl_broker(broker_factory, tmp_path, topic_name):
    """A broker with the authorizer on: the client may write ``topic_name``, read it, use
    transactional ids ``tx-ok*`` and groups ``ok-*``; ``hidden-<topic>`` exists but is
    closed to it."""
    grants = [allow(ResourceType.TOPIC, topic_name, AclOperation.ALL),
              allow(ResourceType.GROUP, "ok-", AclOperation.ALL, ResourcePatternType.PREFIXED),
              allow(ResourceType.TRANSACTIONAL_ID, "tx-ok", AclOperation.ALL, ResourcePatternType.PREFIXED)]
    return broker_with_acls(broker_factory, tmp_path / "data", [topic_name, f"hidden-{topic_name}"], grants)


async def test_transaction_apis_answer_kafkas_authorization_errors(acl_broker, topic_name):
    hidden = f"hidden-{topic_name}"
    async with await KafkaConnection.connect(HOST, acl_broker.port) as conn:
        # FindCoordinator: v3 one key with the error's message, v4 per key without a node
        old = await conn.request(10, 3, {"key": "tx-no", "key_type": 1})
        assert (old.error_code, old.error_message, old.node_id, old.host, old.port) == \
            (TXN_DENIED, "Transactional Id authorization failed.", -1, "", -1)
        old = await conn.request(10, 3, {"key": "no-group", "key_type": 0})
        assert (old.error_code, old.error_message, old.node_id) == (GROUP_DENIED, "Group authorization failed.", -1)
        batch = await conn.request(10, 4, {"key_type": 1, "coordinator_keys": ["tx-ok-1", "tx-no"]})
        assert batch.coordinators[0].node_id >= 0
        assert [(c.key, c.error_code, c.error_message, c.node_id) for c in batch.coordinators] == \
            [("tx-ok-1", 0, None, batch.coordinators[0].node_id), ("tx-no", TXN_DENIED, None, -1)]
        groups = await conn.request(10, 4, {"key_type": 0, "coordinator_keys": ["ok-g", "no-g"]})
        assert [c.error_code for c in groups.coordinators] == [0, GROUP_DENIED]

        init = await conn.request(22, 4, {"transactional_id": "tx-no", "transaction_timeout_ms": 60000,
                                          "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == TXN_DENIED
        # nothing grants IDEMPOTENT_WRITE, but WRITE on a topic lets a client write idempotently
        idempotent = await conn.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                "producer_id": -1, "producer_epoch": -1})
        assert idempotent.error_code == 0
        init = await conn.request(22, 4, {"transactional_id": "tx-ok-1", "transaction_timeout_ms": 60000,
                                          "producer_id": -1, "producer_epoch": -1})
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch

        denied = await conn.request(24, 3, _add("tx-no", pid, epoch, topic_name))
        assert _added(denied) == {(topic_name, 0): TXN_DENIED}
        # a closed topic fails the request; the others are not attempted; unknown topics say so
        refused = await conn.request(24, 3, _add("tx-ok-1", pid, epoch, topic_name, hidden, "no-such-topic",
                                                 "__consumer_offsets"))
        assert _added(refused) == {(topic_name, 0): NOT_ATTEMPTED, (hidden, 0): TOPIC_DENIED,
                                   ("no-such-topic", 0): TOPIC_DENIED, ("__consumer_offsets", 0): TOPIC_DENIED}
        # AddPartitionsToTxn v4 is for brokers: a client lacks CLUSTER_ACTION
        v4 = await conn.request(24, 4, {"transactions": [{
            "transactional_id": "tx-ok-1", "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
            "topics": [{"name": topic_name, "partitions": [0]}]}]})
        assert (v4.error_code, list(v4.results_by_transaction)) == (CLUSTER_DENIED, [])
        assert _added(await conn.request(24, 3, _add("tx-ok-1", pid, epoch, topic_name))) == {(topic_name, 0): 0}

        described = await conn.request(65, 0, {"transactional_ids": ["tx-no", "tx-ok-1"]})
        assert [(s.transactional_id, s.error_code) for s in described.transaction_states] == \
            [("tx-no", TXN_DENIED), ("tx-ok-1", 0)]
        assert [(t.topic, list(t.partitions)) for t in described.transaction_states[1].topics] == [(topic_name, [0])]
        listed = await conn.request(66, 0, {"state_filters": [], "producer_id_filters": []})
        assert {s.transactional_id for s in listed.transaction_states} == {"tx-ok-1"}

        assert (await conn.request(26, 3, {"transactional_id": "tx-no", "producer_id": pid, "producer_epoch": epoch,
                                           "committed": True})).error_code == TXN_DENIED
        markers = await conn.request(27, 1, {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": True,
            "topics": [{"name": topic_name, "partition_indexes": [0]}], "coordinator_epoch": 0}]})
        assert markers.markers[0].topics[0].partitions[0].error_code == CLUSTER_DENIED
        producers = await conn.request(61, 0, {"topics": [{"name": hidden, "partition_indexes": [0]},
                                                          {"name": topic_name, "partition_indexes": [0]}]})
        assert [(t.partitions[0].error_code, t.partitions[0].error_message) for t in producers.topics] == \
            [(TOPIC_DENIED, "Topic authorization failed."), (0, None)]
        ended = await conn.request(26, 3, {"transactional_id": "tx-ok-1", "producer_id": pid,
                                           "producer_epoch": epoch, "committed": False})
        assert ended.error_code == 0


def _fatal_or_abortable(fn) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        fn()
    return raised.value.args[0]


def test_stock_clients_meet_the_transaction_acls(acl_broker, topic_name):
    # a transactional id the client may not use: librdkafka's init fails at FindCoordinator
    denied = Producer({"bootstrap.servers": acl_broker.bootstrap, "transactional.id": "tx-no"})
    error = _fatal_or_abortable(lambda: denied.init_transactions(15))
    assert (error.code(), error.fatal()) == (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, True)
    del denied

    producer = Producer({"bootstrap.servers": acl_broker.bootstrap, "transactional.id": "tx-ok-2"})
    producer.init_transactions(15)
    # a topic it may not write: the record is refused, and the records never show
    producer.begin_transaction()
    reports = []
    try:
        producer.produce(f"hidden-{topic_name}", b"no", on_delivery=lambda err, msg: reports.append(err))
    except KafkaException as refused:
        # librdkafka asks Metadata for the new topic as produce() starts; when the denial
        # is back before produce() places the record, it refuses the record at once and
        # nothing joins the transaction
        assert refused.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    else:  # otherwise the record waits for the answer, fails, and the transaction must abort
        error = _fatal_or_abortable(lambda: producer.commit_transaction(15))
        assert error.txn_requires_abort()
        assert [e.code() for e in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    producer.abort_transaction(15)
    # offsets of a group it may not read: AddOffsetsToTxn says so, the transaction aborts
    producer.begin_transaction()
    producer.produce(topic_name, b"kept-out")
    consumer = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": "ok-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        metadata = consumer.consumer_group_metadata()
        error = _fatal_or_abortable(lambda: producer.send_offsets_to_transaction(
            [TopicPartition(topic_name, 0, 1)], _group_metadata_of("no-group", acl_broker), 15))
        assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        producer.abort_transaction(15)
        # and one it may: committed
        producer.begin_transaction()
        producer.produce(topic_name, b"committed")
        producer.send_offsets_to_transaction([TopicPartition(topic_name, 0, 1)], metadata, 15)
        producer.commit_transaction(15)
    finally:
        consumer.close()
    producer.flush(1)

    reader = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": "ok-check",
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    reader.subscribe([topic_name])
    values = []
    for _ in range(120):
        msg = reader.poll(0.25)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
            if msg.value() == b"committed":
                break
    reader.close()
    assert values == [b"committed"]


def _group_metadata_of(group_id: str, broker):
    """A consumer's group metadata for ``group_id`` (librdkafka only hands it out from a
    consumer of that group; the consumer never joins)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group_id})
    metadata = c.consumer_group_metadata()
    c.close()
    return metadata
