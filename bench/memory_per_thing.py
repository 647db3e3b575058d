"""Bytes of Python heap per thing, measured with tracemalloc in this process on the
broker's own structures (no broker process, so no RSS noise):

- a known partition nobody has used: its registry entry and its leadership;
- an opened, idle partition (empty log): the Partition with its log, producer state and
  indexes (descriptors are pooled, so none is held);
- a producer state entry: one idempotent producer's entry after one batch;

    python -m bench.memory_per_thing [--count 2000]

The bench's txn-id-scaling workload measures a transactional id in the coordinator by
the broker's RSS, and partition-scaling an idle partition the same way.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.config import BrokerConfig  # noqa: E402


def _measure(build) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, kept


def known_partitions(count: int, data_dir: Path) -> int:
    from broker.cluster.cluster import Cluster

    cluster = Cluster(BrokerConfig({}), data_dir)
    per_topic = 10

    def build():
        for n in range(count // per_topic):
            cluster.create_topic(f"t{n}", per_topic, 1)
        return cluster

    size, _ = _measure(build)
    return size


def opened_partitions(count: int, data_dir: Path) -> int:
    from broker.cluster.cluster import Cluster

    cluster = Cluster(BrokerConfig({}), data_dir)
    for n in range(count // 10):
        cluster.create_topic(f"o{n}", 10, 1)
    size, _ = _measure(lambda: [cluster.partition(f"o{n}", i) for n in range(count // 10) for i in range(10)])
    cluster.close()
    return size


def producer_entries(count: int) -> int:
    from broker.log.producer_state import ProducerStateManager
    from protocol.records import build_batch
    from protocol.records import RecordBatch

    state = ProducerStateManager()
    batches = []
    for pid in range(count):
        batch = RecordBatch(build_batch([(None, b"v", [], 1_700_000_000_000)], base_offset=pid, producer_id=pid,
                                        producer_epoch=0, base_sequence=0))
        batches.append(batch)

    def build():
        for b in batches:
            state.update(b)
        return state

    size, _ = _measure(build)
    return size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory_per_thing", description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=2000, help="things of each kind (default 2000)")
    count = max(10, p.parse_args(argv).count // 10 * 10)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        rows = [
            ("known partition, never used", known_partitions(count, Path(tmp) / "a")),
            ("opened idle partition (empty log)", opened_partitions(count, Path(tmp) / "b")),
            ("producer state entry", producer_entries(count)),
        ]
    width = max(len(name) for name, _ in rows)
    print(f"{'thing':<{width}}  bytes each  (of {count:,})")
    for name, total in rows:
        print(f"{name:<{width}}  {total / count:10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
