"""A broker with a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-512 and OAUTHBEARER), its
users and ACLs, and the client settings each client library needs to log in to it; and a
blocking raw connection for tests that speak SASL frame by frame."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from broker.testing.helpers import HOST, free_port_block
from protocol.client import ClientConnection
from tests.sasl_tokens import unsecured_jws

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER")


def sasl_settings(**extra: str) -> dict[str, str]:
    users = " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    return {
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="admin-secret" {users};',
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="admin";',
        "connection.failed.authentication.delay.ms": "0",
        **extra,
    }


class SaslBroker:
    """``eosbroker serve`` with one SASL_PLAINTEXT listener (N nodes on consecutive ports)."""

    def __init__(self, tmp_path: Path, nodes: int = 1, admin: bool = False, **settings: str) -> None:
        self.port = free_port_block(nodes)
        self.nodes = nodes
        self.log_path = tmp_path / "broker.log"
        args = [sys.executable, "-m", "broker.cli", "serve", "--data-dir", str(tmp_path / "data"),
                "--override", f"listeners=SASL_PLAINTEXT://{HOST}:{self.port}",
                "--override", "security.inter.broker.protocol=SASL_PLAINTEXT"]
        if nodes > 1:
            args += ["--nodes", str(nodes)]
        if admin:
            args += ["--admin-port", "0"]
        for key, value in sasl_settings(**settings).items():
            args += ["--override", f"{key}={value}"]
        for user, password in PASSWORDS.items():
            args += ["--scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log, text=True)
        lines = [self.proc.stdout.readline() for _ in range(nodes + admin)]
        if not all("listening on" in line for line in lines):
            self.stop()
            raise RuntimeError(f"broker did not start: {lines}\n{self.log()}")
        self.admin_port = int(lines[-1].rsplit(":", 1)[1]) if admin else None
        self.bootstrap = f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    log_text = log  # as BrokerProcess names it

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for_log(self, text: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged; log tail:\n{log[-3000:]}")
            time.sleep(0.05)
        return log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._log.close()


def token_for(user: str, lifetime_s: float = 3600) -> str:
    now = time.time()
    return unsecured_jws({"sub": user, "iat": int(now), "exp": now + lifetime_s})


def confluent_settings(bootstrap: str, mechanism: str, user: str) -> dict:
    out = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        out.update({"enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": f"principal={user}"})
    else:
        out.update({"sasl.username": user, "sasl.password": PASSWORDS[user]})
    return out


def kafka_python_settings(bootstrap: str, mechanism: str, user: str) -> dict:
    out = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Provider(AbstractTokenProvider):
            def token(self) -> str:
                return token_for(user)

        out["sasl_oauth_token_provider"] = Provider()
    else:
        out.update({"sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]})
    return out


def aiokafka_settings(bootstrap: str, mechanism: str, user: str) -> dict:
    out = {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism}
    if mechanism == "OAUTHBEARER":
        from aiokafka.abc import AbstractTokenProvider

        class Provider(AbstractTokenProvider):
            async def token(self) -> str:
                return token_for(user)

        out["sasl_oauth_token_provider"] = Provider()
    else:
        out.update({"sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]})
    return out


class RawConnection:
    """A blocking connection that sends requests (or bare bytes) and reads answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=15)
        self.client = ClientConnection("sasl-test")

    def request(self, api_key: int, version: int, body: dict):
        _, frame = self.client.send(api_key, version, body)
        self.sock.sendall(frame)
        return self.read_response()

    def read_response(self):
        while True:
            data = self.sock.recv(65536)
            if not data:
                return None  # closed unanswered
            responses = self.client.receive_data(data)
            if responses:
                return responses[0].value

    def bare(self, token: bytes) -> bytes | None:
        self.sock.sendall(struct.pack(">i", len(token)) + token)
        head = self._exactly(4)
        return None if head is None else self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            data = self.sock.recv(n - len(out))
            if not data:
                return None
            out += data
        return out

    def closed(self) -> bool:
        """Whether the broker closed the connection (reads until it does, or times out)."""
        try:
            while self.sock.recv(65536):
                pass
            return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


__all__ = ["HOST", "MECHANISMS", "PASSWORDS", "RawConnection", "SaslBroker", "aiokafka_settings",
           "confluent_settings", "kafka_python_settings", "rss_kib", "token_for"]
