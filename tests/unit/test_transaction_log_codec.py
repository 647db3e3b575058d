"""__transaction_state key/value layout (Kafka's TransactionLogTest cases), golden bytes by hand."""

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.transaction.log_codec import (
    TransactionLogValue,
    UnknownKeyVersion,
    UnknownValueVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_metadata_value,
    encode_value,
    metadata_from_value,
    value_from_metadata,
)
from coordinator.transaction.metadata import TransactionMetadata
from coordinator.transaction.metadata import TransactionState as S

ONGOING = TransactionLogValue(
    producer_id=1000,
    producer_epoch=5,
    transaction_timeout_ms=60000,
    transaction_status=S.ONGOING.id,
    transaction_partitions=(("foo", (0, 1)),),
    transaction_last_update_timestamp_ms=2000,
    transaction_start_timestamp_ms=1500,
    previous_producer_id=1000,
)

# version 1 (flexible): compact arrays/strings, tagged sections, PreviousProducerId as tag 0
ONGOING_V1 = bytes.fromhex(
    "0001"  # value version 1
    "00000000000003e8"  # ProducerId 1000
    "0005"  # ProducerEpoch 5
    "0000ea60"  # TransactionTimeoutMs 60000
    "01"  # TransactionStatus Ongoing
    "02"  # TransactionPartitions: compact array, 1 entry
    "04666f6f"  # Topic "foo" (compact string, length 3 + 1)
    "03" "00000000" "00000001"  # PartitionIds [0, 1] (compact array, 2 + 1)
    "00"  # partition entry: no tagged fields
    "00000000000007d0"  # TransactionLastUpdateTimestampMs 2000
    "00000000000005dc"  # TransactionStartTimestampMs 1500
    "01"  # one tagged field
    "00" "08" "00000000000003e8"  # tag 0 PreviousProducerId, 8 bytes, 1000
)

# version 0 (non-flexible): int16/int32 lengths, no tagged fields at all
ONGOING_V0 = bytes.fromhex(
    "0000"
    "00000000000003e8"
    "0005"
    "0000ea60"
    "01"
    "00000001"  # array of 1
    "0003666f6f"  # "foo" with int16 length
    "00000002" "00000000" "00000001"
    "00000000000007d0"
    "00000000000005dc"
)


def test_key_layout():
    assert encode_key("txn") == bytes.fromhex("0000" "0003" "74786e")
    assert decode_key(bytes.fromhex("0000000374786e")) == "txn"
    assert decode_key(encode_key("é-\U0001f600")) == "é-\U0001f600"


def test_serialize_transaction_log_value_to_flexible_version():
    assert encode_value(ONGOING) == ONGOING_V1
    assert encode_value(ONGOING, version=1) == ONGOING_V1


def test_serialize_transaction_log_value_to_highest_non_flexible_version():
    assert encode_value(ONGOING, version=0) == ONGOING_V0


def test_deserialize_highest_supported_transaction_log_value():
    assert decode_value(ONGOING_V1) == ONGOING


def test_deserialize_version_0_value():
    value = decode_value(ONGOING_V0)
    assert value.producer_id == 1000
    assert value.transaction_partitions == (("foo", (0, 1)),)
    assert value.previous_producer_id == -1  # v0 has no tagged fields


def test_should_not_persist_producer_ids_at_version_0():
    value = TransactionLogValue(7, 1, 100, S.EMPTY.id, None, 5, -1,
                                previous_producer_id=6, next_producer_id=8,
                                next_producer_epoch=2, client_transaction_version=2)
    decoded = decode_value(encode_value(value, version=0))
    assert decoded.previous_producer_id == -1
    assert decoded.next_producer_id == -1
    assert decoded.next_producer_epoch == -1
    assert decoded.client_transaction_version == 0


def test_should_round_trip_previous_and_next_producer_ids():
    value = TransactionLogValue(7, 1, 100, S.PREPARE_COMMIT.id, (("t", (3,)),), 5, 4,
                                previous_producer_id=5, next_producer_id=7,
                                next_producer_epoch=3, client_transaction_version=2)
    data = encode_value(value)
    assert data.endswith(bytes.fromhex(
        "04"
        "0008" "0000000000000005"  # tag 0 PreviousProducerId
        "0108" "0000000000000007"  # tag 1 NextProducerId
        "0202" "0002"  # tag 2 ClientTransactionVersion
        "0302" "0003"  # tag 3 NextProducerEpoch
    ))
    assert decode_value(data) == value


