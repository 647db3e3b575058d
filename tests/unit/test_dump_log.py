"""eosbroker dump-log over files written with the project's own builders and writers."""

import struct

import crc32c
import pytest
from click.testing import CliRunner

from broker.commands import main
from broker.log.segment import OFFSET_ENTRY, TIME_ENTRY
from broker.log.producer_snapshots import write_snapshot
from broker.log.producer_state import ProducerStateManager
from broker.log.txn_index import AbortedTxnIndex
from coordinator.transaction.log_codec import TransactionLogValue, encode_key, encode_value
from coordinator.transaction.metadata import TransactionState
from protocol.records import RecordBatch, build_batch, build_control_batch

T0 = 1_700_000_000_000


def dump(*args):
    return CliRunner().invoke(main, ["dump-log", *map(str, args)])


@pytest.fixture
def segment(tmp_path):
    """Offsets 0-1: a transactional batch; 2: its COMMIT; 3: a gzip batch; 4: an ABORT."""
    data = (build_batch([(b"k0", b"v0", [("h", b"x")], T0), (None, b"v1", [], T0 + 5)], producer_id=42,
                        producer_epoch=3, base_sequence=7, transactional=True)
            + build_control_batch(42, 3, True, coordinator_epoch=9, timestamp_ms=T0 + 10, base_offset=2)
            + build_batch([(b"k", None, [], T0 + 20)], base_offset=3, compression=1)
            + build_control_batch(43, 0, False, coordinator_epoch=1, timestamp_ms=T0 + 30, base_offset=4))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return path, data


def test_batches_of_a_segment(segment):
    path, data = segment
    result = dump(path)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    first = RecordBatch(data, 0)
    assert lines[2] == (
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 7 lastSequence: 8 producerId: 42 producerEpoch: 3 "
        "partitionLeaderEpoch: -1 isTransactional: true isControl: false position: 0 "
        f"CreateTime: {T0 + 5} size: {first.size} magic: 2 compresscodec: none crc: {first.header.crc} isvalid: true")
    assert "baseOffset: 2 lastOffset: 2 count: 1 " in lines[3] and "isControl: true" in lines[3]
    assert f"position: {first.size} " in lines[3]
    assert "baseOffset: 3 " in lines[4] and "producerId: -1 " in lines[4] and "compresscodec: gzip" in lines[4]
    assert len(lines) == 6
    assert not any(line.startswith("|") for line in lines)


def test_records_and_markers(segment):
    path, _ = segment
    result = dump(path, "--print-records")
    assert result.exit_code == 0, result.output
    records = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert records == [
        f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 2 sequence: 7 headers: [h=x] key: k0 payload: v0",
        f"| offset: 1 CreateTime: {T0 + 5} keySize: -1 valueSize: 2 sequence: 8 headers: [] key: null payload: v1",
        f"| offset: 2 CreateTime: {T0 + 10} keySize: 4 valueSize: 6 sequence: -1 "
        "endTxnMarker: COMMIT coordinatorEpoch: 9",
        f"| offset: 3 CreateTime: {T0 + 20} keySize: 1 valueSize: -1 sequence: -1 headers: [] key: k payload: null",
        f"| offset: 4 CreateTime: {T0 + 30} keySize: 4 valueSize: 6 sequence: -1 "
        "endTxnMarker: ABORT coordinatorEpoch: 1",
    ]


def test_transaction_state_records(tmp_path):
    ongoing = TransactionLogValue(producer_id=1000, producer_epoch=2, transaction_timeout_ms=60000,
                                  transaction_status=TransactionState.ONGOING.id,
                                  transaction_partitions=(("t", (0, 1)), ("u", (5,))),
                                  transaction_last_update_timestamp_ms=T0 + 1, transaction_start_timestamp_ms=T0)
    empty = TransactionLogValue(1000, 3, 60000, TransactionState.EMPTY.id, None, T0 + 2, -1, previous_producer_id=999)
    path = tmp_path / "00000000000000000010.log"
    path.write_bytes(build_batch([(encode_key("app-1"), encode_value(ongoing, 0), [], T0)], base_offset=10)
                     + build_batch([(encode_key("app-1"), encode_value(empty), [], T0)], base_offset=11)
                     + build_batch([(encode_key("app-1"), None, [], T0)], base_offset=12)
                     + build_batch([(b"\x00\x07other", b"x", [], T0)], base_offset=13))
    result = dump(path, "--decode-transaction-state")
    assert result.exit_code == 0, result.output
    records = [line.split(" sequence: -1 ", 1)[1] for line in result.stdout.splitlines() if line.startswith("|")]
    assert records == [
        "transactionalId: app-1 producerId: 1000 producerEpoch: 2 state: Ongoing transactionTimeoutMs: 60000 "
        f"partitions: [t-0,t-1,u-5] lastUpdateTimestamp: {T0 + 1} startTimestamp: {T0}",
        "transactionalId: app-1 producerId: 1000 producerEpoch: 3 state: Empty transactionTimeoutMs: 60000 "
        f"partitions: [] lastUpdateTimestamp: {T0 + 2} startTimestamp: -1 previousProducerId: 999",
        "transactionalId: app-1 payload: <DELETE> (tombstone: the id expired)",
        "key: \\x00\\x07other payload: x (not a transaction log record: unknown transaction log key version 7)",
    ]
    assert "Log starting offset: 10" in result.stdout


