"""What a test does with a broker besides starting it: make topics, read them the way a
read_committed consumer does, and check that a topic holds exactly the expected records.

These go over the wire through the project's own blocking client, so they work the
same against a subprocess broker, an in-process one, or any Kafka-compatible cluster.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def free_port_block(count: int, attempts: int = 50) -> int:
    """The first of ``count`` consecutive ports free right now on HOST: a cluster's nodes
    listen on consecutive ports, and keep them across restarts (clients remember them)."""
    import socket

    for _ in range(attempts):
        held = []
        try:
            first = socket.socket()
            first.bind((HOST, 0))
            held.append(first)
            port = first.getsockname()[1]
            if port + count - 1 > 65535:
                continue
            for p in range(port + 1, port + count):
                s = socket.socket()
                held.append(s)
                s.bind((HOST, p))
            return port
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Polls ``predicate`` until it returns something true; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


def create_topic(bootstrap_servers: str, name: str | None = None, partitions: int = 1,
                 config: dict[str, object] | None = None, security=None) -> str:
    """Creates a topic (a fresh unique name when ``name`` is None) and returns its name."""
    from spark_client.wire import Client

    name = name or f"t-{uuid.uuid4().hex[:12]}"
    with Client(bootstrap_servers, client_id="eosbroker-pytest", security=security) as cluster:
        cluster.create_topic(name, partitions, {k: str(v) for k, v in (config or {}).items()})
    return name


def read_committed(bootstrap_servers: str, topic: str, timeout: float = 30.0, security=None) -> list[ConsumedRecord]:
    """Every record of ``topic`` a read_committed consumer sees now: from the log start
    to the last stable offset of each partition, partition by partition."""
    from spark_client.reading import read_partition
    from spark_client.wire import EARLIEST, LATEST, READ_COMMITTED, Client

    out: list[ConsumedRecord] = []
    with Client(bootstrap_servers, client_id="eosbroker-pytest", timeout=timeout, security=security) as cluster:
        partitions = range(cluster.partition_count(topic))
        starts = cluster.list_offsets(topic, partitions, EARLIEST, READ_COMMITTED)
        ends = cluster.list_offsets(topic, partitions, LATEST, READ_COMMITTED)
        for p in partitions:
            for r in read_partition(cluster, topic, p, starts[p], ends[p], READ_COMMITTED, timeout_s=timeout):
                out.append(ConsumedRecord(topic, p, r.offset, r.key, r.value, tuple(r.headers), r.timestamp))
    return out


def _as_bytes(x: object) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode()
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"records are bytes, str or None, not {type(x).__name__}")


def _expected_counter(expected: Iterable[object]) -> tuple[Counter, bool]:
    """Expected records as a multiset; True when they are (key, value) pairs."""
    items = list(expected)
    keyed = {isinstance(x, tuple) for x in items}
    if len(keyed) > 1:
        raise TypeError("expected records mix (key, value) pairs and bare values")
    with_keys = keyed == {True}
    if with_keys:
        return Counter((_as_bytes(k), _as_bytes(v)) for k, v in items), True
    return Counter(_as_bytes(v) for v in items), False


def topic_difference(records: Iterable[ConsumedRecord], expected: Iterable[object]) -> tuple[Counter, Counter]:
    """(missing, unexpected): what ``expected`` has that the records lack, and the reverse
    (a duplicate shows up as unexpected)."""
    want, with_keys = _expected_counter(expected)
    have = Counter((r.key, r.value) if with_keys else r.value for r in records)
    return want - have, have - want


def assert_topic_holds(bootstrap_servers: str, topic: str, expected: Iterable[object],
                       within: float = 0.0, security=None) -> list[ConsumedRecord]:
    """Asserts that a read_committed read of ``topic`` gives exactly ``expected`` as a
    multiset (order across partitions is not compared): nothing lost, nothing twice.

    ``expected`` holds values, or (key, value) pairs to compare keys too; str is taken
    as UTF-8. With ``within`` > 0 the read is repeated until it matches or that many
    seconds have passed (for pipelines still running).
    """
    expected = list(expected)
    deadline = time.monotonic() + within
    while True:
        records = read_committed(bootstrap_servers, topic, security=security)
        missing, unexpected = topic_difference(records, expected)
        if not missing and not unexpected:
            return records
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    lines = [f"topic {topic!r} does not hold exactly the expected records "
             f"({len(records)} read, {len(expected)} expected)"]
    if missing:
        lines.append(f"missing: {_show(missing)}")
    if unexpected:
        lines.append(f"unexpected (or duplicated): {_show(unexpected)}")
    raise AssertionError("\n".join(lines))


def _show(counter: Counter, limit: int = 10) -> str:
    shown = [f"{item!r} x{n}" if n > 1 else repr(item) for item, n in list(counter.items())[:limit]]
    more = len(counter) - limit
    return ", ".join(shown) + (f", ... and {more} more" if more > 0 else "")


class BrokerHelpers:
    """The helpers as methods of a broker handle (which has ``port``, and ``admin_port``
    when started with the admin server)."""

    port: int
    admin_port: int = 0
    node_ports: dict[int, int]  # node id -> port of every node of the broker
    # a secured broker's login for these helpers (spark_client.security.ClientSecurity)
    helper_security = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_servers

    def create_topic(self, name: str | None = None, partitions: int = 1,
                     config: dict[str, object] | None = None) -> str:
        return create_topic(self.bootstrap_servers, name, partitions, config, self.helper_security)

    def read_committed(self, topic: str, timeout: float = 30.0) -> list[ConsumedRecord]:
        return read_committed(self.bootstrap_servers, topic, timeout, self.helper_security)

    def assert_topic_holds(self, topic: str, expected: Iterable[object], within: float = 0.0) -> list[ConsumedRecord]:
        return assert_topic_holds(self.bootstrap_servers, topic, expected, within, self.helper_security)

    # -- the control API (a broker started with admin=True) ---------------------------

    @property
    def admin_url(self) -> str:
        if not self.admin_port:
            raise RuntimeError("this broker has no admin server: start it with admin=True")
        return f"http://{HOST}:{self.admin_port}"

    def control(self):
        """The Python API of the control service (``broker.control.api_client.ControlClient``)."""
        from broker.control.api_client import ControlClient

        return ControlClient(self.admin_url)

    def stop_node(self, node_id: int) -> dict:
        return self.control().call("node_stop", node_id=node_id)

    def kill_node(self, node_id: int) -> dict:
        return self.control().call("node_kill", node_id=node_id)

    def start_node(self, node_id: int) -> dict:
        return self.control().call("node_start", node_id=node_id)

    def pause_node(self, node_id: int) -> dict:
        return self.control().call("node_pause", node_id=node_id)

    def resume_node(self, node_id: int) -> dict:
        return self.control().call("node_resume", node_id=node_id)

    def add_node(self, node_id: int | None = None, port: int | None = None) -> dict:
        """Adds a node (the next id and a free port unless given); ``node_ports`` gets it."""
        answer = self.control().call("node_add", node_id=node_id, port=port)
        self.node_ports[answer["node"]["node_id"]] = answer["node"]["port"]
        return answer

    def remove_node(self, node_id: int) -> dict:
        """Moves the node's replicas, leaderships and coordinators away, then removes it."""
        answer = self.control().call("node_remove", node_id=node_id)
        self.node_ports.pop(node_id, None)
        return answer

    def advance_clock(self, by: str | int) -> dict:
        """Moves the broker's clock forward (``"30s"``, ``"7d"`` or milliseconds):
        timeouts and expirations act as if that time had passed."""
        return self.control().call("clock_advance", by=str(by))

    def fault(self, action: str, **match) -> dict:
        """Adds a request fault rule (``delay``, ``drop_response``, ``close_after``,
        ``close_before``, ``error``, ``hold``) matched on ``api_key``, ``min_version``,
        ``max_version``, ``node_id``, ``client_id``, ``transactional_id``, ``producer_id``,
        ``group_id``, ``topic``, ``partition``, with ``skip``/``count``/``nth``,
        ``probability``/``seed``, ``delay_ms``, ``error``; returns the rule (its ``id``)."""
        return self.control().call("fault_add", action=action, **match)

    def release_fault(self, rule_id: int) -> dict:
        """Lets the requests a ``hold`` rule holds go on."""
        return self.control().call("fault_release", rule_id=rule_id)

    def load_scenario(self, scenario: str) -> dict:
        """Loads a scenario (a catalogue name or a TOML file's path) into this broker,
        whose settings and node count must be the scenario's (``eosbroker_cluster(
        scenario=...)`` starts one so); returns the loaded scenario."""
        from pathlib import Path

        from broker.faults.scenarios.loader import catalogue

        if scenario in catalogue():
            return self.control().call("scenario_load", scenario=scenario)["loaded"]
        return self.control().call("scenario_load", toml=Path(scenario).read_text(encoding="utf-8"))["loaded"]

    def scenario_state(self) -> dict | None:
        """The loaded scenario with how often each trigger matched and fired."""
        return self.control().call("scenario")["loaded"]

    def transactions(self) -> list[dict]:
        """Every transactional id as its coordinator holds it (state, producer id and
        epoch, partitions, age, coordinator node): the console's view."""
        import json
        import urllib.request

        with urllib.request.urlopen(self.admin_url + "/console/state", timeout=30) as answer:
            return json.load(answer)["transactions"]
