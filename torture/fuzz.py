"""Mutated frames against a live broker while a transactional client keeps working.

    python -m torture.fuzz --frames 1000000 [--seed N] [--connections 8]

Frames start as valid requests of every API and version the broker accepts and are
then truncated, bit-flipped, spliced, given huge or negative counts and lengths, or
replaced by garbage. Meanwhile a confluent-kafka transactional producer commits
transactions. At the end the run checks that the broker is alive, logged no stack
trace, the client saw no error and every committed record is readable, and prints one
summary line (frames sent, connections the broker closed, broker RSS before/after).
Topic-creating and -deleting APIs are left out (they are fuzzed in process by the unit
tests): mutated ones would create thousands of partitions, which is work, not a leak.

With ``--sasl`` the broker's listener is SASL_PLAINTEXT (PLAIN, SCRAM-SHA-512,
OAUTHBEARER) and each connection is a login: a SaslHandshake (v0 or v1) and up to three
tokens (in SaslAuthenticate v0-v2, or bare after a v0 handshake), each mutated or not;
the transactional client logs in with SCRAM-SHA-512.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol import messages
from protocol.apis import KAFKA_4_0, ApiTable, flexible_from
from protocol.framing import encode_request_frame
from protocol.record_codec import NewRecord, build_batch
from broker.testing import BrokerProcess

TOPIC, TXN_TOPIC = "fuzz", "fuzz-txn"
LEFT_OUT = {19, 20, 21, 37}
_HEADER = 14  # CreateTopics, DeleteTopics, DeleteRecords, CreatePartitions
_EXTREMES = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff", b"\x7f\xff",
             b"\xff\xff\xff\xff\x0f", b"\x00\x00\x00\x00"]


def _templates() -> dict[int, dict]:
    batch = bytes(build_batch([NewRecord(b"k", b"v" * 20, (), 0)] * 3))
    partitions = [{"index": 0, "records": batch}]
    return {
        0: {"acks": 1, "timeout_ms": 100, "topic_data": [{"name": TOPIC, "partition_data": partitions}]},
        1: {"max_wait_ms": 50, "max_bytes": 1 << 16, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}]}]},
        2: {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        3: {"topics": [{"name": TOPIC}]},
        8: {"group_id": "fuzz-g", "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0,
                                                                               "committed_offset": 1}]}]},
        9: {"group_id": "fuzz-g", "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        10: {"key": "fuzz-tx", "key_type": 1, "coordinator_keys": ["fuzz-tx"]},
        11: {"group_id": "fuzz-g", "session_timeout_ms": 6000, "rebalance_timeout_ms": 100, "member_id": "",
             "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
        22: {"transactional_id": "fuzz-tx", "transaction_timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1},
        24: {"transactional_id": "fuzz-tx", "producer_id": 0, "producer_epoch": 0,
             "topics": [{"name": TOPIC, "partitions": [0]}]},
        25: {"transactional_id": "fuzz-tx", "producer_id": 0, "producer_epoch": 0, "group_id": "fuzz-g"},
        26: {"transactional_id": "fuzz-tx", "producer_id": 0, "producer_epoch": 0, "committed": True},
        28: {"transactional_id": "fuzz-tx", "group_id": "fuzz-g", "producer_id": 0, "producer_epoch": 0,
             "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
    }


def corpus() -> list[bytes]:
    """One valid frame (without its size prefix) per API and accepted version."""
    table = ApiTable(set(KAFKA_4_0))
    templates = _templates()
    frames = []
    for key, r in table.ranges.items():
        if key in LEFT_OUT:
            continue
        for version in range(r.accepted_min, r.max + 1):
            try:
                body = messages.encode(messages.build_request(key, version, templates.get(key, {})))
            except (KeyError, TypeError, ValueError):
                body = messages.encode(messages.build_request(key, version, {}))
            frames.append(encode_request_frame(key, version, 1, "fuzz", r.flexible(version), body)[4:])
    return frames


def sasl_corpus() -> tuple[list[bytes], list[bytes]]:
    """(handshakes, tokens): valid frames (without their size prefix) of a login's steps;
    the tokens also bare, as they travel after a v0 handshake."""
    from tests.sasl_broker import MECHANISMS, token_for
    from tests.sasl_tokens import ScramClient, oauthbearer, plain

    def frame(key: int, version: int, body: dict) -> bytes:
        encoded = messages.encode(messages.build_request(key, version, body))
        return encode_request_frame(key, version, 7, "fuzz", version >= flexible_from(key), encoded)[4:]

    tokens = [plain("alice", "alice-secret"), ScramClient("SCRAM-SHA-512", "alice", "x").first(),
              oauthbearer(token_for("alice")), b"\x01"]
    handshakes = [frame(17, v, {"mechanism": m}) for v in (0, 1) for m in MECHANISMS]
    return handshakes, [frame(36, v, {"auth_bytes": t}) for v in (0, 1, 2) for t in tokens] + tokens


def mutate(rng: random.Random, frame: bytes) -> bytes:
    if rng.random() < 0.05:
        return rng.randbytes(rng.randint(0, 200))
    out = bytearray(frame)
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, 4)):
        if not out:
            out += rng.randbytes(rng.randint(1, 8))
            continue
        # mostly past the header (api key, version, correlation id, "fuzz"): a broken header
        # only ever closes the connection, a broken body reaches the decoders and handlers
        at = rng.randrange(len(out)) if rng.random() < 0.15 or len(out) <= _HEADER else rng.randrange(_HEADER, len(out))
        kind = rng.randrange(5)
        if kind == 0:
            del out[max(at, 1):]
        elif kind == 1:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 2:
            pattern = rng.choice(_EXTREMES)
            out[at:at + len(pattern)] = pattern
        elif kind == 3:
            out[at:at] = rng.randbytes(rng.randint(1, 16))
        else:
            del out[at:at + rng.randint(1, 16)]
    return bytes(out)


class Stats:
    def __init__(self) -> None:
        self.frames = 0
        self.connections = 0
        self.closed_by_broker = 0
        self.abandoned = 0  # connections we gave up on: a request the broker may legitimately park


async def _worker(port: int, frames, rng: random.Random, stats: Stats, budget: list[int]) -> None:
    """One frame at a time, as a client would: each is read and handled by the broker
    before the next goes, so every frame counted is a frame the broker processed.
    ``frames``: a list to pick each frame from, or for SASL logins (handshakes, tokens)."""
    while budget[0] > 0:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        stats.connections += 1
        if isinstance(frames, tuple):  # a login: a handshake, then tokens; mutated 70% of the time
            handshakes, tokens = frames
            login = [rng.choice(handshakes)] + [rng.choice(tokens) for _ in range(rng.randint(1, 3))]
            sequence = iter([mutate(rng, f) if rng.random() < 0.7 else f for f in login])
        else:
            sequence = None
        try:
            while budget[0] > 0:
                if sequence is None:
                    body = mutate(rng, rng.choice(frames))
                elif (body := next(sequence, None)) is None:
                    break
                budget[0] -= 1
                stats.frames += 1
                writer.write(len(body).to_bytes(4, "big", signed=True) + body)
                try:
                    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 2.0), "big")
                    await asyncio.wait_for(reader.readexactly(size), 2.0)
                except asyncio.TimeoutError:
                    # no answer: an acks=0 produce, or a Fetch/JoinGroup waiting as long as it asked
                    stats.abandoned += 1
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            stats.closed_by_broker += 1
        writer.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class TransactionalClient(threading.Thread):
    def __init__(self, bootstrap: str, settings: dict | None = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.settings = settings or {}
        self.stop = threading.Event()
        self.committed = 0
        self.records = 0
        self.errors: list[str] = []

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "fuzz-client", "linger.ms": 5,
                      **self.settings})
        try:
            p.init_transactions(30)
            while not self.stop.is_set():
                p.begin_transaction()
                for i in range(5):
                    p.produce(TXN_TOPIC, b"%d-%d" % (self.committed, i), partition=i % 2)
                p.commit_transaction(30)
                self.committed += 1
                self.records += 5
        except KafkaException as e:
            self.errors.append(str(e))
        finally:
            p.flush(10)


def _read_committed_count(bootstrap: str, settings: dict) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-check", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest", **settings})
    c.assign([TopicPartition(TXN_TOPIC, p, 0) for p in range(2)])
    ends, count, deadline = set(), 0, time.monotonic() + 60
    while len(ends) < 2 and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                count += 1
            elif m.error().code() == -191:
                ends.add(m.partition())
    c.close()
    return count


def run(frames_total: int, seed: int, connections: int, workdir: Path, sasl: bool = False) -> tuple[int, str]:
    if sasl:
        from tests.sasl_broker import SaslBroker, confluent_settings

        broker = SaslBroker(workdir, **{"auto.create.topics.enable": "false"})
        settings = confluent_settings(broker.bootstrap, "SCRAM-SHA-512", "alice")
        del settings["bootstrap.servers"]
    else:
        broker = BrokerProcess(workdir / "data", {"auto.create.topics.enable": "false"}).start(60)
        settings = {}
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **settings})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(TXN_TOPIC, 2, 1)]).values():
            f.result(30)
        client = TransactionalClient(broker.bootstrap, settings)
        client.start()
        while client.committed < 5 and client.is_alive():
            time.sleep(0.1)
        rss_before = _rss_kb(broker.proc.pid)
        stats = Stats()
        rng = random.Random(seed)
        frames = sasl_corpus() if sasl else corpus()
        budget = [frames_total]
        started = time.monotonic()

        async def progress() -> None:
            while True:
                await asyncio.sleep(60)
                print(f"fuzz: {stats.frames} frames, {stats.closed_by_broker} connections closed by the broker, "
                      f"broker RSS {_rss_kb(broker.proc.pid)} kB, client transactions {client.committed}",
                      file=sys.stderr, flush=True)

        async def main() -> None:
            reporter = asyncio.create_task(progress())
            await asyncio.gather(*(_worker(broker.port, frames, random.Random(rng.random()), stats, budget)
                                   for _ in range(connections)))
            reporter.cancel()

        asyncio.run(main())
        elapsed = time.monotonic() - started
        time.sleep(1)
        rss_after = _rss_kb(broker.proc.pid)
        alive = broker.alive
        client.stop.set()
        client.join(60)
        readable = _read_committed_count(broker.bootstrap, settings) if alive else -1
        log_text = broker.log_text()
        tracebacks = log_text.count("Traceback")
        closing_lines = log_text.count("closing connection")
        ok = (alive and not tracebacks and not client.errors and readable == client.records
              and stats.frames >= frames_total)
        summary = (
            f"fuzz{' (SASL logins)' if sasl else ''}: seed={seed} frames={stats.frames} in {elapsed:.0f} s connections={stats.connections} "
            f"closed_by_broker={stats.closed_by_broker} (log lines {closing_lines}) abandoned={stats.abandoned} "
            f"broker_rss_kb before={rss_before} after={rss_after} broker_alive={alive} tracebacks={tracebacks} "
            f"client_transactions={client.committed} client_errors={len(client.errors)} "
            f"records committed={client.records} readable={readable} {'OK' if ok else 'FAILED'}"
        )
        for e in client.errors:
            print(f"client error: {e}", file=sys.stderr)
        return (0 if ok else 1), summary
    finally:
        if broker.alive:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torture.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--sasl", action="store_true", help="fuzz logins on a SASL_PLAINTEXT listener")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="eosbroker-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    code, summary = run(args.frames, seed, args.connections, workdir, args.sasl)
    print(summary, flush=True)
    if code == 0 and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif code != 0:
        print(f"fuzz: data and broker log kept in {workdir}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
