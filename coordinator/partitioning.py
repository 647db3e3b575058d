"""Which coordinator partition owns a key: Kafka's ``Utils.abs(key.hashCode) % partitions``.

Both __transaction_state (transactional ids) and __consumer_offsets (group ids) place a
key this way, so an emulated cluster sends clients to the same partition Kafka would.
"""

from __future__ import annotations

from functools import lru_cache

_INT32_MIN = -(1 << 31)


@lru_cache(maxsize=1 << 16)
def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like Math.abs, but Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if n == _INT32_MIN else abs(n)


@lru_cache(maxsize=1 << 16)  # asked a dozen times per transaction, for the same few ids
def partition_for(key: str, partitions: int) -> int:
    if partitions <= 0:
        raise ValueError(f"partition count must be positive, got {partitions}")
    return java_abs(java_string_hash(key)) % partitions
