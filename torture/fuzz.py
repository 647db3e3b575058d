"""Mutated frames against a live broker while a transactional client keeps working.

    python -m torture.fuzz --frames 1000000 [--seed N] [--connections 8] [--nodes 3]

Frames start as valid requests of every API and version the broker accepts and are
then truncated, bit-flipped, spliced, given huge or negative counts and lengths, or
replaced by garbage. Meanwhile a confluent-kafka transactional producer commits
transactions. At the end the run checks that the broker is alive, logged no stack
trace, the client saw no error and every committed record is readable, and prints one
summary line (frames sent, connections the broker closed, broker RSS before/after).

With --nodes N (N > 1) the frames go to every node, and cluster faults are mixed among
them (seeded, one every so many frames): a node stopped, killed or paused and brought
back, a link between two nodes cut, lossy or slow and healed. After each fault is
undone, every node must answer ApiVersions and Metadata well-formed. The client aborts
a transaction a fault broke (as an application does); what it committed must be
readable, exactly once.

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

from protocol import answer_wire
from protocol.request_wire import KAFKA_4_0, ApiTable, flexible_from, encode_request_frame
from protocol.records import NewRecord, build_batch
from broker.wire.client import KafkaConnection
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
        24: {"v3_and_below_transactional_id": "fuzz-tx", "v3_and_below_producer_id": 0,
             "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
             "transactions": [{"transactional_id": "fuzz-tx", "producer_id": 0, "producer_epoch": 0,
                               "verify_only": True, "topics": [{"name": TOPIC, "partitions": [0]}]}]},
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
        answer_wire.check_request_names(key, templates.get(key, {}))  # a misspelt template fails here
        for version in range(r.accepted_min, r.max + 1):
            try:
                body = answer_wire.encode(answer_wire.build_request(key, version, templates.get(key, {})))
            except (KeyError, TypeError, ValueError):
                body = answer_wire.encode(answer_wire.build_request(key, version, {}))
            frames.append(encode_request_frame(key, version, 1, "fuzz", r.flexible(version), body)[4:])
    return frames


def sasl_corpus() -> tuple[list[bytes], list[bytes]]:
    """(handshakes, tokens): valid frames (without their size prefix) of a login's steps;
    the tokens also bare, as they travel after a v0 handshake, and requests out of place."""
    from tests.sasl_broker import MECHANISMS, token_for
    from tests.sasl_tokens import ScramClient, oauthbearer, plain

    def frame(key: int, version: int, body: dict) -> bytes:
        encoded = answer_wire.encode(answer_wire.build_request(key, version, body))
        return encode_request_frame(key, version, 7, "fuzz", version >= flexible_from(key), encoded)[4:]

    tokens = [plain("alice", "alice-secret"), ScramClient("SCRAM-SHA-512", "alice", "x").first(),
              oauthbearer(token_for("alice")), b"\x01"]
    handshakes = [frame(17, v, {"mechanism": m}) for v in (0, 1) for m in MECHANISMS]
    # requests that have no place in a login (answered ILLEGAL_SASL_STATE or closed)
    strays = [frame(18, 3, {"client_software_name": "fuzz", "client_software_version": "1"}),
              frame(3, 12, {"topics": None}), frame(10, 4, {"key_type": 1, "coordinator_keys": ["fuzz-tx"]}),
              frame(0, 9, _templates()[0])]
    return handshakes, [frame(36, v, {"auth_bytes": t}) for v in (0, 1, 2) for t in tokens] + tokens + strays


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
        self.faults = 0
        self.checks = 0  # times every node was asked ApiVersions and Metadata after a fault
        self.malformed: list[str] = []


async def _worker(ports: list[int], frames, rng: random.Random, stats: Stats,
                  budget: list[int], faults: "ClusterFaults | None" = None) -> None:
    """One frame at a time, as a client would: each is read and handled by the broker
    before the next goes, so every frame counted is a frame the broker processed.
    ``frames``: a list to pick each frame from, or for SASL logins (handshakes, tokens)."""
    while budget[0] > 0:
        if faults is not None:
            await faults.gate(stats.frames)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", rng.choice(ports))
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
                if faults is not None and not faults.open(stats.frames):
                    break  # a fault is due: wait for it at the gate, then reconnect
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


# Cluster faults, each undone before the next: (what, how it is undone).
_NODE_FAULTS = (("node_stop", "node_start"), ("node_kill", "node_start"), ("node_pause", "node_resume"))
_LINK_FAULTS = ({"cut": True}, {"loss": 1.0}, {"loss": 0.3}, {"delay_ms": 300})


class ClusterFaults:
    """Seeded faults against a multi-node broker's control API, one every ``every``
    frames: the frames stop at the gate until it is in place, flow while it lasts, and
    after it is undone every node must answer well-formed."""

    def __init__(self, broker, rng: random.Random, every: int, stats: Stats) -> None:
        self.broker = broker
        self.control = broker.control()
        self.rng = rng
        self.every = every
        self.stats = stats
        self.next_at = every
        self._in_place = asyncio.Event()
        self._in_place.set()

    def open(self, frames_sent: int) -> bool:
        """False once the next fault is due: no frame goes until it is in place."""
        if frames_sent >= self.next_at:
            self._in_place.clear()
        return self._in_place.is_set()

    async def gate(self, frames_sent: int) -> None:
        self.open(frames_sent)
        await self._in_place.wait()

    async def run(self, total: int) -> None:
        while self.next_at < total:
            while self._in_place.is_set():  # until a worker reaches the fault's frame
                await asyncio.sleep(0.01)
            undo = await asyncio.to_thread(self.inject)
            self.next_at += self.every
            self._in_place.set()
            await asyncio.sleep(self.rng.uniform(0.2, 2.0))  # frames keep arriving meanwhile
            await asyncio.to_thread(undo)
            self.stats.faults += 1
            await self.check()

    def inject(self):
        """Puts one fault in place; returns what undoes it."""
        nodes = sorted(self.broker.node_ports)
        if self.rng.random() < 0.5:
            fault, undo = self.rng.choice(_NODE_FAULTS)
            node = self.rng.choice(nodes)
            self.control.call(fault, node_id=node)
            return lambda: self.control.call(undo, node_id=node)
        source, target = self.rng.sample(nodes, 2)
        link = self.rng.choice(_LINK_FAULTS)
        if link.get("cut"):
            self.control.network_cut(source=source, target=target, both=True)
        else:
            seed = {"seed": self.rng.randrange(1 << 16)} if "loss" in link else {}
            self.control.network_link(source=source, target=target, both=True, **link, **seed)
        return self.control.network_heal

    async def check(self) -> None:
        """Every node answers ApiVersions and Metadata, decoded whole, naming itself."""
        self.stats.checks += 1
        for node_id, port in sorted(self.broker.node_ports.items()):
            problem = await _answers_well_formed(node_id, port)
            if problem is not None:
                self.stats.malformed.append(problem)


async def _answers_well_formed(node_id: int, port: int) -> str | None:
    try:
        async with await KafkaConnection.connect("127.0.0.1", port, client_id="fuzz-check") as conn:
            versions = await asyncio.wait_for(conn.request(18, 3, {
                "client_software_name": "fuzz", "client_software_version": "1"}), 30)
            metadata = await asyncio.wait_for(conn.request(3, 12, {
                "topics": None, "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}), 30)
    except Exception as e:  # noqa: BLE001 - any failure to answer, or to decode the answer, is the finding
        return f"node {node_id}: {type(e).__name__}: {e}"
    if versions.error_code != 0 or not versions.api_keys:
        return f"node {node_id}: ApiVersions answered {versions.error_code}"
    if node_id not in {b.node_id for b in metadata.brokers}:
        return f"node {node_id}: Metadata lists brokers {[b.node_id for b in metadata.brokers]}"
    return None


class TransactionalClient(threading.Thread):
    def __init__(self, bootstrap: str, settings: dict | None = None, abort_broken: bool = False) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.settings = settings or {}
        self.abort_broken = abort_broken  # a cluster's faults may break a transaction: abort it, go on
        self.stop = threading.Event()
        self.committed = 0
        self.aborted = 0
        self.records = 0
        self.errors: list[str] = []

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "fuzz-client", "linger.ms": 5,
                      **self.settings})
        try:
            p.init_transactions(60)
            while not self.stop.is_set():
                p.begin_transaction()
                for i in range(5):
                    p.produce(TXN_TOPIC, b"%d-%d-%d" % (self.committed, self.aborted, i), partition=i % 2)
                try:
                    self._commit(p)
                except KafkaException as e:
                    if not (self.abort_broken and e.args[0].txn_requires_abort()):
                        raise
                    p.abort_transaction(60)
                    self.aborted += 1
                    continue
                self.committed += 1
                self.records += 5
        except KafkaException as e:
            self.errors.append(str(e))
        finally:
            p.flush(10)

    def _commit(self, p: Producer) -> None:
        for _ in range(10):
            try:
                p.commit_transaction(60)
                return
            except KafkaException as e:
                if not (self.abort_broken and e.args[0].retriable()):
                    raise
        p.commit_transaction(60)


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


def run(frames_total: int, seed: int, connections: int, workdir: Path, sasl: bool = False,
        nodes: int = 1) -> tuple[int, str]:
    if sasl:
        from tests.sasl_broker import SaslBroker, confluent_settings

        broker = SaslBroker(workdir, **{"auto.create.topics.enable": "false"})
        settings = confluent_settings(broker.bootstrap, "SCRAM-SHA-512", "alice")
        del settings["bootstrap.servers"]
        ports = [broker.port]
    else:
        broker = BrokerProcess(workdir / "data", {"auto.create.topics.enable": "false"}, nodes=nodes,
                               admin=nodes > 1).start(60)
        settings = {}
        ports = list(broker.node_ports.values())
    try:
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
        replicas = min(nodes, 3)
        for f in admin.create_topics([NewTopic(TOPIC, 2, replicas), NewTopic(TXN_TOPIC, 2, replicas)]).values():
            f.result(30)
        client = TransactionalClient(bootstrap, settings, abort_broken=nodes > 1)
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

        faults = ClusterFaults(broker, random.Random(rng.random()), max(200, frames_total // 40), stats) \
            if nodes > 1 else None

        async def main() -> None:
            reporter = asyncio.create_task(progress())
            injecting = [faults.run(frames_total)] if faults is not None else []
            await asyncio.gather(*(_worker(ports, frames, random.Random(rng.random()), stats, budget, faults)
                                   for _ in range(connections)), *injecting)
            reporter.cancel()
            if faults is not None:
                await faults.check()  # every fault undone: each node answers

        asyncio.run(main())
        elapsed = time.monotonic() - started
        time.sleep(1)
        rss_after = _rss_kb(broker.proc.pid)
        alive = broker.alive
        client.stop.set()
        client.join(60)
        readable = _read_committed_count(bootstrap, settings) if alive else -1
        log_text = broker.log_text()
        tracebacks = log_text.count("Traceback")
        closing_lines = log_text.count("closing connection")
        ok = (alive and not tracebacks and not client.errors and readable == client.records
              and stats.frames >= frames_total and not stats.malformed)
        cluster = (f"nodes={nodes} faults={stats.faults} checks={stats.checks} malformed={len(stats.malformed)} "
                   f"client_aborted={client.aborted} " if nodes > 1 else "")
        summary = (
            f"fuzz{' (SASL logins)' if sasl else ''}: seed={seed} {cluster}frames={stats.frames} in {elapsed:.0f} s connections={stats.connections} "
            f"closed_by_broker={stats.closed_by_broker} (log lines {closing_lines}) abandoned={stats.abandoned} "
            f"broker_rss_kb before={rss_before} after={rss_after} broker_alive={alive} tracebacks={tracebacks} "
            f"client_transactions={client.committed} client_errors={len(client.errors)} "
            f"records committed={client.records} readable={readable} {'OK' if ok else 'FAILED'}"
        )
        for e in client.errors:
            print(f"client error: {e}", file=sys.stderr)
        for problem in stats.malformed:
            print(f"malformed answer: {problem}", file=sys.stderr)
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
    parser.add_argument("--nodes", type=int, default=1,
                        help="nodes of the broker; more than one mixes cluster faults among the frames")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="eosbroker-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.sasl and args.nodes > 1:
        parser.error("--sasl fuzzes one node's logins: leave --nodes out")
    code, summary = run(args.frames, seed, args.connections, workdir, args.sasl, args.nodes)
    print(summary, flush=True)
    if code == 0 and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif code != 0:
        print(f"fuzz: data and broker log kept in {workdir}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
