"""The zombie-fencing and transaction-timeout scenarios with the Java client
(kafka-clients 4.4.0, the driver in tests/reference/java-driver): what it throws, and
the exactly-once read-back."""

from __future__ import annotations

import uuid

import pytest

from tests.reference import java_driver

pytestmark = [pytest.mark.reference, pytest.mark.timeout(300)]


def test_java_zombie_is_fenced(broker_factory):
    broker = broker_factory(scenario="zombie-fencing")
    result = java_driver.run("scenario-zombie-fencing", broker.bootstrap, f"java-{uuid.uuid4().hex[:6]}",
                             broker.admin_url)
    # The held Produce meets the bumped epoch: INVALID_PRODUCER_EPOCH, which the Java
    # client (KIP-588) reports as the abortable InvalidProducerEpochException; the commit
    # rethrows it.
    assert (result["zombie_send"], result["zombie_commit"]) == (
        "InvalidProducerEpochException", "InvalidProducerEpochException"), result
    assert result["read_committed"] == ["successor"]
    assert [t["fired"] for t in broker.scenario_state()["triggers"]] == [1]


def test_java_transaction_timeout_fences_the_producer(broker_factory):
    broker = broker_factory(scenario="transaction-timeout")
    result = java_driver.run("scenario-transaction-timeout", broker.bootstrap, f"java-{uuid.uuid4().hex[:6]}")
    # The client ends transactions with transaction version 2 (EndTxn v5). After the
    # timeout's abort, Kafka 4.4 answers its commit INVALID_TXN_STATE (the aborted
    # transaction cannot be committed), which the client throws as InvalidTxnStateException;
    # eosbroker answers the same (tests/reference: tv2_commit_after_timeout_abort).
    assert result["commit"] == "InvalidTxnStateException"
    assert result["read_committed"] == ["after"]
    assert broker.control().clock()["offset_ms"] == 120_000


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_java_late_end_txn_under_each_transaction_version(broker_factory, transaction_version):
    # The cluster's finalized transaction.version decides which protocol the Java client
    # speaks: 1, EndTxn v4 at one epoch for all its transactions; 2, EndTxn v5 and Produce
    # v12, the epoch bumped at each end.
    broker = broker_factory({"emulate.transaction.version": transaction_version}, scenario="delayed-end-txn")
    result = java_driver.run("scenario-delayed-end-txn", broker.bootstrap, f"java-{uuid.uuid4().hex[:6]}",
                             broker.admin_url)
    [rule] = broker.control().faults()["rules"]
    assert rule["fired"] == 1 and rule["matched"] >= 3  # held, its retry, the next transaction's end
    if transaction_version == 1:
        # Jepsen's anomalies: x readable while its transaction is open (torn); the client's
        # abort, answered OK, leaves it committed (aborted read)
        assert result["state_after_release"] == "CompleteCommit"
        assert result["read_committed_mid_transaction"] == ["t1", "x"]
        assert (result["abort"], result["read_committed"]) == ("aborted", ["t1", "x"])
    else:
        assert result["state_after_release"] == "Ongoing"  # the late EndTxn was fenced
        assert result["read_committed_mid_transaction"] == ["t1"]
        assert (result["abort"], result["read_committed"]) == ("aborted", ["t1"])
