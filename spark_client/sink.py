"""The sink's writers: tasks write inside their own open transaction; the driver commits.

``write`` runs once per task on an executor. With exactly-once delivery it opens a
transaction under an id unique to (prefix, query or write id, batch, partition,
attempt, run), produces every row, flushes, and returns a ``TaskCommit`` holding the
producer id and epoch, without committing; on any exception it aborts its own
transaction and re-raises (Spark has no per-task abort hook). ``commit``/``abort``
run on the driver (commit_protocol.Committer). In at-least-once mode the same
writer produces without a transaction and the driver has nothing to do.

Columns follow Spark's Kafka sink: value (required), key, headers
(array<struct<key: string, value: binary>>), partition (int), topic (when the topic
option is absent). JSON and protobuf formats turn a struct column into bytes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql import datasource as ds
from pyspark.sql.types import StructType

from spark_client import formats
from spark_client.commit_protocol import Committer, TaskCommit, transactional_id
from spark_client.options import SinkOptions
from spark_client.partitioner import partition_for_key
from spark_client.preflight import check_columns, partition_counts
from spark_client.wire import Client, Producer

_ROW_CHUNK = 4096
log = logging.getLogger("eosbroker.spark")
_StreamArrowWriter = getattr(ds, "DataSourceStreamArrowWriter", None)


class InjectedTaskFailure(RuntimeError):
    """The eosbroker.test.fail.partition.attempt hook fired."""


def _preflight(opts: SinkOptions, schema: StructType) -> None:
    check_columns(schema, opts.value_column, opts.key_column, opts.headers_column, opts.partition_column,
                  opts.topic_column, opts.topic, opts.value_format, opts.key_format)
    partition_counts(opts.bootstrap, (opts.topic,) if opts.topic else (), opts.security)


def query_id_from_checkpoint(location: str | None) -> str | None:
    """The streaming query's id from ``<checkpointLocation>/metadata`` (Spark writes it when
    the query is created), for a checkpoint on the local file system; else None."""
    if not location:
        return None
    if location.startswith("file:"):
        location = "/" + location[len("file:"):].lstrip("/")
    elif "://" in location:
        return None
    try:
        with open(Path(location) / "metadata") as f:
            return json.loads(f.readline())["id"]
    except (OSError, ValueError, KeyError):
        return None


class _TaskWriter:
    """Turns one task's rows into records of an (optionally transactional) producer."""

    def __init__(self, opts: SinkOptions, columns: list[str], scope: str, batch_id: int, run_id: str) -> None:
        ctx = TaskContext.get()
        self.opts = opts
        self.scope = scope
        self.batch_id = batch_id
        self.run_id = run_id
        self.partition = ctx.partitionId() if ctx else 0
        self.attempt = ctx.attemptNumber() if ctx else 0
        self.columns = set(columns)
        self.encode_value = formats.encoder(opts.value_format, opts.protobuf_descriptor_file,
                                            opts.protobuf_message_name)
        self.encode_key = formats.encoder(opts.key_format, opts.protobuf_descriptor_file,
                                          opts.protobuf_message_name)
        self.cluster = Client(opts.bootstrap, client_id=f"eosbroker-spark-task-{self.partition}", security=opts.security)
        self.txn_id = transactional_id(opts.transactional_id_prefix, scope, batch_id, self.partition,
                                       self.attempt, run_id) if opts.exactly_once else None
        self.producer = Producer(self.cluster, transactional_id=self.txn_id,
                                 transaction_timeout_ms=opts.transaction_timeout_ms, batch_bytes=opts.batch_bytes)
        self._sticky = self.partition  # keyless records: one partition per batch-sized run, as Kafka's sticky partitioner
        self._sticky_left = 0
        self.count = 0

    def _column(self, data: dict[str, list], name: str, size: int) -> list:
        return data[name] if name in self.columns else [None] * size

    def add(self, data: dict[str, list], size: int) -> None:
        """Columns of ``size`` rows, as lists."""
        opts = self.opts
        values = data[opts.value_column]
        keys = self._column(data, opts.key_column, size)
        headers = self._column(data, opts.headers_column, size)
        partitions = self._column(data, opts.partition_column, size)
        topics = [opts.topic] * size if opts.topic else data[opts.topic_column]
        encode_key, encode_value, send = self.encode_key, self.encode_value, self.producer.send
        now = int(time.time() * 1000)
        for i in range(size):
            topic = topics[i]
            if topic is None:
                raise ValueError("null topic: set the 'topic' option or fill the topic column")
            key = encode_key(keys[i])
            partition = partitions[i]
            if partition is None:
                count = self.cluster.partition_count(topic)
                if key is not None:
                    partition = partition_for_key(key, count)
                else:
                    if self._sticky_left == 0:
                        self._sticky = (self._sticky + 1) % count
                        self._sticky_left = 8192
                    self._sticky_left -= 1
                    partition = self._sticky % count
            row_headers = headers[i]
            if row_headers:
                row_headers = tuple((h["key"], formats.encode_raw(h["value"])) for h in row_headers)
            else:
                row_headers = ()
            send(topic, partition, key, encode_value(values[i]), row_headers, now)
        self.count += size

    def finish(self) -> TaskCommit:
        hook = self.opts.hook_fail_partition_attempt
        txn = self.producer.flush()
        if hook is not None and hook == (self.partition, self.attempt):
            raise InjectedTaskFailure(f"test hook: partition {self.partition} attempt {self.attempt} fails "
                                      f"after writing {self.count} records")
        return TaskCommit(
            scope=self.scope, batch_id=self.batch_id, run_id=self.run_id, partition=self.partition,
            attempt=self.attempt, transactional_id=txn.transactional_id if txn else None,
            producer_id=txn.producer_id if txn else -1, producer_epoch=txn.producer_epoch if txn else -1,
            count=self.count, started_ms=self.producer.started_ms)

    def abort(self) -> None:
        try:
            self.producer.abort()
        finally:
            self.cluster.close()


