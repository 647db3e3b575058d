"""The read_committed source: batch reads between offsets and micro-batch streaming.

Rows have the columns of Spark's Kafka source. Offsets are Spark's JSON form,
{"topic": {"0": 42}}; under read_committed "latest" is the last stable offset, so a
batch never waits on an open transaction and never shows aborted records.
Streaming offsets live in Spark's checkpoint (no consumer group is used).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import datasource as ds
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from spark_client.options import EARLIEST, LATEST, SourceOptions
from spark_client.preflight import partition_counts
from spark_client.reading import read_partition
from spark_client.wire import EARLIEST as LIST_EARLIEST
from spark_client.wire import LATEST as LIST_LATEST
from spark_client.wire import READ_COMMITTED, READ_UNCOMMITTED, Client

try:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
except ImportError:  # Spark < 4.2: no read limits
    ReadAllAvailable = ReadMaxRows = None

SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()), StructField("value", BinaryType())]))),
])

ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])

_ARROW_ROWS = 8192

Offsets = dict[str, dict[str, int]]  # Spark's JSON form: partition numbers as strings


class TopicRange(ds.InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"TopicRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _isolation(opts: SourceOptions) -> int:
    return READ_COMMITTED if opts.read_committed else READ_UNCOMMITTED


def _bounds(cluster: Client, opts: SourceOptions, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(log start offsets, latest readable offsets) of every partition of ``topic``."""
    partitions = range(cluster.partition_count(topic))
    return (cluster.list_offsets(topic, partitions, LIST_EARLIEST, _isolation(opts)),
            cluster.list_offsets(topic, partitions, LIST_LATEST, _isolation(opts)))


def resolve(cluster: Client, opts: SourceOptions, spec, default_latest: bool) -> Offsets:
    """An offsets spec ("earliest", "latest" or per-partition JSON) as concrete offsets."""
    out: Offsets = {}
    for topic in opts.topics:
        earliest, latest = _bounds(cluster, opts, topic)
        chosen = {}
        for p in earliest:
            if spec == EARLIEST:
                o = earliest[p]
            elif spec == LATEST:
                o = latest[p]
            else:
                o = spec.get(topic, {}).get(p, -1 if default_latest else -2)
                o = earliest[p] if o == -2 else latest[p] if o == -1 else min(max(o, earliest[p]), latest[p])
            chosen[str(p)] = o
        out[topic] = chosen
    return out


def ranges(start: Offsets, end: Offsets) -> list[TopicRange]:
    out = [TopicRange(topic, int(p), start.get(topic, {}).get(p, 0), o)
           for topic, parts in end.items() for p, o in parts.items()]
    return [r for r in out if r.start < r.end]


def _to_arrow(rows: list[tuple]) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, ARROW_SCHEMA)],
                                      schema=ARROW_SCHEMA)


def read_range(opts: SourceOptions, r: TopicRange) -> Iterator[pa.RecordBatch]:
    utc = datetime.timezone.utc
    with Client(opts.bootstrap, client_id="eosbroker-spark-reader", security=opts.security) as cluster:
        rows: list[tuple] = []
        for record in read_partition(cluster, r.topic, r.partition, r.start, r.end, _isolation(opts),
                                     opts.fetch_max_bytes):
            headers = [{"key": k, "value": v} for k, v in record.headers]
            rows.append((record.key, record.value, r.topic, r.partition, record.offset,
                         datetime.datetime.fromtimestamp(record.timestamp / 1000, utc), 0, headers))
            if len(rows) == _ARROW_ROWS:
                yield _to_arrow(rows)
                rows = []
        if rows:
            yield _to_arrow(rows)


class EosBrokerReader(ds.DataSourceReader):
    """spark.read.format("eosbroker"): startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, opts: SourceOptions) -> None:
        partition_counts(opts.bootstrap, opts.topics, opts.security)  # on the driver: a missing topic fails here, shortly
        self.opts = opts

    def partitions(self) -> list[TopicRange]:
        with Client(self.opts.bootstrap, security=self.opts.security) as cluster:
            start = resolve(cluster, self.opts, self.opts.starting_offsets, default_latest=False)
            end = resolve(cluster, self.opts, self.opts.ending_offsets, default_latest=True)
        found = ranges(start, end)
        return found or [TopicRange(self.opts.topics[0], 0, 0, 0)]

    def read(self, partition: TopicRange) -> Iterator[pa.RecordBatch]:
        if partition.start >= partition.end:
            return iter(())
        return read_range(self.opts, partition)


def _limit_rows(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Moves each partition at most its share of ``max_rows`` past ``start`` (Spark's maxOffsetsPerTrigger)."""
    gaps = {(t, p): max(0, o - start.get(t, {}).get(p, 0)) for t, parts in latest.items() for p, o in parts.items()}
    total = sum(gaps.values())
    if total <= max_rows:
        return latest
    out: Offsets = {t: dict(parts) for t, parts in start.items()}
    budget = max_rows
    for (t, p), gap in sorted(gaps.items()):
        share = min(gap, max(1, gap * max_rows // total), budget)
        out.setdefault(t, {})[p] = start.get(t, {}).get(p, 0) + share
        budget -= share
    return out


class EosBrokerStreamReader(ds.DataSourceStreamReader):
    """spark.readStream.format("eosbroker"): micro-batches up to the last stable offset."""

    def __init__(self, opts: SourceOptions) -> None:
        partition_counts(opts.bootstrap, opts.topics, opts.security)  # on the driver: a missing topic fails here, shortly
        self.opts = opts

    def initialOffset(self) -> Offsets:
        with Client(self.opts.bootstrap, security=self.opts.security) as cluster:
            return resolve(cluster, self.opts, self.opts.starting_offsets, default_latest=True)

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: Offsets | None = None, limit=None) -> Offsets:
        with Client(self.opts.bootstrap, security=self.opts.security) as cluster:
            latest = resolve(cluster, self.opts, LATEST, default_latest=True)
        if start is not None:
            # A partition new since ``start`` is read from its beginning.
            for topic, parts in latest.items():
                for p in parts:
                    start.setdefault(topic, {}).setdefault(p, 0)
            if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
                return _limit_rows(start, latest, limit.max_rows)
        return latest

    def partitions(self, start: Offsets, end: Offsets) -> list[TopicRange]:
        return ranges(start, end)

    def read(self, partition: TopicRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)

    def commit(self, end: Offsets) -> None:
        """Offsets are in Spark's checkpoint; nothing to commit to the broker."""
