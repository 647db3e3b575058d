"""The per-partition aborted-transaction index: lookups, persistence, torn tails, pruning."""

from broker.log.txn_index import FILE_NAME, AbortedTxn, AbortedTxnIndex


def test_overlapping_finds_transactions_with_records_in_the_range(tmp_path):
    index = AbortedTxnIndex(tmp_path)
    index.add(producer_id=1, first_offset=0, last_offset=5)
    index.add(producer_id=2, first_offset=3, last_offset=9)
    index.add(producer_id=3, first_offset=20, last_offset=25)
    assert index.overlapping(6, 10) == [AbortedTxn(9, 3, 2)]
    assert index.overlapping(0, 4) == [AbortedTxn(5, 0, 1), AbortedTxn(9, 3, 2)]
    assert index.overlapping(10, 20) == []  # 3 starts at 20: nothing of it below 20
    assert index.overlapping(10, 21) == [AbortedTxn(25, 20, 3)]
    assert index.overlapping(26, 100) == []


def test_entries_survive_reopen_and_duplicates_are_ignored(tmp_path):
    index = AbortedTxnIndex(tmp_path)
    index.add(7, 10, 12)
    index.close()
    again = AbortedTxnIndex(tmp_path)
    again.add(7, 10, 12)  # the same marker replayed at start-up
    assert len(again) == 1
    assert (tmp_path / FILE_NAME).stat().st_size == 28


def test_torn_last_entry_is_dropped(tmp_path, caplog):
    index = AbortedTxnIndex(tmp_path)
    index.add(1, 0, 1)
    index.add(2, 2, 3)
    index.close()
    data = (tmp_path / FILE_NAME).read_bytes()
    (tmp_path / FILE_NAME).write_bytes(data[:-5])
    again = AbortedTxnIndex(tmp_path)
    assert again.overlapping(0, 100) == [AbortedTxn(1, 0, 1)]
    assert "torn or corrupt" in caplog.text
    again.add(2, 2, 3)
    again.close()
    assert len(AbortedTxnIndex(tmp_path)) == 2


def test_corrupt_entry_stops_loading_there(tmp_path):
    index = AbortedTxnIndex(tmp_path)
    for i in range(3):
        index.add(i, i * 10, i * 10 + 5)
    index.close()
    data = bytearray((tmp_path / FILE_NAME).read_bytes())
    data[28 + 3] ^= 0xFF  # second entry's producer id
    (tmp_path / FILE_NAME).write_bytes(bytes(data))
    assert [e.producer_id for e in AbortedTxnIndex(tmp_path).overlapping(0, 100)] == [0]


def test_truncate_and_delete_before_rewrite_the_file(tmp_path):
    index = AbortedTxnIndex(tmp_path)
    for i in range(5):
        index.add(i, i * 10, i * 10 + 5)
    index.truncate_to(35)  # markers at 35 and 45 are gone with the log tail
    index.delete_before(10)  # the transaction ending at 5 is below the log start
    assert [e.producer_id for e in index.overlapping(0, 100)] == [1, 2]
    index.close()
    assert [e.producer_id for e in AbortedTxnIndex(tmp_path).overlapping(0, 100)] == [1, 2]
