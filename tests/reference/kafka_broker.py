"""Apache Kafka as a reference broker: resolved by Maven, one KRaft node on 127.0.0.1.

`KafkaBroker(workdir).start()` formats a log directory and starts a combined
broker+controller with the single-node settings eosbroker uses (replication factor 1
everywhere, transaction log min ISR 1, eosbroker's group.initial.rebalance.delay.ms),
waits until it answers ApiVersions and returns; `stop()` ends it by its pid.

With ``secured=True`` it also serves the security set-ups eosbroker serves, with the
same users (alice, bob, admin: broker.testing.security) and certificates (eosbroker
certs): SASL_PLAINTEXT and SASL_SSL listeners with PLAIN, SCRAM-SHA-256/512 (users made
at format time) and OAUTHBEARER (the unsecured validator), MTLS (SSL, client
certificates required, the principal the certificate's CN) and SSL (no client certificate,
User:ANONYMOUS). ``bootstrap_for(name)`` and ``security(name, mechanism)`` give a client
what it needs for each; ``secured_listener_settings`` serves the same on eosbroker.
"""

from __future__ import annotations

import base64
import ctypes
import os
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

from broker.testing.security import MECHANISMS, PRINCIPAL_MAPPING, Security, sasl_listener_settings, scram_users
from tests.reference import maven

KAFKA_VERSION = "4.4.0"
HERE = Path(__file__).parent
POM = HERE / "kafka" / "pom.xml"
HOST = "127.0.0.1"
HEAP = os.environ.get("EOSBROKER_REFERENCE_HEAP", "-Xmx512m")
# The tests' JVM: C1 only and the serial collector start fastest.
TEST_JVM_OPTIONS = (HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

# What makes one node work, plus the settings where eosbroker's defaults are chosen
# for a local emulator (README "Settings").
SINGLE_NODE = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "100",
    "auto.create.topics.enable": "true",
    "log.flush.interval.messages": "9223372036854775807",
}

# Settings both brokers get in the differential tests, so timeouts fire within seconds.
DIFFERENTIAL = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies (prctl
    PR_SET_PDEATHSIG), so a killed or timed-out session leaves no JVM behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def kafka_classpath() -> str:
    return maven.classpath(POM, f"kafka-{KAFKA_VERSION}")


def api_versions_answer(port: int, timeout: float = 2.0) -> bool:
    """True when the broker answers an ApiVersions v0 request without error."""
    client = b"eosbroker-reference"
    body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _read_exact(s, 4)
            frame = _read_exact(s, struct.unpack(">i", head)[0])
    except OSError:
        return False
    correlation, error = struct.unpack(">ih", frame[:6])
    return correlation == 7 and error == 0


def _read_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def _cluster_id() -> str:
    """A random cluster id as Kafka makes them: one starting with '-' reads as an option
    on the storage tool's command line (a format that failed now and then)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


# The secured listeners (besides PLAINTEXT, the inter-broker one) and their protocols.
SECURED_LISTENERS = {"SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL", "MTLS": "SSL", "SSL": "SSL"}


def secured_listener_settings(names, certs) -> dict[str, str]:
    """What serves the secured listeners ``names`` (of SECURED_LISTENERS) with the users,
    mechanisms and certificates of these tests, in Kafka's names, so Apache Kafka and
    eosbroker take the same; the listeners themselves and their protocols are the caller's."""
    out = {"sasl.enabled.mechanisms": ",".join(MECHANISMS), "ssl.principal.mapping.rules": PRINCIPAL_MAPPING}
    for name in names:
        if "SSL" in SECURED_LISTENERS[name]:
            out.update(certs.broker_settings(name, "PKCS12", "required" if name == "MTLS" else "none"))
        if name.startswith("SASL"):
            out.update(sasl_listener_settings(name))
    return out


