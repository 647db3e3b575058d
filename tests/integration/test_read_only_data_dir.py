"""The data directory becomes unwritable while the broker serves (a mistaken chmod, a
volume re-mounted read-only): files already open keep taking appends, but nothing new
can be created, so the first segment roll fails. Produce answers KAFKA_STORAGE_ERROR
from then on, nothing acknowledged is lost, and producing resumes on the same
connection once the directory is writable again, with no restart.

The broker runs as root without CAP_DAC_OVERRIDE (setpriv), so file permissions bind
it as they bind any other user; skipped where setpriv is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from tests.integration.test_disk_full import STORAGE_ERROR, _produce, read_back

pytestmark = pytest.mark.timeout(180)
NO_OVERRIDE = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search", "--"]


def _set_writable(root: Path, writable: bool) -> None:
    """Adds or takes away every write permission in the tree under ``root``."""
    w = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        os.chmod(path, (mode | stat.S_IWUSR) if writable else (mode & ~w))


@pytest.fixture
def broker(tmp_path):
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to run a broker bound by file permissions")
    b = BrokerProcess(tmp_path / "data", {"log.segment.bytes": 1 << 20}, wrapper=NO_OVERRIDE).start()
    yield b
    _set_writable(tmp_path / "data", True)
    if b.alive:
        b.kill()


def test_read_only_data_dir_answers_storage_error_and_recovers_when_writable(broker, tmp_path):
    data = tmp_path / "data"
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    s = socket.create_connection(("127.0.0.1", broker.port))
    s.settimeout(30)
    acked: dict[int, int] = {}
    n = 0
    for _ in range(5):
        n += 1
        error, offset = _produce(s, topic, n)
        assert error == 0
        acked[n] = offset

    _set_writable(data, False)
    errors = []
    while len(errors) < 3 and n < 200:  # appends go on until the segment must roll
        n += 1
        error, offset = _produce(s, topic, n)
        if error == 0:
            acked[n] = offset
        else:
            errors.append(error)
    assert errors == [STORAGE_ERROR] * 3
    # the broker still answers everything else while its directory is read-only
    md = admin.list_topics(topic, timeout=10)
    assert md.topics[topic].error is None

    _set_writable(data, True)
    for _ in range(20):  # past the roll that failed: the next segments are created
        n += 1
        error, offset = _produce(s, topic, n)
        assert error == 0, f"record {n}: error {error} after the directory became writable again"
        acked[n] = offset
    s.close()
    assert sorted(acked.values()) == list(range(len(acked)))  # no gap, no offset handed out twice

    # every acknowledged record where it was acknowledged, nothing else
    assert read_back(broker.bootstrap, topic) == acked
    log = broker.log_text()
    assert "Traceback" not in log
    # and a restart recovers the same log
    broker.stop()
    broker.start()
    assert read_back(broker.bootstrap, topic) == acked