def test_empty_state_writes_null_partitions():
    value = TransactionLogValue(1, 0, 100, S.EMPTY.id, None, 9, -1)
    v1 = encode_value(value)
    assert v1 == bytes.fromhex(
        "0001" "0000000000000001" "0000" "00000064" "00"
        "00"  # null compact array
        "0000000000000009" "ffffffffffffffff" "00"
    )
    v0 = encode_value(value, version=0)
    assert v0[17:21] == b"\xff\xff\xff\xff"  # null int32-length array
    assert decode_value(v1).transaction_partitions is None
    assert decode_value(v0).transaction_partitions is None


def test_should_throw_exception_write_invalid_txn():
    md = _metadata(S.EMPTY, partitions={("t", 0)})
    with pytest.raises(ValueError):
        value_from_metadata(md)


def test_dead_is_never_written_as_a_value():
    with pytest.raises(ValueError):
        value_from_metadata(_metadata(S.DEAD))


@pytest.mark.parametrize("state", [s for s in S if s is not S.DEAD])
def test_should_read_write_messages(state):
    partitions = set() if state is S.EMPTY else {("a", 0), ("a", 2), ("b", 1)}
    md = _metadata(state, partitions=partitions)
    key, value = encode_key(md.transactional_id), encode_value(value_from_metadata(md))
    assert decode_key(key) == md.transactional_id
    assert metadata_from_value(decode_key(key), decode_value(value)) == md


def test_partitions_are_grouped_by_topic_in_a_stable_order():
    md = _metadata(S.ONGOING, partitions={("b", 1), ("a", 2), ("a", 0)})
    assert value_from_metadata(md).transaction_partitions == (("a", (0, 2)), ("b", (1,)))


def test_last_producer_epoch_is_not_persisted():
    md = _metadata(S.EMPTY, last_epoch=4)
    back = metadata_from_value(md.transactional_id, decode_value(encode_value(value_from_metadata(md))))
    assert back.last_producer_epoch == -1


def test_deserialize_future_transaction_log_value():
    # A v1 value from a newer writer: unknown tags in a partition entry and at the top.
    data = bytes.fromhex(
        "0001" "0000000000000064" "0032" "000001f4" "04"  # pid 100, epoch 50, 500 ms, CompleteCommit
        "02" "06746f706963" "02" "00000001"  # ("topic", [1])
        "02" "64" "04" "03666f6f" "65" "04" "00000fa0"  # tags 100 ("foo"), 101 (4000)
        "00000000000003e8" "00000000000002ee"  # last update 1000, start 750
        "02" "00" "08" "0000000000000063" "c801" "02" "abcd"  # tag 0 = 99, tag 200 unknown
    )
    value = decode_value(data)
    assert (value.producer_id, value.producer_epoch, value.transaction_timeout_ms) == (100, 50, 500)
    assert S.from_id(value.transaction_status) is S.COMPLETE_COMMIT
    assert value.transaction_partitions == (("topic", (1,)),)
    assert (value.transaction_last_update_timestamp_ms, value.transaction_start_timestamp_ms) == (1000, 750)
    assert value.previous_producer_id == 99


def test_read_returns_unknown_key_version_for_invalid_key():
    with pytest.raises(UnknownKeyVersion) as info:
        decode_key(struct.pack(">hh", 3, 0))
    assert info.value.version == 3


def test_read_returns_unknown_value_version_for_invalid_value():
    with pytest.raises(UnknownValueVersion) as info:
        decode_value(struct.pack(">h", 2) + ONGOING_V1[2:])
    assert info.value.version == 2
    with pytest.raises(UnknownValueVersion):
        encode_value(ONGOING, version=2)


def test_truncated_value_is_rejected():
    with pytest.raises(ValueError):
        decode_value(ONGOING_V1[:-3])
    with pytest.raises(ValueError):
        decode_value(ONGOING_V0[:20])


def test_null_key_string_is_rejected():
    with pytest.raises(ValueError):
        decode_key(bytes.fromhex("0000ffff"))


