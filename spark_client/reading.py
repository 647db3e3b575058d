"""read_committed reading of one partition between two offsets.

What a Kafka consumer does under isolation.level=read_committed, for a bounded range:
Fetch stops at the last stable offset; control batches (markers) are skipped; a
transactional batch is dropped when its producer has an aborted transaction that
began at or before the batch (the Fetch response lists them) and whose ABORT marker
has not been passed yet. Positions advance by batch, so offset gaps (compaction,
markers, aborted batches) are simply stepped over.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator

from kio.schema.errors import ErrorCode

from protocol.answer_wire import request_type
from protocol.records import CONTROL_TYPE_ABORT, Record, decode_records, iter_batches, read_control_record
from spark_client.wire import FETCH_V, READ_COMMITTED, Client, KafkaError


def read_partition(cluster: Client, topic: str, partition: int, start: int, end: int,
                   isolation: int = READ_COMMITTED, max_bytes: int = 4 << 20,
                   timeout_s: float = 60.0) -> Iterator[Record]:
    """Records of ``topic``-``partition`` with start <= offset < end, as the isolation level shows them.

    ``end`` must not be past the last stable offset (read_committed) or the high
    watermark, or the read waits for it until ``timeout_s``.
    """
    position = start
    aborted_pids: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while position < end:
        conn = cluster.leader(topic, partition)
        fetch = request_type(1)
        r = conn.request(1, FETCH_V, fetch(
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max_bytes, isolation_level=isolation,
            session_id=0, session_epoch=-1, topics=(fetch.FetchTopic(topic=topic, topic_id=None, partitions=(
                fetch.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=position,
                                     last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes),)),),
            forgotten_topics_data=(), rack_id=""))
        data = r.responses[0].partitions[0]
        if data.error_code != ErrorCode.none:
            raise KafkaError(data.error_code, f"Fetch {topic}-{partition} at offset {position}")
        stable = data.last_stable_offset if isolation == READ_COMMITTED and data.last_stable_offset >= 0 \
            else data.high_watermark
        # Aborted transactions in first-offset order, joined as the batches reach them.
        pending = [(a.first_offset, a.producer_id) for a in (data.aborted_transactions or ())]
        heapq.heapify(pending)
        progressed = False
        for batch in iter_batches(data.records or b""):
            if batch.last_offset < position:
                continue
            while pending and pending[0][0] <= batch.last_offset:
                aborted_pids.add(heapq.heappop(pending)[1])
            next_position = batch.last_offset + 1
            if batch.is_control:
                control_type, _ = read_control_record(batch)
                if control_type == CONTROL_TYPE_ABORT:
                    aborted_pids.discard(batch.producer_id)
            elif not (batch.is_transactional and batch.producer_id in aborted_pids):
                for record in decode_records(batch):
                    if record.offset >= end:
                        return
                    if record.offset >= position:
                        yield record
            position = next_position
            progressed = True
            if position >= end:
                return
        if not progressed:
            if stable >= end:  # nothing is stored in [position, end): compacted or deleted
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}-{partition}: offset {end} not readable within {timeout_s}s "
                    f"(last stable offset {stable}, high watermark {data.high_watermark})")
