"""The sink's control log: one compacted topic, one key per query (or batch write).

The value is the latest decision for that key as JSON: COMMITTING(batch, txns) is the
commit decision, written before any EndTxn(commit); COMMITTED(batch, txns) follows
once every EndTxn succeeded. Compaction keeps just the latest value per key, which
is all the protocol needs: either a batch to finish, or the last committed batch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from spark_client.reading import read_partition
from spark_client.wire import READ_COMMITTED, Client, Producer, TxnHandle

COMMITTING = "COMMITTING"
COMMITTED = "COMMITTED"


@dataclass(frozen=True, slots=True)
class TxnRef:
    """One task's transaction as the driver learned it from the commit message."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partition: int
    attempt: int
    count: int
    started_ms: int

    @property
    def handle(self) -> TxnHandle:
        return TxnHandle(self.transactional_id, self.producer_id, self.producer_epoch)


@dataclass(frozen=True, slots=True)
class Decision:
    batch_id: int
    state: str
    txns: tuple[TxnRef, ...]

    def encode(self) -> bytes:
        return json.dumps({"batch_id": self.batch_id, "state": self.state,
                           "txns": [asdict(t) for t in self.txns]}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> "Decision":
        raw = json.loads(data)
        return cls(int(raw["batch_id"]), raw["state"], tuple(TxnRef(**t) for t in raw["txns"]))


# Per process: how far each control key has been read, so a long-lived driver worker
# reads only what is new. Keyed by (bootstrap, topic, key).
_read_positions: dict[tuple[str, str, str], tuple[int, Decision | None]] = {}


class ControlLog:
    PARTITION = 0

    def __init__(self, cluster: Client, bootstrap: str, topic: str, key: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.key = key
        self._cache_key = (bootstrap, topic, key)

    def ensure_topic(self) -> None:
        self.cluster.create_topic(self.topic, 1, {"cleanup.policy": "compact"})

    def latest(self) -> Decision | None:
        """The latest decision for this key (reads the partition from where it last stopped)."""
        position, latest = _read_positions.get(self._cache_key, (0, None))
        end = self.cluster.list_offsets(self.topic, [self.PARTITION], -1, READ_COMMITTED)[self.PARTITION]
        start = self.cluster.list_offsets(self.topic, [self.PARTITION], -2, READ_COMMITTED)[self.PARTITION]
        key = self.key.encode()
        for record in read_partition(self.cluster, self.topic, self.PARTITION, max(position, start), end):
            if record.key == key:
                latest = None if record.value is None else Decision.decode(record.value)
        _read_positions[self._cache_key] = (max(end, position), latest)
        return latest

    def append(self, decision: Decision) -> None:
        producer = Producer(self.cluster)
        producer.send(self.topic, self.PARTITION, self.key.encode(), decision.encode())
        producer.flush()
