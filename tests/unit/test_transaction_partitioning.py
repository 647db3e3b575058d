"""coordinator.partitioning: Java String.hashCode and Kafka's Utils.abs placement."""

import pytest

from coordinator.partitioning import java_abs, java_string_hash, partition_for


@pytest.mark.parametrize(
    ("text", "java_hash"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),  # the classic Java collision
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("\U0001f600", 1772899),  # one code point, two UTF-16 units 0xD83D 0xDE00
        ("é", 233),
    ],
)
def test_java_string_hash_matches_java(text, java_hash):
    assert java_string_hash(text) == java_hash


def test_java_hash_wraps_like_int32():
    # 31*h + c without wrap-around would exceed 32 bits after a few characters.
    expected = 0
    for ch in "transactional-id-with-overflow-0123456789":
        expected = (31 * expected + ord(ch)) % 2**32
    expected = expected - 2**32 if expected >= 2**31 else expected
    assert java_string_hash("transactional-id-with-overflow-0123456789") == expected


def test_utils_abs_maps_min_value_to_zero():
    assert java_abs(-(2**31)) == 0
    assert java_abs(-5) == 5
    assert java_abs(7) == 7


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    [
        ("", 50, 0),
        ("a", 50, 47),
        ("hello", 50, 22),
        ("polygenelubricants", 50, 0),
        ("\U0001f600", 50, 49),
        # Kafka's TransactionStateManagerTest relies on these with 2 partitions.
        ("one", 2, 0),
        ("two", 2, 0),
        ("a", 2, 1),
        ("b", 2, 0),
    ],
)
def test_partition_for(key, partitions, expected):
    assert partition_for(key, partitions) == expected


def test_partition_for_negative_hash_uses_absolute_value():
    assert java_string_hash("zzzzzzzz") == -1910022912
    assert partition_for("zzzzzzzz", 50) == 1910022912 % 50


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition_for("a", 0)
