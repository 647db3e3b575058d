"""The torture run: load, kill -9 at seeded random points, restart, then check everything.

    python -m torture --cycles 200 [--seed N] [--nodes 3] [--workdir DIR]

Each cycle is one fault at a seeded random point: the broker process killed -9 and
restarted, or (through the control API) responses lost for a while (a drop_response or
close_after rule on one of the exactly-once APIs); with several nodes also a node killed,
paused (fenced when the pause outlasts broker.session.timeout.ms), or its links to the
other nodes cut, then brought back; and faults aimed at a transaction coordinator: its
node stopped or killed while a marker it sent is held in flight and InitProducerId
requests pour in, paused beyond the session timeout, its links to a partition leader
cut, or the coordinator moved.

After the clients stop, the coordinators' view of every transactional id is taken, the
broker stopped, the logs read from disk, the broker restarted and asked again, stopped,
and the logs read again: the checker also compares the producer identities, the
transaction log's decisions and the markers, and the two views.

Prints one summary line and exits 1 on any anomaly, on a broker that failed to
restart, or on a Traceback in the broker's log.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing import BrokerProcess
from coordinator.partitioning import partition_for
from torture import logscan, readback
from torture.checker import ReadBack, check
from torture.clients import TXN_TIMEOUT_MS, CtpWorker, IdempotentWriter, TransactionalWriter
from torture.history import HistoryLog, read_histories

log = logging.getLogger("torture")

TXN_TOPICS = {"torture-tx-a": 3, "torture-tx-b": 3}
IDEM_TOPIC, IDEM_PARTITIONS = "torture-idem", 2
CTP_TOPIC, CTP_PARTITIONS = "torture-ctp-out", 2
CTP_GROUP = "torture-ctp"
BROKER_SETTINGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
    "group.initial.rebalance.delay.ms": 0,
    # Small segments: they roll during the run, and recovery after kill -9 validates
    # only active segments, so restarts stay quick however long the run.
    "log.segment.bytes": 1 << 20,
    # Except __transaction_state: one active segment the cleaner leaves alone, so the
    # checker finds every transaction's decision there (a compacted partition's ids are
    # left out of the marker check).
    "transaction.state.log.segment.bytes": 1 << 27,
    "offsets.topic.segment.bytes": 1 << 20,
    # Pauses of 0.5-5 s: some end before the session timeout, some after (fenced).
    "broker.session.timeout.ms": 3000,
}
# The APIs whose lost responses the clients must survive without a duplicate or a loss:
# Produce, Fetch, FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
# EndTxn, TxnOffsetCommit, OffsetCommit.
LOSABLE_APIS = (0, 1, 10, 22, 24, 25, 26, 28, 8)
# AddPartitionsToTxn and AddOffsetsToTxn lose their answer only with the connection:
# librdkafka counts these requests per transaction and asserts (aborting the process,
# rdkafka_txnmgr.c txn_req_cnt > 0) when one fails after its transaction ended, which
# only a broker that answers later requests on the connection but not this one can
# cause; a Kafka broker answers each connection's requests in order. Produce too: a
# dropped answer while later batches on the connection are answered makes librdkafka's
# idempotent producer time the request out and bump its epoch, then resend the batch
# under the new epoch from sequence 0, which no broker can tell from new records.
CLOSE_ONLY_APIS = (0, 24, 25)
START_TIMEOUT_S = 120.0  # recovery on a loaded machine


def _create_topics(bootstrap: str, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, n, replication)
              for t, n in {**TXN_TOPICS, IDEM_TOPIC: IDEM_PARTITIONS, CTP_TOPIC: CTP_PARTITIONS}.items()]
    for f in admin.create_topics(topics).values():
        f.result(20)


def _all_partitions() -> list[tuple[str, int]]:
    out = [(t, p) for t, n in TXN_TOPICS.items() for p in range(n)]
    out += [(IDEM_TOPIC, p) for p in range(IDEM_PARTITIONS)]
    out += [(CTP_TOPIC, p) for p in range(CTP_PARTITIONS)]
    return out


class Run:
    def __init__(self, workdir: Path, cycles: int, seed: int, producers: int, nodes: int = 1) -> None:
        self.workdir = workdir
        self.cycles = cycles
        self.seed = seed
        self.producers = producers
        self.nodes = nodes
        self.rng = random.Random(seed)
        self.broker = BrokerProcess(workdir / "data", BROKER_SETTINGS, nodes=nodes, admin=True)
        self.node_faults = 0
        self.lost_response_cycles = 0
        self.responses_lost = 0
        self.link_cuts = 0
        self.stop = threading.Event()
        self.clients = []
        self.restart_failures = 0
        self.kills = 0
        self.departures: list[float] = []  # when a node left the cluster (monotonic)
        self.coordinator_faults: dict[str, int] = {}
        self.burst_requests = 0  # InitProducerId sent while coordinators stopped
        self.init_answers: list[tuple[str, int, int]] = []  # the bursts' successful answers

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.broker.node_ports.values())

    def start_clients(self) -> None:
        txn_partitions = [(t, p) for t, n in TXN_TOPICS.items() for p in range(n)]
        bootstrap = self.bootstrap
        for k in range(self.producers):
            name = f"t{k}"
            self.clients.append(TransactionalWriter(name, bootstrap, self._history(name), self.rng.random(), self.stop,
                                                    txn_partitions))
        self.clients.append(IdempotentWriter("i0", bootstrap, self._history("i0"), self.rng.random(), self.stop,
                                             IDEM_TOPIC, IDEM_PARTITIONS))
        self.clients.append(CtpWorker("c0", bootstrap, self._history("c0"), self.rng.random(), self.stop,
                                      IDEM_TOPIC, CTP_TOPIC, CTP_PARTITIONS, CTP_GROUP))
        for c in self.clients:
            c.start()

    def _history(self, name: str) -> HistoryLog:
        return HistoryLog(self.workdir / f"history-{name}.jsonl")

    def _progress(self) -> int:
        return sum(c.progress for c in self.clients if not isinstance(c, IdempotentWriter))

    def wait_for_progress(self, outcomes: int = 3, timeout_s: float = 60.0) -> None:
        """Until the transactional clients have logged a few more outcomes: every kill
        then lands on a broker that is serving load, not on one still recovering."""
        target = self._progress() + outcomes
        deadline = time.monotonic() + timeout_s
        while self._progress() < target and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        for attempt in range(3):
            try:
                self.broker.start(START_TIMEOUT_S)
                return
            except RuntimeError as e:
                self.restart_failures += 1
                log.error("restart failed (attempt %d): %s", attempt + 1, e)
                time.sleep(1)
        raise RuntimeError("the broker does not restart")

    def _left_before(self, started: float, given_up: float) -> bool:
        """Whether a node left the cluster in the minute before a client call, or during
        it: what makes librdkafka forget a broker it may still hold as a coordinator."""
        return any(started - 60.0 <= t <= given_up for t in self.departures)

    @property
    def cycles_done(self) -> int:
        return self.kills + self.node_faults + self.lost_response_cycles + self.link_cuts + \
            sum(self.coordinator_faults.values())

    @property
    def transactional_ids(self) -> list[str]:
        return [f"torture-{c.client_name}" for c in self.clients if not isinstance(c, IdempotentWriter)]

    def cycle(self) -> None:
        self.wait_for_progress()
        time.sleep(self.rng.uniform(0.0, 1.5))
        roll = self.rng.random()
        if roll < 0.2:
            self.lose_responses()
        elif self.nodes > 1 and roll < 0.45:
            self.node_fault()
        elif self.nodes > 1 and roll < 0.85:
            self.coordinator_fault()
        else:
            self.broker.kill()
            self.departures.append(time.monotonic())
            self.kills += 1
            time.sleep(self.rng.uniform(0.0, 0.3))
            self.restart()

    def lose_responses(self) -> None:
        """A rule loses the responses to one API (processed, never answered, or the
        connection closed after processing) a few times, until the clients have moved on."""
        control = self.broker.control()
        action = self.rng.choice(["drop_response", "close_after"])
        api_key = self.rng.choice(LOSABLE_APIS)
        if api_key in CLOSE_ONLY_APIS:
            action = "close_after"
        rule = control.fault_add(action=action, api_key=api_key, skip=self.rng.randint(0, 2),
                                 count=self.rng.randint(1, 3))
        deadline = time.monotonic() + 20.0  # the rarer APIs (FindCoordinator) may not come up
        while time.monotonic() < deadline and self._fired(control, rule["id"]) < rule["count"]:
            time.sleep(0.1)
        self.wait_for_progress(outcomes=2, timeout_s=30.0)
        self.responses_lost += control.fault_remove(rule_id=rule["id"])["fired"]
        self.lost_response_cycles += 1

    @staticmethod
    def _fired(control, rule_id: int) -> int:
        return next((r["fired"] for r in control.faults()["rules"] if r["id"] == rule_id), 0)

    def node_fault(self) -> None:
        """With several nodes: kill, pause or cut off one node, then bring it back."""
        node = self.rng.randint(1, self.nodes)
        control = self.broker.control()
        kind = self.rng.choice(["kill", "pause", "cut"])
        if kind != "cut":
            self.departures.append(time.monotonic())
        if kind == "kill":
            control.node_kill(node_id=node)
            time.sleep(self.rng.uniform(0.5, 2.0))
            control.node_start(node_id=node)
        elif kind == "pause":  # beyond broker.session.timeout.ms the node is fenced meanwhile
            control.node_pause(node_id=node)
            time.sleep(self.rng.uniform(0.5, 5.0))
            control.node_resume(node_id=node)
        else:  # markers and other node-to-node requests from it fail until healed
            others = [n for n in range(1, self.nodes + 1) if n != node]
            target = self.rng.choice([None, *others])
            control.network_cut(source=node, **({} if target is None else {"target": target}))
            time.sleep(self.rng.uniform(0.5, 3.0))
            control.network_heal()
            self.link_cuts += 1
            return
        self.node_faults += 1

    def _coordinator_of(self, control, transactional_id: str) -> int:
        coordinators = [c for c in control.cluster()["coordinators"] if c["kind"] == "transaction"]
        partition = partition_for(transactional_id, len(coordinators))
        return next(c["node_id"] for c in coordinators if c["partition"] == partition)

    def coordinator_fault(self) -> None:
        """A fault aimed at the coordinator of one client's transactional id."""
        control = self.broker.control()
        tid = self.rng.choice(self.transactional_ids)
        coordinator = self._coordinator_of(control, tid)
        others = [n for n in range(1, self.nodes + 1) if n != coordinator]
        kind = self.rng.choice(["stop_in_flight", "kill_in_flight", "long_pause", "leader_cut", "move"])
        if kind in ("stop_in_flight", "kill_in_flight"):
            # a marker it sends is held at the partition leader: in flight when its node goes,
            # while other connections ask it for producer ids
            rule = control.fault_add(action="hold", api_key=27, client_id=f"eosbroker-node-{coordinator}", count=1)
            burst = InitProducerIdBurst(self.broker.node_ports, self._ids_coordinated_by(control, coordinator))
            burst.start()
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and not self._fired(control, rule["id"]):
                time.sleep(0.05)
            self.departures.append(time.monotonic())
            if kind == "stop_in_flight":
                control.node_stop(node_id=coordinator)
            else:
                control.node_kill(node_id=coordinator)
            time.sleep(self.rng.uniform(0.1, 1.0))
            control.fault_remove(rule_id=rule["id"])  # the held marker arrives after its sender went
            time.sleep(self.rng.uniform(0.2, 1.5))
            burst.finish()
            self.burst_requests += burst.sent
            self.init_answers += burst.answers
            control.node_start(node_id=coordinator)
        elif kind == "long_pause":  # beyond broker.session.timeout.ms: fenced meanwhile
            session_s = BROKER_SETTINGS["broker.session.timeout.ms"] / 1000
            self.departures.append(time.monotonic())
            control.node_pause(node_id=coordinator)
            time.sleep(self.rng.uniform(1.3, 2.0) * session_s)
            control.node_resume(node_id=coordinator)
        elif kind == "leader_cut":  # a partition leader and the coordinator cannot reach each other
            leaders = sorted({p["leader"] for p in control.cluster()["partitions"]
                              if p["topic"] in TXN_TOPICS and p["leader"] != coordinator})
            leader = self.rng.choice(leaders or others)
            control.network_cut(source=leader, target=coordinator, both=True)
            time.sleep(self.rng.uniform(0.5, 3.0))
            control.network_heal(source=leader, target=coordinator, both=True)
        else:
            try:
                control.coordinator_move(to=self.rng.choice(others), transactional_id=tid)
            except Exception as e:  # the chosen node is down (a fault of this cycle's predecessors)
                log.warning("coordinator move of %s refused: %s", tid, e)
        self.coordinator_faults[kind] = self.coordinator_faults.get(kind, 0) + 1

    def _ids_coordinated_by(self, control, node: int, count: int = 5) -> list[str]:
        """Transactional ids (of no client) whose coordinator is ``node`` now."""
        coordinators = [c for c in control.cluster()["coordinators"] if c["kind"] == "transaction"]
        led = {c["partition"] for c in coordinators if c["node_id"] == node}
        names = (f"torture-burst-{n}" for n in range(100000))
        return [tid for tid in names if partition_for(tid, len(coordinators)) in led][:count] if led else []

    def check_logs_across_restart(self) -> tuple[list, dict, dict]:
        """The coordinators' view, the logs on disk, a restart, the view again and the logs
        again; the broker is stopped at the end."""
        ids = self.transactional_ids
        before = readback.settled_transactions(self.broker.node_ports, ids)
        self.broker.stop()
        topics = [*TXN_TOPICS, IDEM_TOPIC, CTP_TOPIC]
        logs = [logscan.scan(self.broker.data_dir, topics)]
        self.restart()
        after = readback.describe_transactions(self.broker.node_ports, list(before))
        self.broker.stop()
        logs.append(logscan.scan(self.broker.data_dir, topics))
        return logs, before, after

    def execute(self) -> int:
        self.broker.start(START_TIMEOUT_S)
        _create_topics(self.bootstrap, min(self.nodes, 3))
        self.start_clients()
        try:
            for n in range(self.cycles):
                self.cycle()
                if (n + 1) % 10 == 0:
                    log.info("cycle %d/%d", n + 1, self.cycles)
            self.wait_for_progress(outcomes=10)
        finally:
            self.stop.set()
            for c in self.clients:
                c.join(120)
        hung = [c.client_name for c in self.clients if c.is_alive()]
        frames = sys._current_frames()
        for c in self.clients:
            if c.is_alive():
                print(f"client {c.client_name} did not stop:\n" + "".join(traceback.format_stack(frames[c.ident])),
                      file=sys.stderr)
        failed = [f"{c.client_name}: {c.failure!r}" for c in self.clients if c.failure is not None]
        wedged = [(c.client_name, started, given_up) for c in self.clients for started, given_up in c.wedged]
        failed += [f"{name}: a call wedged with no node leaving in the minute before it"
                   for name, started, given_up in wedged if not self._left_before(started, given_up)]
        partitions = _all_partitions()
        bootstrap = self.bootstrap
        ends = readback.wait_stable(bootstrap, partitions, timeout_s=3 * TXN_TIMEOUT_MS / 1000)
        read = ReadBack(
            committed=readback.read_all(bootstrap, partitions, "read_committed"),
            uncommitted=readback.read_all(bootstrap, partitions, "read_uncommitted"),
            ends=ends,
            ctp_source_topic=IDEM_TOPIC,
            ctp_committed=readback.group_offsets(bootstrap, CTP_GROUP, IDEM_TOPIC, IDEM_PARTITIONS),
            init_answers=self.init_answers,
        )
        read.logs, read.coordinators_before, read.coordinators_after = self.check_logs_across_restart()
        report = check(read_histories(sorted(self.workdir.glob("history-*.jsonl"))), read)
        tracebacks = self.broker.log_text().count("Traceback")
        for line in report.details:
            print(line, file=sys.stderr)
        for line in hung + failed:
            print(f"client problem: {line}", file=sys.stderr)
        fatal = sum(c.fatal_errors for c in self.clients)
        print(report.summary(f"torture: seed={self.seed} nodes={self.nodes} cycles={self.cycles_done} "
                              f"(process kill -9={self.kills} node kill/pause={self.node_faults} "
                              f"links cut={self.link_cuts} lost-response rules={self.lost_response_cycles} "
                              f"coordinator faults={sum(self.coordinator_faults.values())} "
                              f"({' '.join(f'{k}={v}' for k, v in sorted(self.coordinator_faults.items()))}) "
                              f"InitProducerId burst={self.burst_requests} "
                              f"responses lost={self.responses_lost})")
              + f" restart_failures={self.restart_failures} broker_tracebacks={tracebacks}"
              + f" client_fatal_errors={fatal} client_wedged_calls={len(wedged)}", flush=True)
        return 0 if report.ok and not (self.restart_failures or tracebacks or hung or failed) else 1


