"""The Java client (kafka-clients 4.4.0) runs each capability scenario against eosbroker
and against Apache Kafka; both must give the same results.

Both brokers finalize transaction.version 2, so the client speaks transactions v2 (EndTxn
v5 epoch bumps, implicit adds) to both; the group scenarios also run with
group.protocol=consumer (KIP-848).
"""

from __future__ import annotations

import uuid

import pytest

from tests.reference import java_driver

CI = {"transactional", "fencing", "ctp", "admin", "ctp-consumer-protocol", "consumer-protocol-group",
      "admin-configs", "mixed-protocol-group"}


@pytest.fixture(scope="module")
def results(eos_reference, kafka_broker):
    """Runs a scenario once per broker, on first use."""
    cache: dict[tuple[str, str], dict] = {}

    def get(scenario: str, broker: str) -> dict:
        if (scenario, broker) not in cache:
            target = eos_reference if broker == "eosbroker" else kafka_broker
            name = f"java-{scenario}-{uuid.uuid4().hex[:6]}"
            cache[(scenario, broker)] = java_driver.run(scenario, target.bootstrap, name)
        return cache[(scenario, broker)]

    return get


def _params(*names):
    return [pytest.param(n, id=n, marks=() if n in CI else pytest.mark.reference_extended) for n in names]


@pytest.mark.parametrize("scenario", _params("plain", "idempotent"))
def test_produce_and_read(results, scenario):
    for broker in ("eosbroker", "kafka"):
        r = results(scenario, broker)
        assert r["partition0_offsets"] == list(range(10))
        assert r["values"] == sorted(f"v{i}" for i in range(20))
    assert results(scenario, "eosbroker") == results(scenario, "kafka")


@pytest.mark.parametrize("scenario", _params("transactional"))
def test_commit_and_abort_with_read_committed_reader(results, scenario):
    r = results(scenario, "eosbroker")
    assert r["read_committed"] == sorted([f"committed-{i}" for i in range(6)] + ["committed-last"])
    assert r["read_uncommitted_count"] == 13
    assert r["epoch_after_three_transactions"] == 3  # transaction version 2: a bump per transaction
    assert r == results(scenario, "kafka")


@pytest.mark.parametrize("scenario", _params("fencing"))
def test_zombie_is_fenced(results, scenario):
    r = results(scenario, "eosbroker")
    assert r["zombie"] in ("ProducerFencedException", "InvalidProducerEpochException")
    assert r["read_committed"] == ["successor"]
    assert r == results(scenario, "kafka")


@pytest.mark.parametrize("scenario", _params("ctp", "ctp-consumer-protocol"))
def test_consume_transform_produce_with_group_metadata(results, scenario):
    r = results(scenario, "eosbroker")
    assert r["processed"] == 40 and r["aborted_then_redone"] > 0
    assert r["output"] == sorted(f"M{i}" for i in range(40))
    assert sum(r["committed_offsets"].values()) == 40
    kafka = results(scenario, "kafka")
    assert (kafka["processed"], kafka["output"]) == (r["processed"], r["output"])
    assert sum(kafka["committed_offsets"].values()) == 40


@pytest.mark.parametrize("scenario", _params("admin"))
def test_admin_transaction_calls(results, scenario):
    r = results(scenario, "eosbroker")
    assert r["describe_open_state"] == "Ongoing"
    assert len(r["describe_open_partitions"]) == 1
    assert r["listed"] == ["Ongoing"]
    assert r["producers_open_txn_start"] == [0]
    assert r["describe_done_state"] == "CompleteCommit"
    kafka = results(scenario, "kafka")
    assert {k: v for k, v in kafka.items() if k != "describe_open_partitions"} == \
        {k: v for k, v in r.items() if k != "describe_open_partitions"}


@pytest.mark.parametrize("scenario", _params("consumer-protocol-group"))
def test_kip848_group_assigns_and_splits(results, scenario):
    r = results(scenario, "eosbroker")
    assert (r["first_alone"], r["split"], r["union"]) == (4, [2, 2], 4)
    assert (r["describe_type"], r["describe_members"], r["describe_assigned"]) == ("Consumer", 2, 4)
    assert r == results(scenario, "kafka")


@pytest.mark.parametrize("scenario", _params("admin-configs"))
def test_admin_config_log_dir_scram_and_acl_calls(results, scenario):
    r = results(scenario, "eosbroker")
    assert r["topic retention.ms"] == ["3600000", "DYNAMIC_TOPIC_CONFIG"]
    assert r["group consumer.session.timeout.ms"] == ["50000", "DYNAMIC_GROUP_CONFIG"]
    assert r["log_dir_has_topic"] is True
    assert r["scram"] == ["SCRAM_SHA_256:8192"]
    assert r["create_acls"] == "SecurityDisabledException"  # no authorizer on either broker
    assert r == results(scenario, "kafka")


@pytest.mark.parametrize("scenario", _params("mixed-protocol-group"))
def test_classic_and_kip848_members_in_one_group(results, scenario):
    r = results(scenario, "eosbroker")
    assert (r["modern_alone"], r["split"], r["union"], r["classic_alone"]) == (4, [2, 2], 4, 4)
    assert (r["type_mixed"], r["type_after"]) == ("Consumer", ["Classic"])
    assert r == results(scenario, "kafka")
