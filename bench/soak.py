"""Soak: does eosbroker's footprint stay flat under a steady load that runs for an hour?

    python -m bench.soak                                  # 1 hour, first and last 10 minutes
    nice python -m bench.soak --duration 360              # 6 minutes, windows of 1 minute
    python -m bench.soak --duration 600 --window 120 --json bench/results/soak.json

One eosbroker (its own temp dir, the control API on a free port) under, all at once:

- ``--producers`` (20) confluent-kafka transactional producers, each committing
  ``--txn-rate`` (2) transactions a second of 10 records: 5 to a topic with
  ``retention.ms`` 30 s and segments rolled every 5 s, 5 keyed ones (50 keys a producer)
  to a compacted topic (``min.cleanable.dirty.ratio`` 0.01, segments rolled every 5 s);
  the broker's retention check and cleaner run every 5 s, so both delete and rewrite
  segments throughout;
- one read_committed consumer in a group, reading the retained topic and committing;
- every ``--churn-interval`` (10) s a topic of 3 partitions created, written to and deleted
  (by a producer that does not ask for deleted topics again, so none is auto-created).

Every ``--window`` / 20 s it samples the broker process's RSS, its open file descriptors
(/proc/PID/fd) and its asyncio task count (the ``eosbroker_asyncio_tasks`` gauge of
/metrics). It prints the first and the last window (mean, min-max), the change between
their means, and the least-squares slope per hour over everything after the first window
(start-up's growth left out). "flat" means the last window's mean stays within the first
window's maximum (plus 5 % for RSS, whose allocator keeps freed pages). The window is a
sixth of the run unless given. Exit status 1 when a row is not flat, a transaction
failed, or the broker died.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/soak.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RSS_ALLOWANCE = 0.05  # of the first window's maximum
RECORDS_PER_TRANSACTION = 10
KEYS_PER_PRODUCER = 50
SAMPLES_PER_WINDOW = 20
CHURN_PARTITIONS = 3
BROKER_SETTINGS = {"log.retention.check.interval.ms": 5_000, "log.cleaner.backoff.ms": 5_000}
RETAINED_TOPIC = {"retention.ms": "30000", "segment.ms": "5000"}
COMPACTED_TOPIC = {"cleanup.policy": "compact", "segment.ms": "5000", "min.cleanable.dirty.ratio": "0.01",
                   "delete.retention.ms": "5000"}
TASKS_METRIC = "eosbroker_asyncio_tasks"


# -- the pure part: windows, slopes, the table ----------------------------------------

@dataclass(frozen=True)
class Sample:
    at_s: float  # since the load started
    rss: int
    fds: int
    tasks: int


@dataclass(frozen=True)
class Row:
    name: str
    first: tuple[float, float, float]  # mean, min, max
    last: tuple[float, float, float]
    slope_per_hour: float
    flat: bool


FIGURES = (("RSS MB", lambda s: s.rss / 1e6, RSS_ALLOWANCE), ("open fds", lambda s: s.fds, 0.0),
           ("asyncio tasks", lambda s: s.tasks, 0.0))


def in_window(samples: list[Sample], start_s: float, end_s: float) -> list[Sample]:
    return [s for s in samples if start_s <= s.at_s <= end_s]


def summary(values: list[float]) -> tuple[float, float, float]:
    return statistics.fmean(values), min(values), max(values)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per hour; 0 with fewer than two
    distinct times."""
    if len({t for t, _ in points}) < 2:
        return 0.0
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread * 3600


def rows(samples: list[Sample], duration_s: float, window_s: float) -> list[Row]:
    """One row per figure: the first and the last window, the slope after the first."""
    first = in_window(samples, 0, window_s)
    last = in_window(samples, duration_s - window_s, duration_s)
    after_first = in_window(samples, window_s, duration_s)
    if not first or not last:
        raise ValueError(f"no samples in the first or the last {window_s:g} s of {duration_s:g} s")
    out = []
    for name, value, allowance in FIGURES:
        f, lst = summary([value(s) for s in first]), summary([value(s) for s in last])
        out.append(Row(name, f, lst, slope_per_hour([(s.at_s, value(s)) for s in after_first]),
                       flat=lst[0] <= f[2] * (1 + allowance)))
    return out


def table(result: list[Row], window_s: float) -> str:
    minutes = f"{window_s / 60:g} min" if window_s % 60 == 0 else f"{window_s:g} s"
    columns = ["", f"first {minutes}: mean", "min-max", f"last {minutes}: mean", "min-max", "change",
               "slope/h after the first", "flat"]

    def cells(r: Row) -> list[str]:
        f, last = r.first, r.last
        return [r.name, f"{f[0]:,.1f}", f"{f[1]:,.1f}-{f[2]:,.1f}", f"{last[0]:,.1f}", f"{last[1]:,.1f}-{last[2]:,.1f}",
                f"{last[0] - f[0]:+,.1f}", f"{r.slope_per_hour:+,.1f}", "yes" if r.flat else "NO"]

    lines = [columns, *map(cells, result)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(line, widths)))
                     for line in lines)


