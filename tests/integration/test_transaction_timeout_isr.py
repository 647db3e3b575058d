"""The transaction timeout's abort under a cut between the coordinator and its
followers (`--nodes 3`, a stock confluent-kafka producer): its PrepareAbort waits for
the ISR like EndTxn's, so no ABORT marker leaves while the record is only on the
coordinator; after the heal the markers go, the transaction ends CompleteAbort, and
the producer is fenced."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer

from broker.testing.helpers import wait_until
from tests.integration.test_cluster import create
from tests.integration.test_cluster_failover import _coordinator_of, every_node

pytestmark = pytest.mark.timeout(120)


def _state(cluster, txn_id: str) -> str | None:
    return next((t["state"] for t in cluster.transactions() if t["transactional_id"] == txn_id), None)


def _open_transaction_start(control, topic: str) -> int:
    producers = control.call("producers", topic=topic, partition=0)["producers"]
    return producers[0]["current_txn_start_offset"] if producers else -1


def test_timed_out_transaction_aborts_only_once_its_prepare_is_in_the_isr(broker_factory, topic_name):
    cluster = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 300},
                             nodes=3, admin=True)
    control = cluster.control()
    txn_id = f"{topic_name}-txn"
    coordinator = _coordinator_of(cluster, txn_id, 1)
    # the data partition lives on the coordinator's node alone: its marker needs no link
    create(every_node(cluster), topic_name, partitions=1, replication=1)
    control.call("partition_move", topic=topic_name, partition=0, replicas=[coordinator], leader=coordinator)
    producer = Producer({"bootstrap.servers": every_node(cluster), "transactional.id": txn_id,
                         "transaction.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"timed-out", partition=0)
    producer.flush(30)
    assert _open_transaction_start(control, topic_name) == 0
    for node in cluster.node_ports:
        if node != coordinator:
            control.network_cut(source=coordinator, target=node, both=True)
    try:
        # the timer wrote PrepareAbort; it waits for followers that cannot fetch it
        wait_until(lambda: _state(cluster, txn_id) == "PrepareAbort", timeout=60)
        time.sleep(1)  # time enough for a marker sent at once to land (none may be)
        assert _open_transaction_start(control, topic_name) == 0
    finally:
        control.network_heal()
    wait_until(lambda: _state(cluster, txn_id) == "CompleteAbort", timeout=60)
    assert _open_transaction_start(control, topic_name) == -1  # the ABORT marker is in
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(30)
    assert not fenced.value.args[0].retriable()


def test_complete_write_refused_for_too_few_in_sync_is_written_again(broker_factory, topic_name):
    """The markers are acknowledged while __transaction_state has too few replicas in
    sync: the CompleteCommit append is refused (COORDINATOR_NOT_AVAILABLE) and written
    again once the ISR is back, so the producer's next transaction goes on (the refusal
    used to leave it PrepareCommit, every later add answered CONCURRENT_TRANSACTIONS)."""
    from coordinator.partitioning import partition_for

    cluster = broker_factory({"replica.lag.time.max.ms": 1000}, nodes=3, admin=True)
    control = cluster.control()
    txn_id = f"{topic_name}-txn"
    coordinator = _coordinator_of(cluster, txn_id, 1)
    create(every_node(cluster), topic_name, partitions=1, replication=1)
    control.call("partition_move", topic=topic_name, partition=0, replicas=[coordinator], leader=coordinator)
    producer = Producer({"bootstrap.servers": every_node(cluster), "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"first", partition=0)
    held = control.call("fault_add", action="hold", api_key=27, client_id=f"eosbroker-node-{coordinator}")
    producer.commit_transaction(30)  # answered once PrepareCommit is in the ISR; its marker is held
    assert _state(cluster, txn_id) == "PrepareCommit"
    for node in cluster.node_ports:
        if node != coordinator:
            control.network_cut(source=coordinator, target=node, both=True)
    shrunk = f"__transaction_state-{partition_for(txn_id, 50)}: ISR shrunk to [{coordinator}]"
    wait_until(lambda: shrunk in cluster.log_path.read_text(), timeout=60)
    control.call("fault_remove", rule_id=held["id"])  # the marker lands; CompleteCommit cannot be written
    wait_until(lambda: _open_transaction_start(control, topic_name) == -1, timeout=60)
    assert _state(cluster, txn_id) == "PrepareCommit"
    control.network_heal()
    wait_until(lambda: _state(cluster, txn_id) == "CompleteCommit", timeout=60)
    producer.begin_transaction()
    producer.produce(topic_name, b"second", partition=0)
    producer.commit_transaction(30)
    assert _state(cluster, txn_id) in ("PrepareCommit", "CompleteCommit")