class KafkaBroker:
    def __init__(self, workdir: Path, overrides: dict[str, object] | None = None, secured: bool = False,
                 secured_ports: dict[str, int] | None = None, certs=None) -> None:
        """``secured_ports``: serve only these of the secured listeners, there (default: all, on
        free ports); ``certs``: certificates already written (default: new ones in the workdir)."""
        self.workdir = Path(workdir)
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.secured = secured
        self.secured_ports = {}
        if secured:
            self.secured_ports = secured_ports or {name: free_port() for name in SECURED_LISTENERS}
        self.certs = certs
        if secured and certs is None:
            from broker.security.certs import write_certificates

            self.certs = write_certificates(self.workdir / "certs", clients=("alice", "bob", "admin"))
        self.port = 0
        self.controller_port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "server.log"
        self.cluster_id = _cluster_id()

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        """The address of listener PLAINTEXT, SASL_PLAINTEXT, SASL_SSL or MTLS."""
        return self.bootstrap if listener == "PLAINTEXT" else f"{HOST}:{self.secured_ports[listener]}"

    def security(self, listener: str, mechanism: str | None = None) -> Security:
        """The client side of ``listener`` (SASL ones: logging in with ``mechanism``)."""
        protocol = SECURED_LISTENERS.get(listener, listener)
        return Security(protocol, mechanism, listener == "MTLS", self.certs if "SSL" in protocol else None)

    def _secured_settings(self) -> dict[str, str]:
        listeners = ",".join(f"{name}://{HOST}:{port}" for name, port in self.secured_ports.items())
        out = {
            "listeners": f"PLAINTEXT://{HOST}:{self.port},{listeners},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port},{listeners}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                              + ",".join(f"{n}:{p}" for n, p in SECURED_LISTENERS.items()),
            **secured_listener_settings(self.secured_ports, self.certs),
        }
        return out

    def _java(self, classpath: str, *args: str, jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS) -> list[str]:
        return [
            maven.require("java"), *jvm_options,
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", classpath, *args,
        ]

    def _write_config(self, port: int = 0) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.controller_port = self.controller_port or free_port()  # a restart keeps both
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            **SINGLE_NODE,
            **DIFFERENTIAL,
            **(self._secured_settings() if self.secured else {}),
            **self.overrides,
        }
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.workdir / "log4j2.properties").write_text(LOG4J2.format(log=self.log_path))
        return config

    def _format(self, classpath: str, port: int = 0, timeout: float = 180.0,
                jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS) -> Path:
        config = self._write_config(port)
        fmt = subprocess.run(
            self._java(classpath, "kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}", "-c", str(config),
                       "--ignore-formatted", *self._scram_arguments(), jvm_options=jvm_options),
            capture_output=True, text=True, timeout=timeout,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        return config

    def _scram_arguments(self) -> list[str]:
        return [f"--add-scram={entry}" for entry in scram_users()] if self.secured else []

    def exec_in_place(self, port: int, format_jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS,
                      broker_jvm_options: tuple[str, ...] = TEST_JVM_OPTIONS, format_log_dir: bool = True) -> None:
        """Formats the log dir (unless ``format_log_dir`` is false: a restart) and replaces this
        process with the broker (for the bench, which measures the process it started, with
        Kafka's own launcher options)."""
        classpath = kafka_classpath()
        config = (self._format(classpath, port, jvm_options=format_jvm_options) if format_log_dir
                  else self._write_config(port))
        command = self._java(classpath, "kafka.Kafka", str(config), jvm_options=broker_jvm_options)
        os.execv(command[0], command)

    def start(self, timeout: float = 180.0, port: int = 0, system_properties: dict[str, str] | None = None
              ) -> "KafkaBroker":
        """``port``: listen there, on the controller port of the previous start (a restart);
        ``system_properties``: the broker JVM's -D options (e.g. the files OAuth may read)."""
        classpath = kafka_classpath()
        config = self._format(classpath, port, timeout=timeout)
        self._stdout = open(self.workdir / "stdout.log", "ab")
        defines = tuple(f"-D{k}={v}" for k, v in (system_properties or {}).items())
        self.proc = subprocess.Popen(
            self._java(classpath, "kafka.Kafka", str(config), jvm_options=TEST_JVM_OPTIONS + defines),
            stdout=self._stdout, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while not api_versions_answer(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kafka did not answer within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
        self._stdout.close()

    def kill(self) -> None:
        """kill -9; ``start(port=self.port)`` brings it back on its ports."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
            self._stdout.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        tail = self.log_text().splitlines()[-lines:]
        try:
            tail += (self.workdir / "stdout.log").read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            pass
        return "\n".join(tail)
