from __future__ import annotations

import os

import pytest

import broker.log.files as files
from broker.cluster.producer_ids import MAX_PRODUCER_ID, ProducerIdAllocator, ProducerIdsExhausted


def test_ids_are_sequential_from_zero(tmp_path):
    alloc = ProducerIdAllocator(tmp_path / "producer_ids", block_size=10)
    assert [alloc.next_producer_id() for _ in range(25)] == list(range(25))


def test_block_end_is_persisted_before_ids_are_handed_out(tmp_path):
    path = tmp_path / "producer_ids"
    alloc = ProducerIdAllocator(path, block_size=10)
    assert not path.exists()
    assert alloc.next_producer_id() == 0
    assert path.read_text() == "10\n"
    for _ in range(8):
        alloc.next_producer_id()
    assert path.read_text() == "10\n"
    assert alloc.next_producer_id() == 9  # the last of the block: the next one is reserved
    assert path.read_text() == "20\n"
    assert alloc.next_producer_id() == 10


def test_one_file_write_per_block(tmp_path, monkeypatch):
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(files.os, "replace", lambda a, b: (replaced.append(b), real_replace(a, b)))
    alloc = ProducerIdAllocator(tmp_path / "producer_ids", block_size=100)
    for _ in range(250):
        alloc.next_producer_id()
    assert len(replaced) == 3 and alloc.blocks_reserved == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_unique_across_reopen(tmp_path):
    path = tmp_path / "producer_ids"
    seen = []
    for _ in range(4):
        alloc = ProducerIdAllocator(path, block_size=7)
        seen += [alloc.next_producer_id() for _ in range(3)]
    assert len(set(seen)) == len(seen)
    # each reopen starts at the end of the last reserved block
    assert seen == [0, 1, 2, 7, 8, 9, 14, 15, 16, 21, 22, 23]


def test_unique_across_simulated_crash(tmp_path):
    path = tmp_path / "producer_ids"
    first = ProducerIdAllocator(path, block_size=50)
    handed_out = {first.next_producer_id() for _ in range(120)}
    # no close: the process dies; a second instance starts from the file alone
    del first
    second = ProducerIdAllocator(path, block_size=50)
    after = [second.next_producer_id() for _ in range(60)]
    assert handed_out.isdisjoint(after)
    assert after[0] == 150


def test_crash_between_tmp_write_and_rename_keeps_previous_block(tmp_path):
    path = tmp_path / "producer_ids"
    alloc = ProducerIdAllocator(path, block_size=5)
    ids = [alloc.next_producer_id() for _ in range(4)]
    # a torn reservation leaves only a stray tmp file behind
    (tmp_path / "producer_ids.tmp").write_text("1")
    reopened = ProducerIdAllocator(path, block_size=5)
    assert reopened.next_producer_id() == 5 and 5 not in ids


def test_corrupt_file_refuses_to_start(tmp_path):
    path = tmp_path / "producer_ids"
    path.write_text("not a number")
    with pytest.raises(ValueError, match="unreadable producer id block end"):
        ProducerIdAllocator(path)
    path.write_text("-3\n")
    with pytest.raises(ValueError, match="negative"):
        ProducerIdAllocator(path)


def test_invalid_block_size(tmp_path):
    with pytest.raises(ValueError, match="block_size"):
        ProducerIdAllocator(tmp_path / "producer_ids", block_size=0)


def test_exhausted(tmp_path):
    path = tmp_path / "producer_ids"
    path.write_text(f"{MAX_PRODUCER_ID - 2}\n")
    alloc = ProducerIdAllocator(path, block_size=10)
    with pytest.raises(ProducerIdsExhausted):
        alloc.next_producer_id()


def test_creates_parent_directory(tmp_path):
    alloc = ProducerIdAllocator(tmp_path / "meta" / "producer_ids", block_size=3)
    assert alloc.next_producer_id() == 0
    assert (tmp_path / "meta" / "producer_ids").read_text() == "3\n"


def test_peek_then_taken_hands_out_the_peeked_id_once(tmp_path):
    alloc = ProducerIdAllocator(tmp_path / "producer_ids", block_size=2)
    assert alloc.peek() == alloc.peek() == 0  # peeking consumes nothing
    alloc.taken(0)
    with pytest.raises(ValueError):
        alloc.taken(0)
    assert alloc.next_producer_id() == 1
    assert (tmp_path / "producer_ids").read_text() == "4\n"  # block [2, 4) reserved when [0, 2) ran out