def descriptor_kind(link: str, data_dir: str) -> str:
    """What an open descriptor is, from its /proc/PID/fd link: a socket, a pipe, or a
    file of a topic's partitions by extension (partition numbers folded together)."""
    kind = link.partition(":")[0]
    if kind in ("socket", "pipe"):
        return kind
    if link.endswith(" (deleted)"):  # still open after its file was removed
        return f"deleted *{Path(link.removesuffix(' (deleted)')).suffix}"
    if link.startswith(data_dir.rstrip("/") + "/"):
        directory, _, name = link[len(data_dir.rstrip("/")) + 1:].rpartition("/")
        topic, dash, partition = directory.rpartition("-")
        return f"{topic if dash and partition.isdigit() else directory}/*{Path(name).suffix}"
    return link


def descriptor_changes(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """'kind: before -> after' for each kind whose count changed, largest change first."""
    kinds = sorted(set(before) | set(after), key=lambda k: (-abs(after.get(k, 0) - before.get(k, 0)), k))
    return [f"{k}: {before.get(k, 0)} -> {after.get(k, 0)}" for k in kinds if before.get(k, 0) != after.get(k, 0)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=3600.0, help="seconds of load (default 3600)")
    p.add_argument("--window", type=float, default=None,
                   help="seconds in the first and last windows (default: a sixth of --duration)")
    p.add_argument("--producers", type=int, default=20, help="transactional producers (default 20)")
    p.add_argument("--txn-rate", type=float, default=2.0, help="transactions a second per producer (default 2)")
    p.add_argument("--churn-interval", type=float, default=10.0,
                   help="seconds between topics created and deleted (default 10)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the samples and rows here")
    args = p.parse_args(argv)
    if args.window is None:
        args.window = args.duration / 6
    if min(args.duration, args.window, args.producers, args.txn_rate, args.churn_interval) <= 0:
        p.error("--duration, --window, --producers, --txn-rate and --churn-interval must be positive")
    if args.window * 2 > args.duration:
        p.error("--window must be at most half of --duration (the first and last windows must not overlap)")
    return args


# -- the load ---------------------------------------------------------------------------

@dataclass
class Load:
    bootstrap: str
    producers: int
    txn_rate: float
    churn_interval_s: float
    stop: threading.Event = field(default_factory=threading.Event)
    committed: int = 0
    consumed: int = 0
    topics_churned: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def failed(self, what: str, error: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{what}: {error!r}")


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})


def _create(admin, name: str, partitions: int, config: dict[str, str]) -> None:
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, partitions, 1, config=config)], request_timeout=30)[name].result(30)


