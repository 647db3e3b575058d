import itertools
import os
import uuid

import pytest

# Brokers started by the tests refuse response fields no message version has.
os.environ["EOSBROKER_CHECK_FIELDS"] = "1"

from tests.broker_process import BrokerProcess


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    """One broker for the tests that only need topics of their own."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture
def broker_factory(tmp_path):
    """Brokers a test owns: to restart, kill -9 or configure them."""
    started = []
    counter = itertools.count()

    def make(overrides=None, data_dir=None):
        b = BrokerProcess(data_dir or tmp_path / f"data{next(counter)}", overrides)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        if b.alive:
            b.kill()


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:10]}"