def _metadata(state, partitions=(), last_epoch=-1):
    return TransactionMetadata(
        transactional_id="txn-1",
        producer_id=42,
        previous_producer_id=41,
        next_producer_id=-1,
        producer_epoch=3,
        last_producer_epoch=last_epoch,
        txn_timeout_ms=30000,
        state=state,
        topic_partitions=frozenset(partitions),
        txn_start_timestamp_ms=-1 if state is S.EMPTY else 100,
        txn_last_update_timestamp_ms=200,
    )



_VALUES = st.builds(
    TransactionLogValue,
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    transaction_timeout_ms=st.integers(0, 2**31 - 1),
    transaction_status=st.sampled_from([s.id for s in S if s is not S.DEAD]),
    transaction_partitions=st.none() | st.lists(
        st.tuples(st.text(min_size=1, max_size=200), st.lists(st.integers(0, 2**31 - 1), max_size=5).map(tuple)),
        max_size=4).map(tuple),
    transaction_last_update_timestamp_ms=st.integers(-1, 2**63 - 1),
    transaction_start_timestamp_ms=st.integers(-1, 2**63 - 1),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_epoch=st.integers(-1, 2**15 - 1),
    client_transaction_version=st.integers(0, 2),
)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_every_value_round_trips_at_both_versions(value):
    assert decode_value(encode_value(value)) == value
    v0 = decode_value(encode_value(value, version=0))
    assert v0 == dataclasses.replace(value, previous_producer_id=-1, next_producer_id=-1,
                                     next_producer_epoch=-1, client_transaction_version=0)


def test_non_ascii_topics_and_long_names_take_multi_byte_lengths():
    topic = "é" * 100  # 200 bytes: a compact length of two varint bytes
    value = dataclasses.replace(ONGOING, transaction_partitions=((topic, tuple(range(130))),))
    data = encode_value(value)
    # 1 entry; name length 200 + 1 = c9 01; then 131 partition ids (130 + 1 = 83 01)
    assert data[17:20] == bytes.fromhex("02" "c901") and data[20:220] == topic.encode()
    assert data[220:222] == bytes.fromhex("8301")
    assert decode_value(data) == value


def test_value_from_metadata_puts_every_field_in_its_place():
    md = _metadata(S.PREPARE_COMMIT, {("b", 2), ("a", 1), ("b", 0)})._replace(
        next_producer_id=43, client_transaction_version=2)
    assert value_from_metadata(md) == TransactionLogValue(
        producer_id=42, producer_epoch=3, transaction_timeout_ms=30000, transaction_status=S.PREPARE_COMMIT.id,
        transaction_partitions=(("a", (1,)), ("b", (0, 2))), transaction_last_update_timestamp_ms=200,
        transaction_start_timestamp_ms=100, previous_producer_id=41, next_producer_id=43,
        next_producer_epoch=-1, client_transaction_version=2)


_METADATA = st.builds(
    TransactionMetadata,
    transactional_id=st.text(min_size=1, max_size=20),
    producer_id=st.integers(0, 2**63 - 1),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    last_producer_epoch=st.integers(-1, 2**15 - 1),
    txn_timeout_ms=st.integers(0, 2**31 - 1),
    state=st.sampled_from([s for s in S if s is not S.DEAD]),
    topic_partitions=st.frozensets(st.tuples(st.text(min_size=1, max_size=30), st.integers(0, 2**31 - 1)),
                                   max_size=6),
    txn_start_timestamp_ms=st.integers(-1, 2**63 - 1),
    txn_last_update_timestamp_ms=st.integers(-1, 2**63 - 1),
    client_transaction_version=st.integers(0, 2),
)


@settings(max_examples=300, deadline=None)
@given(_METADATA)
def test_metadata_is_written_as_its_value_is(md):
    """The coordinator's one-step encoding gives the bytes of the value built from the metadata."""
    if md.state is S.EMPTY and md.topic_partitions:
        with pytest.raises(ValueError):
            encode_metadata_value(md)
        with pytest.raises(ValueError):
            value_from_metadata(md)
        return
    assert encode_metadata_value(md) == encode_value(value_from_metadata(md))
    assert encode_metadata_value(md) == encode_metadata_value(md)  # again, from the caches


def test_dead_metadata_is_never_written_as_a_value():
    with pytest.raises(ValueError):
        encode_metadata_value(_metadata(S.DEAD))
