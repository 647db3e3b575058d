"""What the scaling workloads share: their sizes (``--scale`` multiplies them, so a quick
run is possible), raw requests over broker.wire.client's connection, and the curve table each
prints (one row per size, with the cost per unit beside the figures).

Their figures also go into the bench table, one metric per size and figure, named
"<size> <unit>: <figure>": sizes follow ``--scale``, so the metrics are named at run time.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterable

from bench.brokers import HOST
from broker.wire.client import KafkaConnection

METADATA, LIST_OFFSETS, INIT_PRODUCER_ID = 3, 2, 22


def scaled(sizes: Iterable[int], scale: float) -> list[int]:
    """The sizes times ``scale``, at least 1 each, without repeats."""
    out: list[int] = []
    for size in sizes:
        n = max(1, round(size * scale))
        if n not in out:
            out.append(n)
    return out


def curve_table(title: str, columns: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = [title, "  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join("    " + line for line in lines)


async def metadata_ms(port: int, times: int = 5) -> float:
    """The median of ``times`` Metadata v1 requests for every topic, one at a time."""
    async with await KafkaConnection.connect(HOST, port, "bench-scaling-metadata") as conn:
        took = []
        for _ in range(times):
            began = time.perf_counter()
            await conn.request(METADATA, 1, {"topics": None}, timeout=120)
            took.append((time.perf_counter() - began) * 1000)
    return statistics.median(took)


async def latest_offsets(port: int, partitions: dict[str, int]) -> dict[tuple[str, int], int]:
    """ListOffsets(latest) for every partition of ``partitions`` (topic -> count)."""
    out: dict[tuple[str, int], int] = {}
    names = list(partitions)
    async with await KafkaConnection.connect(HOST, port, "bench-scaling-offsets") as conn:
        for first in range(0, len(names), 500):
            topics = [{"name": t, "partitions": [{"partition_index": i, "timestamp": -1}
                                                 for i in range(partitions[t])]} for t in names[first:first + 500]]
            answer = await conn.request(LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 0, "topics": topics},
                                        timeout=120)
            for topic in answer.topics:
                for p in topic.partitions:
                    out[(topic.name, p.partition_index)] = p.offset if p.error_code == 0 else -1
    return out


def run_async(coro):
    return asyncio.run(coro)
