"""The Java client's KafkaShareConsumer (kafka-clients 4.4.0) against eosbroker (4.4
profile) and Apache Kafka 4.4, with the same expectations: implicit and explicit
acknowledgement, release and reject, the delivery-count limit archiving, redelivery after
a consumer dies and after a lock expires, and share.isolation.level around committed,
aborted and open transactions. The scenarios are in tests/reference/java-driver (share-*).

On eosbroker the lock expires by moving its clock (the control API); on Kafka the time
passes (share.record.lock.duration.ms is at least 15 s there). Each scenario takes 10-40 s
on the two brokers, so they are in make test-reference only, but for the acknowledgements
checked on eosbroker alone.
"""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_share_groups import QUICK
from tests.reference import java_driver
from tests.reference.kafka_broker import DIFFERENTIAL


@pytest.fixture(scope="module")
def share_eosbroker(tmp_path_factory):
    from broker.testing.plugin import new_broker

    broker = new_broker(tmp_path_factory.mktemp("share-java") / "data", {**DIFFERENTIAL, **QUICK}, admin=True).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def results(share_eosbroker, request):
    """Runs a scenario once per broker, on first use (Kafka started only if asked)."""
    cache: dict[tuple[str, str], dict] = {}

    def get(scenario: str, broker: str) -> dict:
        if (scenario, broker) not in cache:
            name = f"java-{scenario}-{uuid.uuid4().hex[:6]}"
            if broker == "eosbroker":
                extra = (share_eosbroker.admin_url,) if scenario == "share-lock-expiry" else ()
                cache[(scenario, broker)] = java_driver.run(scenario, share_eosbroker.bootstrap, name, *extra)
            else:
                kafka = request.getfixturevalue("kafka_broker")
                cache[(scenario, broker)] = java_driver.run(scenario, kafka.bootstrap, name)
        return cache[(scenario, broker)]

    return get


def test_implicit_and_explicit_acknowledgement_and_the_delivery_count_limit_on_eosbroker(results):
    r = results("share-acknowledgements", "eosbroker")
    assert r["implicit_first"] == sorted(f"r{i}:1" for i in range(10))
    assert r["implicit_second"] == ["after:1"]  # the implicitly accepted ones never come back
    assert r["acquisition_lock_timeout_ms"] == 15_000
    assert r["explicit_first"] == ["accept:1", "release:1", "reject:1"]
    assert r["explicit_again"] == ["end:1", "release:2"]  # released came back, rejected did not
    assert r["limit_released"] == ["poison:1", "poison:2"]
    assert r["limit_after"] == ["next:1"]  # released as often as the limit allows: archived
    assert all(r[k] == [] for k in r if k.endswith("commit_errors"))


@pytest.mark.reference_extended
def test_implicit_and_explicit_acknowledgement_and_the_delivery_count_limit_as_on_kafka(results):
    assert results("share-acknowledgements", "eosbroker") == results("share-acknowledgements", "kafka")


@pytest.mark.reference_extended
def test_read_committed_share_consumption_around_transactions(results):
    r = results("share-read-committed", "eosbroker")
    assert r["committed_while_open"] == ["c1:1", "c2:1"]  # never an aborted record, nothing past the LSO
    assert r["committed_after_commit"] == ["c1:1", "c2:1", "open:1", "after-open:1"]
    assert r["uncommitted"] == ["c1:1", "a1:1", "c2:1", "a2:1", "open:1", "after-open:1"]
    assert r == results("share-read-committed", "kafka")


@pytest.mark.reference_extended
def test_a_dead_consumers_records_are_redelivered(results):
    r = results("share-consumer-dies", "eosbroker")
    assert (r["dying_exit"], r["dying_got"]) == (9, "5")
    assert r["redelivered"] == [f"x{i}:2" for i in range(5)]
    assert r["commit_errors"] == []
    assert r == results("share-consumer-dies", "kafka")


@pytest.mark.reference_extended
def test_records_held_past_their_lock_go_to_another_member(results):
    r = results("share-lock-expiry", "eosbroker")
    assert r["held"] == ["a:1", "b:1"]
    assert r["redelivered"] == ["a:2", "b:2"]
    assert r["redelivered_commit_errors"] == []
    assert r["after"] == ["end:1"]
    assert r == results("share-lock-expiry", "kafka")