def _rows_as_columns(rows: Iterator, columns: list[str]) -> Iterator[tuple[dict[str, list], int]]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == _ROW_CHUNK:
            yield {c: [r[c] for r in chunk] for c in columns}, len(chunk)
            chunk = []
    if chunk:
        yield {c: [r[c] for r in chunk] for c in columns}, len(chunk)


def _arrow_as_columns(batches: Iterator, columns: list[str]) -> Iterator[tuple[dict[str, list], int]]:
    for batch in batches:
        names = batch.schema.names
        yield {c: batch.column(names.index(c)).to_pylist() for c in columns if c in names}, batch.num_rows


class _WriterBase:
    """State shared by the batch and streaming writers (pickled from the driver to the tasks)."""

    def __init__(self, opts: SinkOptions, schema: StructType, scope: str | None) -> None:
        _preflight(opts, schema)
        self.opts = opts
        self.columns = schema.fieldNames()
        self.scope = scope
        self.run_id = uuid.uuid4().hex[:8]
        self._started = False

    def __getstate__(self) -> dict:
        # Spark pickles the writer on the driver to ship it to the tasks, before any of
        # them starts (the driver's commit/abort worker builds its own and never pickles
        # it): the moment to resolve what earlier runs of this query left open.
        if not self._started:
            self._started = True
            try:
                self._resolve_earlier_runs()
            except Exception as e:
                # Raised here it would reach the user as a PicklingError; the batch's
                # commit meets the same state first thing and fails with the real error.
                log.warning("could not resolve what earlier runs of this query left: %s", e)
        return self.__dict__.copy()

    def _resolve_earlier_runs(self) -> None:
        scope = self.scope or query_id_from_checkpoint(self.opts.checkpoint_location)
        if not self.opts.exactly_once or scope is None:
            return  # a new random write id has no earlier run; a streaming query resolves at its first commit
        with Committer(self.opts, scope) as committer:
            committer.start()

    def _write(self, chunks: Iterator[tuple[dict[str, list], int]]) -> TaskCommit:
        ctx = TaskContext.get()
        batch_id = int((ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or 0)
        scope = self.scope or (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or "unknown"
        task = _TaskWriter(self.opts, self.columns, scope, batch_id, self.run_id)
        try:
            for data, size in chunks:
                task.add(data, size)
            message = task.finish()
        except BaseException:
            try:
                task.abort()
            except Exception as e:  # the task's own failure is the one to report
                log.warning("could not abort %s: %s", task.txn_id, e)
            raise
        task.cluster.close()
        return message

    def _commit(self, messages: list, batch_id: int) -> None:
        if not self.opts.exactly_once:
            return
        hook_sleep = self.opts.hook_sleep_before_commit_ms
        if hook_sleep:
            time.sleep(hook_sleep / 1000)
        scope = self._scope_of(messages)
        if scope is None:
            return  # no task ran: nothing was written
        with Committer(self.opts, scope) as committer:
            committer.commit(batch_id, messages)

    def _abort(self, messages: list, batch_id: int) -> None:
        if not self.opts.exactly_once:
            return
        scope = self._scope_of(messages)
        if scope is None:
            return
        with Committer(self.opts, scope) as committer:
            committer.abort(batch_id, messages)

    def _scope_of(self, messages: list) -> str | None:
        return self.scope or next((m.scope for m in messages if m is not None), None)


class EosBrokerBatchWriter(_WriterBase, ds.DataSourceArrowWriter):
    """df.write.format("eosbroker"): one batch (id 0) under a write id."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        super().__init__(opts, schema, opts.write_id or uuid.uuid4().hex)
        if opts.write_id is None:
            self._started = True  # a fresh scope: no earlier run to resolve

    def write(self, iterator: Iterator[Any]) -> TaskCommit:
        return self._write(_arrow_as_columns(iterator, self.columns))

    def commit(self, messages: list) -> None:
        self._commit(messages, 0)

    def abort(self, messages: list) -> None:
        self._abort(messages, 0)


class _StreamWriterMixin(_WriterBase):
    def commit(self, messages: list, batchId: int) -> None:
        self._commit(messages, batchId)

    def abort(self, messages: list, batchId: int) -> None:
        self._abort(messages, batchId)


if _StreamArrowWriter is not None:
    class EosBrokerStreamWriter(_StreamWriterMixin, _StreamArrowWriter):
        """df.writeStream.format("eosbroker"): one two-phase commit per micro-batch."""

        def __init__(self, opts: SinkOptions, schema: StructType) -> None:
            super().__init__(opts, schema, None)

        def write(self, iterator: Iterator[Any]) -> TaskCommit:
            return self._write(_arrow_as_columns(iterator, self.columns))
else:
    class EosBrokerStreamWriter(_StreamWriterMixin, ds.DataSourceStreamWriter):  # type: ignore[no-redef]
        """df.writeStream.format("eosbroker") on Spark 4.0 (rows, no Arrow)."""

        def __init__(self, opts: SinkOptions, schema: StructType) -> None:
            super().__init__(opts, schema, None)

        def write(self, iterator: Iterator[Any]) -> TaskCommit:
            return self._write(_rows_as_columns(iterator, self.columns))
