"""Partitions opened on first use (broker.cluster.cluster): what start-up opens, and the
clean-shutdown marker after a run that left partitions unvalidated."""

from __future__ import annotations

import logging
from pathlib import Path

from broker.cluster.cluster import Cluster
from broker.config import BrokerConfig

from .test_log import make_batch, view


def _start(data: Path) -> Cluster:
    cluster = Cluster(BrokerConfig(), data)
    cluster.open_all()
    return cluster


def test_start_opens_nothing_and_first_use_opens_one(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    cluster.create_topic("t", 3)
    assert cluster.partitions == {}  # created: directories and registry only
    cluster.partition("t", 1).append(view(make_batch()), now_ms=0)
    assert set(cluster.partitions) == {("t", 1)}
    assert cluster.partition("t", 3) is None and cluster.partition("u", 0) is None
    cluster.close()

    cluster = _start(tmp_path)
    assert cluster.partitions == {}
    assert cluster.partition("t", 1).log.log_end_offset == 1
    cluster.close()


def test_no_clean_marker_while_partitions_are_unvalidated_since_a_crash(tmp_path: Path, caplog) -> None:
    cluster = _start(tmp_path)
    cluster.create_topic("t", 2)
    for i in range(2):
        cluster.partition("t", i).append(view(make_batch()), now_ms=0)
    # a crash: no close()
    cluster = _start(tmp_path)
    assert not cluster.clean_start
    cluster.partition("t", 0)
    with caplog.at_level(logging.INFO):
        cluster.close()
    assert "1 partitions not opened since the unclean shutdown" in caplog.text
    assert not cluster.clean_shutdown_path.exists()

    cluster = _start(tmp_path)
    assert not cluster.clean_start
    assert cluster.partition("t", 1).log.log_end_offset == 1  # validated now
    cluster.partition("t", 0)
    cluster.close()
    assert cluster.clean_shutdown_path.exists()
    assert _start(tmp_path).clean_start