def test_truncated_segment_reports_where_and_exits_1(segment):
    path, data = segment
    second = RecordBatch(data, 0).size
    third = second + RecordBatch(data, second).size
    path.write_bytes(data[:third + 20])
    result = dump(path)
    assert result.exit_code == 1
    assert result.stdout.count("baseOffset:") == 2  # the intact prefix is still dumped
    assert result.stderr == (f"Corruption in {path} at position {third}: "
                             f"batch of {RecordBatch(data, third).size} bytes is truncated to 20\n")

    path.write_bytes(data[:second + 5])
    result = dump(path)
    assert result.exit_code == 1
    assert result.stderr == f"Corruption in {path} at position {second}: 5 trailing bytes, too few for a batch\n"


def test_crc_mismatch_is_reported_and_the_dump_goes_on(segment):
    path, data = segment
    damaged = bytearray(data)
    damaged[70] ^= 0xFF  # inside the first batch's records
    path.write_bytes(damaged)
    result = dump(path, "--print-records")
    assert result.exit_code == 1
    assert "isvalid: false" in result.stdout.splitlines()[2]
    assert "endTxnMarker: COMMIT" in result.stdout  # later batches are still dumped
    stored = RecordBatch(data, 0).header.crc
    assert f"Corruption in {path} at position 0: CRC mismatch: stored {stored}" in result.stderr


def test_indexes(tmp_path):
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(OFFSET_ENTRY.pack(0, 0) + OFFSET_ENTRY.pack(40, 4096))
    timeindex = tmp_path / "00000000000000000100.timeindex"
    timeindex.write_bytes(TIME_ENTRY.pack(T0, 0) + TIME_ENTRY.pack(T0 + 9, 40))
    result = dump(index, timeindex)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"Dumping {index}", "offset: 100 position: 0", "offset: 140 position: 4096",
        f"Dumping {timeindex}", f"timestamp: {T0} offset: 100", f"timestamp: {T0 + 9} offset: 140",
    ]

    index.write_bytes(OFFSET_ENTRY.pack(0, 0) + OFFSET_ENTRY.pack(40, 4096) + b"\x00\x01\x02")
    timeindex.write_bytes(TIME_ENTRY.pack(T0 + 9, 0) + TIME_ENTRY.pack(T0, 40))
    result = dump(index, timeindex)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"Corruption in {index} at position 16: 3 trailing bytes, not a whole 8-byte entry",
        f"Corruption in {timeindex} at position 12: entry (timestamp {T0}, offset 140) does not follow "
        f"(timestamp {T0 + 9}, offset 100)",
    ]


def test_aborted_transaction_index(tmp_path):
    index = AbortedTxnIndex(tmp_path)
    index.add(42, 0, 2)
    index.add(43, 3, 9)
    path = tmp_path / "aborted-transactions.index"
    result = dump(path)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == ["producerId: 42 firstOffset: 0 lastOffset: 2",
                                              "producerId: 43 firstOffset: 3 lastOffset: 9"]
    data = bytearray(path.read_bytes())
    data[30] ^= 1
    path.write_bytes(data)
    result = dump(path)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:] == ["producerId: 42 firstOffset: 0 lastOffset: 2"]
    assert result.stderr == f"Corruption in {path} at position 28: entry CRC mismatch\n"


def test_producer_snapshot(tmp_path):
    manager = ProducerStateManager()
    manager.update(RecordBatch(build_batch([(None, b"v", [], T0), (None, b"v", [], T0), (None, b"v", [], T0 + 50)],
                                           base_offset=5, producer_id=42, producer_epoch=1, base_sequence=0,
                                           transactional=True)))
    path = write_snapshot(manager, tmp_path, 8)
    result = dump(path)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        "producerId: 42 producerEpoch: 1 coordinatorEpoch: -1 currentTxnFirstOffset: 5 "
        f"lastTimestamp: {T0 + 50} firstSequence: 0 lastSequence: 2 lastOffset: 7 offsetDelta: 2 "
        f"timestamp: {T0 + 50} cachedBatches: 1"]
    path.write_bytes(path.read_bytes()[:-3])
    result = dump(path)
    assert result.exit_code == 1
    assert result.stderr == f"Corruption in {path}: snapshot CRC mismatch\n"


def test_missing_and_unsupported_files(tmp_path):
    other = tmp_path / "leader-epoch-checkpoint"
    other.write_text("0\n")
    result = dump(tmp_path / "nope.log", other)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"Cannot read {tmp_path / 'nope.log'}: No such file or directory",
        f"Unsupported file {other}: expected .log, .index, .timeindex, .snapshot or aborted-transactions.index",
    ]
    assert result.stdout == ""  # neither is said to be dumped


def test_unreadable_records_are_reported(tmp_path):
    data = build_batch([(b"k", b"v", [], T0)])
    struct.pack_into(">i", data, 57, 2)  # claims two records, holds one
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + build_control_batch(1, 0, True, 0, T0, base_offset=1))
    result = dump(path, "--print-records")
    assert result.exit_code == 1
    assert "isvalid: true" in result.stdout.splitlines()[2]
    assert "endTxnMarker: COMMIT" in result.stdout
    assert result.stderr.startswith(f"Corruption in {path} at position 0: records of batch 0 cannot be read: ")

