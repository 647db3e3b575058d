"""Kafka's names and small types that every layer shares.

The internal topics' names (as users see them in Kafka), the FindCoordinator key
types, and ``TopicPartition``: protocol/, coordinator/, broker/ and the tools all
take them from here rather than spelling them out.
"""

from __future__ import annotations

# The group coordinator's compacted log: group metadata and committed offsets.
CONSUMER_OFFSETS = "__consumer_offsets"
# The transaction coordinator's compacted log: one record per transactional id.
TRANSACTION_STATE = "__transaction_state"
# The share coordinator's compacted log: the state of each share-partition (KIP-932).
SHARE_GROUP_STATE = "__share_group_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE, SHARE_GROUP_STATE})

# FindCoordinator's key_type.
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2  # a share-partition's "group:topic id:partition", for the share coordinator

TopicPartition = tuple[str, int]
"""A partition by (topic name, partition index), as every request names it."""