class InitProducerIdBurst(threading.Thread):
    """Connections asking for producer ids of a few transactional ids, over and over,
    until finished: the (producer id, epoch) pairs coordinators hand out while one of them
    stops are then in __transaction_state for the checker, and the successful answers
    (transactional id, producer id, epoch) in ``answers``."""

    CONNECTIONS = 15

    def __init__(self, node_ports: dict[int, int], transactional_ids: list[str]) -> None:
        super().__init__(name="torture-init-burst", daemon=True)
        self.ports = list(node_ports.values())
        self.ids = transactional_ids
        self.done = threading.Event()
        self.sent = 0
        self.answers: list[tuple[str, int, int]] = []

    def run(self) -> None:
        if self.ids:
            import asyncio

            asyncio.run(self._burst())

    async def _burst(self) -> None:
        import asyncio

        from broker.wire.client import KafkaConnection

        async def one(n: int) -> None:
            conn = None
            while not self.done.is_set():
                try:
                    if conn is None:  # a closed one fails its request, which drops it
                        conn = await KafkaConnection.connect("127.0.0.1", self.ports[n % len(self.ports)],
                                                             f"torture-burst-{n}")
                    self.sent += 1
                    tid = self.ids[n % len(self.ids)]
                    answer = await conn.request(22, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                                        "producer_id": -1, "producer_epoch": -1}, timeout=2.0)
                    if answer.error_code == 0:
                        self.answers.append((tid, answer.producer_id, answer.producer_epoch))
                except (OSError, ConnectionError, asyncio.TimeoutError):
                    if conn is not None:
                        await conn.close()
                    conn = None
                    await asyncio.sleep(0.05)
            if conn is not None:
                await conn.close()

        await asyncio.gather(*(one(n) for n in range(self.CONNECTIONS)))

    def finish(self) -> None:
        self.done.set()
        self.join(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torture", description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200, help="fault cycles (kill -9 / restart, lost responses, ...)")
    parser.add_argument("--seed", type=int, default=None, help="seed for kill points and client choices")
    parser.add_argument("--producers", type=int, default=3, help="transactional producers")
    parser.add_argument("--nodes", type=int, default=1, help="nodes in the broker process; with more than one, "
                        "cycles also kill, pause or cut off single nodes through the control API, and stop, "
                        "kill, pause, cut off or move a transaction coordinator")
    parser.add_argument("--workdir", type=Path, default=None, help="keep data, histories and logs here")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="eosbroker-torture-"))
    workdir.mkdir(parents=True, exist_ok=True)
    code = 1
    try:
        code = Run(workdir, args.cycles, seed, args.producers, args.nodes).execute()
        return code
    finally:
        if args.workdir is None and code == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        elif code != 0:
            print(f"torture: data, histories and broker log kept in {workdir}", file=sys.stderr)
