"""A real eosbroker process: start, stop, kill -9, restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from broker.testing.helpers import HOST, BrokerHelpers, free_port_block


class BrokerProcess(BrokerHelpers):
    """``python -m broker.program serve`` on a free port; its stderr goes to ``log_path``."""

    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None, port: int = 0,
                 extra_args: list[str] | None = None, nodes: int = 1, admin: bool = False,
                 wrapper: list[str] | None = None, log_level: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.port = port
        self.nodes = nodes
        self.node_ports: dict[int, int] = {}
        self.admin = admin
        self.admin_port = 0
        self.extra_args = list(extra_args or [])
        self.wrapper = list(wrapper or [])  # a command prefix, e.g. setpriv dropping capabilities
        self.log_level = log_level  # the broker's --log-level (INFO when None)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self._stderr = None

    def start(self, timeout: float = 20.0) -> "BrokerProcess":
        if self.nodes > 1 and not self.port:
            # a block chosen now, so a restart gives every node its port back
            for attempt in range(3):
                self.port = free_port_block(self.nodes)
                try:
                    return self._start(timeout)
                except RuntimeError:
                    if attempt == 2 or "cannot listen" not in self.log_tail():
                        raise
        return self._start(timeout)

    def _start(self, timeout: float) -> "BrokerProcess":
        # a listeners setting replaces --host/--port (the short form of one PLAINTEXT listener)
        address = [] if "listeners" in self.overrides else ["--host", HOST, "--port", str(self.port)]
        level = ["--log-level", self.log_level] if self.log_level else []
        args = [*self.wrapper, sys.executable, "-m", "broker.program", *level, "serve", *address,
                "--data-dir", str(self.data_dir), *self.extra_args]
        if self.nodes != 1:
            args += ["--nodes", str(self.nodes)]
        if self.admin:
            args += ["--admin-port", str(self.admin_port)]
        for k, v in self.overrides.items():
            args += ["--override", f"{k}={v}"]
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        lines: list[str] = []
        expected = self.nodes + (1 if self.admin else 0)

        def read() -> None:
            while len(lines) < expected and (line := self.proc.stdout.readline()):
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if len(lines) < expected or any("listening on" not in line for line in lines):
            self.kill()
            raise RuntimeError(f"broker did not start; log:\n{self.log_tail()}")
        # keep the (fixed) ports for restarts, so clients reconnect to the same addresses;
        # lines are "eosbroker listening on H:P" (one node) or "eosbroker node ID listening on H:P",
        # with a listeners setting NAME://H:P for each listener (the port of the one named
        # first in the setting kept)
        self.node_ports.clear()  # nodes added at run time do not come back with a restart
        first = str(self.overrides.get("listeners", "")).split("://", 1)[0].strip() + "://"
        for line in lines[: self.nodes]:
            words = line.split()
            address = next((w for w in words if w.startswith(first)), words[-1])
            self.node_ports[int(words[2]) if words[1] == "node" else 1] = int(address.rsplit(":", 1)[1])
        self.port = self.node_ports[min(self.node_ports)]
        if self.admin:
            self.admin_port = int(lines[-1].rsplit(":", 1)[1])
        return self

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM: a clean shutdown (snapshots written, files closed)."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._finish()
        return rc

    def kill(self) -> None:
        """kill -9: no shutdown code runs."""
        if self.proc is None:
            return
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._finish()

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def _finish(self) -> None:
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None
        if self._stderr:
            self._stderr.close()
            self._stderr = None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
