import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker per module that aborts timed-out transactions within a fraction of a second."""
    b = BrokerProcess(tmp_path_factory.mktemp("spark") / "data",
                      {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}).start()
    yield b
    b.stop()
