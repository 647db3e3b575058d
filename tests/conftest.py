import os
import uuid

import pytest

# Brokers started by the tests check that compiled layouts write the bytes kio writes.
os.environ["EOSBROKER_CROSS_CHECK_LAYOUTS"] = "1"

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
