"""Fixtures for the tests that compare eosbroker with Apache Kafka.

Every test here carries the `reference` marker (added below), so `-m reference` selects
them and `-m "not reference"` leaves them out. Kafka starts once per session.
"""

from __future__ import annotations

import pytest

from tests.broker_process import BrokerProcess
from tests.reference.kafka_broker import DIFFERENTIAL, KafkaBroker
from tests.reference.secured_targets import secured_target  # noqa: F401  (the security matrix's brokers)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/reference/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.reference)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One Apache Kafka broker (KRaft, single node) for the whole session, with the secured
    listeners besides PLAINTEXT (kafka_broker.py: SASL_PLAINTEXT, SASL_SSL, MTLS)."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), secured=True).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def eos_reference(tmp_path_factory):
    """An eosbroker with the settings the Kafka reference broker gets for these tests."""
    broker = BrokerProcess(tmp_path_factory.mktemp("eos-reference") / "data", DIFFERENTIAL, admin=True).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def brokers(shared_broker, kafka_broker):
    """Both brokers by name: the same scenario runs against each."""
    return {"eosbroker": shared_broker, "kafka": kafka_broker}
