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
