"""A partition counts, logs and optionally refuses a transactional batch that reuses
the sequences of a batch whose transaction has already ended."""

from __future__ import annotations

import logging

import pytest

from broker.log.partition import Partition, ProduceRejected
from broker.log.partition_log import LogConfig
from tests.unit.test_producer_state import NOW, PID, data_batch


@pytest.fixture
def partition(tmp_path):
    p = Partition.open("t", 0, tmp_path / "t-0", LogConfig(), NOW)
    yield p
    p.close()


def _aborted_transaction(p: Partition) -> None:
    p.append_from_client(data_batch(seq=0, transactional=True), NOW)
    p.append_from_client(data_batch(seq=1, transactional=True), NOW)
    p.write_marker(PID, 0, commit=False, coordinator_epoch=0, now_ms=NOW)


def test_stale_duplicate_is_answered_counted_and_logged(partition, caplog):
    _aborted_transaction(partition)
    with caplog.at_level(logging.WARNING, logger="broker.log.partition"):
        appended = partition.append_from_client(data_batch(seq=1, transactional=True), NOW)
    assert appended.duplicate and appended.base_offset == 1
    assert partition.log.log_end_offset == 3
    assert partition.sequence_reuse_after_marker == 1
    assert "reused sequences 1..1" in caplog.text and "NOT written" in caplog.text


def test_stale_duplicate_is_refused_when_asked(partition):
    _aborted_transaction(partition)
    with pytest.raises(ProduceRejected) as e:
        partition.append_from_client(data_batch(seq=1, transactional=True), NOW, refuse_sequence_reuse=True)
    assert e.value.error_name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert partition.log.log_end_offset == 3
    assert partition.sequence_reuse_after_marker == 1


def test_retry_inside_the_open_transaction_is_a_plain_duplicate(partition):
    partition.append_from_client(data_batch(seq=0, transactional=True), NOW)
    appended = partition.append_from_client(data_batch(seq=0, transactional=True), NOW, refuse_sequence_reuse=True)
    assert appended.duplicate and appended.base_offset == 0
    assert partition.sequence_reuse_after_marker == 0
