"""An eosbroker with TLS listeners for the tests (SSL listeners, their differential test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from broker.testing.helpers import HOST, free_port_block

# Client certificates' subjects (CN=alice,OU=clients,O=...) map to their common name.
MAPPING = "RULE:^CN=([^,]*),OU=clients,.*$/$1/,DEFAULT"


class TlsBroker:
    """eosbroker with three listeners: PLAINTEXT, SSL (server certificate only, PEM values)
    and MTLS (protocol SSL, client certificates required, PKCS12), the inter-broker
    listener; with N nodes each listener has N consecutive ports."""

    def __init__(self, data_dir: Path, certs, nodes: int = 1, settings: dict[str, str] | None = None) -> None:
        first = free_port_block(3 * nodes)
        self.ports = {"PLAINTEXT": first, "SSL": first + nodes, "MTLS": first + 2 * nodes}
        overrides = {
            "listeners": ",".join(f"{name}://{HOST}:{port}" for name, port in self.ports.items()),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
            "inter.broker.listener.name": "MTLS",
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.key": certs.key().read_text(),
            "listener.name.ssl.ssl.keystore.certificate.chain": certs.cert().read_text(),
            **certs.broker_settings("MTLS", "PKCS12", "required"),
            "ssl.principal.mapping.rules": MAPPING,
            "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
            **(settings or {}),
        }
        args = [sys.executable, "-m", "broker.program", "serve", "--data-dir", str(data_dir), "--nodes", str(nodes)]
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log, text=True)
        lines = [self.proc.stdout.readline() for _ in range(nodes)]
        if not all("listening on" in line for line in lines):
            self.stop()
            raise AssertionError(f"broker did not start: {lines}\n{self.log()}")

    def bootstrap(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self._log.close()
