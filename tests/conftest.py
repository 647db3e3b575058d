import gc
import os
import time
import uuid

import pytest

# Brokers started by the tests refuse response fields no message version has.
os.environ["EOSBROKER_CHECK_FIELDS"] = "1"

# Property tests explore the same examples on every CI run, so a failure there is a
# change's and reproduces; `make fuzz` (EOSBROKER_FUZZ_SCALE > 1) draws new ones.
if os.environ.get("EOSBROKER_FUZZ_SCALE", "1") == "1":
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True)
    settings.load_profile("ci")


# The eosbroker fixtures come from the package's pytest plugin (broker/testing/plugin.py).
@pytest.fixture(scope="session")
def shared_broker(eosbroker):
    """One broker for the tests that only need topics of their own."""
    return eosbroker


@pytest.fixture
def broker_factory(eosbroker_cluster):
    """Brokers a test owns: to restart, kill -9 or configure them."""

    def make(overrides=None, data_dir=None, **options):
        """``options``: nodes=N, admin=True (the control API)."""
        return eosbroker_cluster(overrides, data_dir=data_dir, **options)

    return make


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:10]}"


def _librdkafka_clients() -> int:
    """Live librdkafka handles in this process: each runs one thread named rdk:main."""
    count = 0
    try:
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/comm") as comm:
                    count += comm.read().strip() == "rdk:main"
            except OSError:  # the thread ended meanwhile
                pass
    except OSError:  # no /proc: nothing to check
        pass
    return count


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def no_librdkafka_client_outlives_its_test(request):
    """A confluent-kafka client still alive once the test and its brokers are gone keeps
    reconnecting to a stopped broker for the rest of the run. Set up first, so torn down
    after the test's own fixtures; a handle destroyed late (from one of librdkafka's own
    threads) gets time to finish before the test is failed. A test that failed already
    is left alone: its kept traceback holds its clients."""
    before = _librdkafka_clients()
    yield
    if _librdkafka_clients() <= before or request.node.stash.get(_CALL_FAILED, False):
        return
    gc.collect()
    deadline = time.monotonic() + 10
    while (after := _librdkafka_clients()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    if after > before:
        pytest.fail(f"{after - before} confluent-kafka client(s) outlived the test: close() them, or drop "
                    "every reference (a thread, a fixture, a global, a kept exception)", pytrace=False)
