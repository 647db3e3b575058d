"""The request timeline of one librdkafka transactional producer, per broker.

    python -m bench.timeline --brokers eosbroker,tansu,kafka --transactions 300

Runs the producer of the transactions workload (10 records, 5 to each partition of a
fresh 2-partition topic, linger.ms 5) in a child process with librdkafka's protocol
and eos debug logs on stderr, and its own begin/commit stamps in the same stream.
Then, per broker, over the transactions after the first 20:
- the requests each transaction sent and how often each sequence occurred (a retried
  AddPartitionsToTxn shows up here, and CONCURRENT_TRANSACTIONS answers are counted);
- each API's round trip as librdkafka measured it (the time the broker held it, plus
  the loopback);
- the mean time of each send and receive in the most common sequence, from
  begin_transaction(): what is left between a receive and the next send is the
  client's own time. librdkafka's stamps are in whole milliseconds, so these means
  read about 0.5 ms early against the Python stamps.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

_SENT = re.compile(r"^%7\|(\d+\.\d+)\|\w+\|[^|]*\| \[thrd:([^\]]*)\]: .*Sent (\w+)Request \(v(\d+), (\d+) bytes")
_RECEIVED = re.compile(
    r"^%7\|(\d+\.\d+)\|\w+\|[^|]*\| \[thrd:([^\]]*)\]: .*Received (\w+)Response .*rtt ([\d.]+)ms\)")
_STAMP = re.compile(r"^STAMP\|(\d+\.\d+)\|(\w+) (\d+)")
_SKIP = 20


def producer(bootstrap: str, topic: str, transactions: int) -> None:
    """The child: one transactional producer, as in bench/workloads/transactions.py."""
    from confluent_kafka import Producer

    def stamp(what: str, t: int) -> None:
        sys.stderr.write(f"STAMP|{time.time():.6f}|{what} {t}\n")
        sys.stderr.flush()

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"timeline-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5, "debug": "protocol,eos"})
    p.init_transactions(30)
    filler = os.urandom(96)
    for t in range(transactions):
        stamp("BEGIN", t)
        p.begin_transaction()
        for r in range(10):
            p.produce(topic, struct.pack(">IB", t, r) + filler, partition=r % 2)
        stamp("COMMIT", t)
        p.commit_transaction(30)
        stamp("DONE", t)
    p.flush(0)


def record(broker: str, transactions: int, log_path: Path) -> None:
    from bench.brokers import BROKERS, RunningBroker
    from bench.workloads.produce import create_topic

    with RunningBroker(BROKERS[broker]) as running:
        topic = f"timeline-{uuid.uuid4().hex[:8]}"
        create_topic(running.bootstrap, topic, 30, partitions=2)
        log_producer(running.bootstrap, topic, transactions, log_path)


def log_producer(bootstrap: str, topic: str, transactions: int, log_path: Path) -> None:
    """Runs the producer in a child process, its debug log and stamps into ``log_path``."""
    with open(log_path, "w") as log:
        subprocess.run([sys.executable, "-m", "bench.timeline", "--producer", bootstrap, topic, str(transactions)],
                       stderr=log, check=True, timeout=600)


def summarise(broker: str, log_path: Path) -> str:
    events: dict[int, list[tuple]] = collections.defaultdict(list)
    stamps: dict[int, dict[str, float]] = collections.defaultdict(dict)
    current = None
    concurrent = 0
    for line in log_path.read_text(errors="replace").splitlines():
        if m := _STAMP.match(line):
            if m[2] == "BEGIN":
                current = int(m[3])
            stamps[int(m[3])][m[2]] = float(m[1])
        elif current is None:
            continue
        elif m := _SENT.match(line):
            events[current].append(("send", float(m[1]), m[2], m[3], None))
        elif m := _RECEIVED.match(line):
            events[current].append(("recv", float(m[1]), m[2], m[3], float(m[4])))
        elif "concurrent operation" in line or "CONCURRENT_TRANSACTIONS" in line:
            concurrent += 1
    done = sorted(t for t in events if t >= _SKIP and "DONE" in stamps[t] and "BEGIN" in stamps.get(t + 1, {}))
    if not done:
        return f"{broker}: no complete transactions in {log_path}"
    shape = {t: tuple((e[0], "coordinator" if "Coordinator" in e[2] else "leader", e[3]) for e in events[t])
             for t in done}
    per_txn = [stamps[t + 1]["BEGIN"] - stamps[t]["BEGIN"] for t in done]
    commit = [stamps[t]["DONE"] - stamps[t]["COMMIT"] for t in done]
    out = [f"{broker}: {len(done)} transactions, {statistics.median(per_txn) * 1e3:.2f} ms each (median), "
           f"commit_transaction() {statistics.median(commit) * 1e3:.2f} ms, "
           f"{concurrent} CONCURRENT_TRANSACTIONS answers"]
    rtts = collections.defaultdict(list)
    for t in done:
        for e in events[t]:
            if e[0] == "recv":
                rtts[e[3]].append(e[4])
    for api, values in sorted(rtts.items()):
        values.sort()
        out.append(f"  {api:22s} {len(values) / len(done):4.2f}/txn  rtt median {statistics.median(values):.3f} ms"
                   f"  p90 {values[int(0.9 * (len(values) - 1))]:.3f} ms")
    common = collections.Counter(shape.values()).most_common()
    for seq, count in common[:3]:
        out.append(f"  {count:4d}x " + " ".join(f"{d}:{api}@{to}" for d, to, api in seq))
    top = common[0][0]
    offsets = collections.defaultdict(list)
    for t in done:
        if shape[t] == top:
            begin = stamps[t]["BEGIN"]
            for i, e in enumerate(events[t]):
                offsets[i].append((e[1] - begin) * 1e3)
            offsets["commit"].append((stamps[t]["COMMIT"] - begin) * 1e3)
            offsets["done"].append((stamps[t]["DONE"] - begin) * 1e3)
    out.append(f"  mean ms from begin_transaction(): commit_transaction() called {statistics.mean(offsets['commit']):.2f},"
               f" returned {statistics.mean(offsets['done']):.2f}")
    for i, (direction, to, api) in enumerate(top):
        out.append(f"    {statistics.mean(offsets[i]):6.2f} {direction} {api} ({to})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="eosbroker,tansu")
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--logs", type=Path, default=Path("."), help="where the librdkafka logs are written")
    parser.add_argument("--producer", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.producer:
        producer(args.producer[0], args.producer[1], int(args.producer[2]))
        return 0
    for broker in args.brokers.split(","):
        log_path = args.logs / f"timeline-{broker}.log"
        record(broker, args.transactions, log_path)
        print(summarise(broker, log_path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