def _producer(load: Load, n: int, retained: str, compacted: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": load.bootstrap, "linger.ms": 5, "log_level": 3,
                         "transactional.id": f"soak-{n}-{uuid.uuid4().hex[:8]}"})
    try:
        producer.init_transactions(60)
        value = os.urandom(100)
        period, t = 1 / load.txn_rate, 0
        next_at = time.monotonic()
        while not load.stop.is_set():
            producer.begin_transaction()
            for r in range(RECORDS_PER_TRANSACTION // 2):
                producer.produce(retained, value, partition=r % 4)
                producer.produce(compacted, value, key=f"{n}-{(t * 5 + r) % KEYS_PER_PRODUCER}".encode(),
                                 partition=r % 4)
            producer.commit_transaction(60)
            with load.lock:
                load.committed += 1
            t += 1
            next_at += period
            load.stop.wait(max(0.0, next_at - time.monotonic()))
    except Exception as e:  # the transaction's error, reported with the figures
        load.failed(f"producer {n}", e)
        load.stop.set()


def _consumer(load: Load, topic: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": load.bootstrap, "group.id": f"soak-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest", "log_level": 3})
    try:
        consumer.subscribe([topic])
        while not load.stop.is_set():
            for message in consumer.consume(500, 0.5):
                if message.error() is None:
                    with load.lock:
                        load.consumed += 1
    except Exception as e:
        load.failed("consumer", e)
    finally:
        consumer.close()


def _churn(load: Load, prefix: str) -> None:
    from confluent_kafka import Producer

    admin = _admin(load.bootstrap)
    # Without this, librdkafka's periodic metadata refresh of the topics it has written to asks
    # for the deleted ones too, and the broker (auto.create.topics.enable, as Kafka's default)
    # creates each again with one partition: the partition count would grow all along.
    producer = Producer({"bootstrap.servers": load.bootstrap, "acks": "all", "log_level": 3,
                         "allow.auto.create.topics": False})
    n = 0
    while not load.stop.wait(load.churn_interval_s):
        name = f"{prefix}-churn-{n}"
        try:
            _create(admin, name, CHURN_PARTITIONS, {})
            for p in range(CHURN_PARTITIONS):
                producer.produce(name, b"churn", partition=p)
            if producer.flush(30):
                raise RuntimeError(f"records to {name} not delivered within 30 s")
            admin.delete_topics([name], request_timeout=30)[name].result(30)
        except Exception as e:
            load.failed(f"topic churn ({name})", e)
            return
        with load.lock:
            load.topics_churned += 1
        n += 1


def tasks_from_metrics(text: str) -> int:
    for line in text.splitlines():
        if line.startswith(TASKS_METRIC + " "):
            return int(float(line.split()[1]))
    raise ValueError(f"{TASKS_METRIC} not in /metrics")


def open_descriptors(pid: int, data_dir: str) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            kind = descriptor_kind(os.readlink(f"/proc/{pid}/fd/{fd}"), data_dir)
        except OSError:
            continue  # closed meanwhile
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.brokers import BrokerKind, RunningBroker, eosbroker_command, free_port

    admin_port = free_port()
    overrides = [a for k, v in BROKER_SETTINGS.items() for a in ("--override", f"{k}={v}")]

    def command(port, data_dir, sasl_ssl=None):
        return [*eosbroker_command(port, data_dir, sasl_ssl), "--admin-port", str(admin_port), *overrides]

    kind = BrokerKind("eosbroker", command)
    print(f"soak: {args.duration:g} s, windows of {args.window:g} s; {args.producers} transactional producers at "
          f"{args.txn_rate:g} txn/s each, a topic created and deleted every {args.churn_interval:g} s", flush=True)
    samples: list[Sample] = []
    with RunningBroker(kind) as broker:
        pid = broker.process.pid
        prefix = f"soak-{uuid.uuid4().hex[:8]}"
        retained, compacted = f"{prefix}-retained", f"{prefix}-compacted"
        admin = _admin(broker.bootstrap)
        _create(admin, retained, 4, RETAINED_TOPIC)
        _create(admin, compacted, 4, COMPACTED_TOPIC)
        del admin  # its handle would go on connecting after the broker stops
        load = Load(broker.bootstrap, args.producers, args.txn_rate, args.churn_interval)
        threads = [threading.Thread(target=_producer, args=(load, n, retained, compacted), daemon=True)
                   for n in range(args.producers)]
        threads += [threading.Thread(target=_consumer, args=(load, retained), daemon=True),
                    threading.Thread(target=_churn, args=(load, prefix), daemon=True)]
        for t in threads:
            t.start()
        began = time.monotonic()
        every = args.window / SAMPLES_PER_WINDOW
        next_report = args.window
        after_first_window: dict[str, int] = {}
        at_end: dict[str, int] = {}
        try:
            while (at := time.monotonic() - began) <= args.duration and not load.stop.is_set():
                broker.check_alive()
                with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics?internal=false", timeout=30) as r:
                    tasks = tasks_from_metrics(r.read().decode())
                descriptors = open_descriptors(pid, str(broker.data_dir))
                if at <= args.window or not after_first_window:
                    after_first_window = descriptors  # the kinds at the first window's last sample
                at_end = descriptors
                samples.append(Sample(at, broker.sampler.rss(), sum(descriptors.values()), tasks))
                if at >= next_report:
                    s = samples[-1]
                    print(f"  {at:6.0f} s: RSS {s.rss / 1e6:.1f} MB, {s.fds} fds, {s.tasks} tasks; "
                          f"{load.committed:,} transactions, {load.consumed:,} records read, "
                          f"{load.topics_churned} topics created and deleted", flush=True)
                    next_report += args.window
                time.sleep(max(0.0, began + len(samples) * every - time.monotonic()))
        finally:
            load.stop.set()
            for t in threads:
                t.join(90)
        broker.check_alive()
        topics = len(_admin(broker.bootstrap).list_topics(timeout=30).topics)
    elapsed = samples[-1].at_s if samples else 0.0
    print(f"\nsoak: {elapsed:.0f} s, {load.committed:,} transactions committed ({load.committed / max(elapsed, 1):.1f}/s), "
          f"{load.consumed:,} records read under read_committed, {load.topics_churned} topics of "
          f"{CHURN_PARTITIONS} partitions created and deleted, {topics} topics at the end, "
          f"{len(samples)} samples")
    for e in load.errors:
        print("  FAILED: " + e)
    if elapsed < 2 * args.window:
        print(f"  stopped after {elapsed:.0f} s: too short for two windows of {args.window:g} s")
        return 1
    result = rows(samples, elapsed, args.window)
    print(table(result, args.window))
    changes = descriptor_changes(after_first_window, at_end)
    print("open descriptors, end of the first window -> end: " + ("; ".join(changes) if changes else "no change"))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                         "samples": [vars(s) for s in samples],
                                         "descriptors": {"after the first window": after_first_window,
                                                         "at the end": at_end},
                                         "rows": [vars(r) for r in result]}, indent=1) + "\n")
    return 1 if load.errors or not all(r.flat for r in result) else 0


if __name__ == "__main__":
    sys.exit(main())
