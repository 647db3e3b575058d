"""__consumer_offsets record layouts (Kafka's OffsetCommitKey/Value, GroupMetadataKey/Value
JSON schemas in group-coordinator/src/main/resources/common/message), byte for byte."""

import struct

import pytest

from coordinator.group import log_codec as c


def s16(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def test_offset_commit_key_is_version_1_group_topic_partition():
    data = c.encode_offset_commit_key("grp", "tpc", 7)
    assert data == b"\x00\x01" + b"\x00\x03grp" + b"\x00\x03tpc" + b"\x00\x00\x00\x07"
    assert c.decode_key(data) == c.OffsetCommitKey("grp", "tpc", 7)


def test_offset_commit_key_version_0_reads_the_same():
    data = b"\x00\x00" + s16("g") + s16("t") + struct.pack(">i", 2)
    assert c.decode_key(data) == c.OffsetCommitKey("g", "t", 2)


def test_group_metadata_key_is_version_2_group():
    data = c.encode_group_metadata_key("grp")
    assert data == b"\x00\x02\x00\x03grp"
    assert c.decode_key(data) == c.GroupMetadataKey("grp")


def test_keys_of_other_group_types_are_unknown_versions():
    with pytest.raises(c.UnknownKeyVersion) as e:
        c.decode_key(b"\x00\x03" + s16("g"))
    assert e.value.version == 3


def test_offset_commit_value_v3():
    value = c.OffsetCommitValue(offset=100, leader_epoch=5, metadata="m", commit_timestamp_ms=1000)
    data = c.encode_offset_commit_value(value)
    assert data == (
        b"\x00\x03" + struct.pack(">q", 100) + struct.pack(">i", 5) + b"\x00\x01m" + struct.pack(">q", 1000)
    )
    assert c.decode_offset_commit_value(data) == value


def test_offset_commit_value_with_expire_timestamp_is_written_as_v1():
    value = c.OffsetCommitValue(offset=1, metadata="", commit_timestamp_ms=10, expire_timestamp_ms=20)
    data = c.encode_offset_commit_value(value)
    assert data == b"\x00\x01" + struct.pack(">q", 1) + b"\x00\x00" + struct.pack(">qq", 10, 20)
    assert c.decode_offset_commit_value(data) == value  # v1 has no leader epoch: -1


@pytest.mark.parametrize("version", [0, 2])
def test_offset_commit_value_v0_and_v2(version):
    data = struct.pack(">hq", version, 42) + s16("meta") + struct.pack(">q", 99)
    assert c.decode_offset_commit_value(data) == c.OffsetCommitValue(
        offset=42, metadata="meta", commit_timestamp_ms=99, leader_epoch=-1
    )


def test_offset_commit_value_unknown_version_and_truncation_are_refused():
    with pytest.raises(c.LogCodecError):
        c.decode_offset_commit_value(struct.pack(">hq", 9, 1))
    good = c.encode_offset_commit_value(c.OffsetCommitValue(1, "x", 2))
    with pytest.raises(c.LogCodecError):
        c.decode_offset_commit_value(good[:-1])
    with pytest.raises(c.LogCodecError):
        c.decode_offset_commit_value(good + b"\x00")


MEMBER = c.MemberMetadata(
    member_id="a-1", group_instance_id="inst", client_id="cl", client_host="/h",
    rebalance_timeout_ms=300000, session_timeout_ms=10000, subscription=b"\x01\x02", assignment=b"\x03",
)


def test_group_metadata_value_v3():
    value = c.GroupMetadataValue(
        protocol_type="consumer", generation=2, protocol="range", leader="a-1",
        current_state_timestamp_ms=7, members=(MEMBER,),
    )
    data = c.encode_group_metadata_value(value)
    assert data == (
        b"\x00\x03" + s16("consumer") + struct.pack(">i", 2) + s16("range") + s16("a-1")
        + struct.pack(">q", 7) + struct.pack(">i", 1)
        + s16("a-1") + s16("inst") + s16("cl") + s16("/h") + struct.pack(">ii", 300000, 10000)
        + b"\x00\x00\x00\x02\x01\x02" + b"\x00\x00\x00\x01\x03"
    )
    assert c.decode_group_metadata_value(data) == value


def test_group_metadata_value_of_an_empty_group_has_null_protocol_and_leader():
    value = c.GroupMetadataValue("consumer", 3, None, None, 5, ())
    data = c.encode_group_metadata_value(value)
    assert data == b"\x00\x03" + s16("consumer") + struct.pack(">i", 3) + b"\xff\xff\xff\xff" + struct.pack(">qi", 5, 0)
    assert c.decode_group_metadata_value(data) == value


def test_group_metadata_value_v0_v1_v2_read():
    member_v0 = s16("m") + s16("cl") + s16("/h") + struct.pack(">i", 6000) + b"\x00\x00\x00\x00" * 2
    v0 = b"\x00\x00" + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(">i", 1) + member_v0
    decoded = c.decode_group_metadata_value(v0)
    assert decoded.current_state_timestamp_ms == -1
    assert decoded.members == (c.MemberMetadata("m", None, "cl", "/h", 6000, 6000, b"", b""),)

    member_v1 = s16("m") + s16("cl") + s16("/h") + struct.pack(">ii", 60000, 6000) + b"\x00\x00\x00\x00" * 2
    v1 = b"\x00\x01" + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(">i", 1) + member_v1
    assert c.decode_group_metadata_value(v1).members[0].rebalance_timeout_ms == 60000

    v2 = b"\x00\x02" + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(">qi", 77, 1) + member_v1
    decoded = c.decode_group_metadata_value(v2)
    assert decoded.current_state_timestamp_ms == 77
    assert decoded.members[0].group_instance_id is None


def test_group_metadata_value_errors():
    with pytest.raises(c.LogCodecError):
        c.decode_group_metadata_value(b"\x00\x04" + s16("consumer"))
    with pytest.raises(c.LogCodecError):
        c.decode_group_metadata_value(b"\x00\x03" + s16("consumer") + struct.pack(">i", 1) + b"\xff\xff\xff\xff" + struct.pack(">qi", 0, -1))


def test_records_and_tombstones():
    rec = c.offset_commit_record("g", "t", 0, None)
    assert rec.key == c.encode_offset_commit_key("g", "t", 0) and rec.value is None
    rec = c.group_metadata_record("g", None)
    assert rec.key == c.encode_group_metadata_key("g") and rec.value is None
    value = c.OffsetCommitValue(5, "", 1)
    assert c.offset_commit_record("g", "t", 0, value).value == c.encode_offset_commit_value(value)


@pytest.mark.parametrize("codec_name", ["consumer_log_codec", "share_log_codec", "streams_log_codec"])
def test_modern_group_keys_whose_strings_overrun_the_key_are_refused(codec_name):
    import importlib
    codec = importlib.import_module(f"coordinator.group.{codec_name}")
    kind = codec.CURRENT_ASSIGNMENT
    good = struct.pack(">h", kind) + s16("grp") + s16("mem")
    assert codec.decode_key(kind, good) == type(codec.decode_key(kind, good))(kind, "grp", "mem")
    for bad in (good[:-1], struct.pack(">h", kind) + s16("grp") + struct.pack(">h", -1)):
        with pytest.raises(c.LogCodecError):
            codec.decode_key(kind, bad)


@pytest.mark.parametrize("group_type", ["consumer", "share", "streams"])
def test_each_modern_record_kind_is_a_key_version_of_its_group_type(group_type):
    """The key versions a load dispatches on (group_types, which imports no codec) and the
    record kinds each type's codec writes are the same."""
    from coordinator.group.group_types import key_type, type_codec

    codec = type_codec(group_type)
    kinds = {codec.GROUP_METADATA, codec.TARGET_METADATA, *codec.MEMBER_RECORDS}
    assert {key_type(kind) for kind in kinds} == {group_type}
    for kind in kinds:
        data = struct.pack(">h", kind) + s16("grp") + (s16("mem") if kind in codec.MEMBER_RECORDS else b"")
        assert codec.decode_key(kind, data).group == "grp"
