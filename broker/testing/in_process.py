"""A broker running in this process, on a thread with its own event loop.

Faster to start than a subprocess and its state is at hand (``.broker``), but it shares
the interpreter with the test: no kill -9, and a test that blocks the GIL slows it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable

from broker.testing.helpers import HOST, BrokerHelpers, free_port_block


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class InProcessBroker(BrokerHelpers):
    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None, port: int = 0,
                 nodes: int = 1, admin: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.overrides = dict(overrides or {})
        self.port = port
        self.nodes = nodes
        self.admin = admin
        self.admin_port = 0
        self.broker = None  # broker.process.Broker while running
        self._admin_server = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 20.0) -> "InProcessBroker":
        from broker.process import Broker
        from broker.config import BrokerConfig

        if self.nodes > 1 and not self.port:  # a restart gives every node its port back
            self.port = free_port_block(self.nodes)
        config = BrokerConfig.load(None, [f"{k}={v}" for k, v in self.overrides.items()])
        if self.nodes != 1:
            config.set("node.count", self.nodes)
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"eosbroker-{id(self):x}", daemon=True)
        self._thread.start()

        async def start() -> Any:
            if self.admin:  # the control API can move time, as `serve --admin-port` allows
                from broker.virtual_clock import VirtualClock

                broker = Broker(config, self.data_dir, HOST, self.port, VirtualClock(), history=True)
            else:
                broker = Broker(config, self.data_dir, HOST, self.port)
            await broker.start()
            if self.admin:
                from broker.control.http_server import AdminServer

                self._admin_server = AdminServer(broker, HOST, self.admin_port)
                await self._admin_server.start()
                self.admin_port = self._admin_server.port
            return broker

        try:
            self.broker = self.call(start, timeout)
        except BaseException:
            self._shutdown_loop()
            raise
        self.port = self.broker.port
        return self

    def call(self, fn: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
        """Runs ``fn()`` on the broker's event loop and returns its result."""
        if self._loop is None:
            raise RuntimeError("the broker is not running")
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(timeout)

    def stop(self, timeout: float = 20.0) -> int:
        if self.broker is not None:
            try:
                if self._admin_server is not None:
                    self.call(self._admin_server.stop, timeout)
                    self._admin_server = None
                self.call(self.broker.stop, timeout)
            finally:
                self.broker = None
                self._shutdown_loop()
        return 0

    def kill(self) -> None:
        raise RuntimeError("an in-process broker cannot be killed -9; use a subprocess broker")

    def restart(self) -> "InProcessBroker":
        self.stop()
        return self.start()

    def _shutdown_loop(self) -> None:
        if self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        self._loop = self._thread = None

    @property
    def node_ports(self) -> dict[int, int]:
        return {} if self.broker is None else {n.node_id: n.info.port for n in self.broker.nodes}

    @property
    def alive(self) -> bool:
        return self.broker is not None

    def log_tail(self, lines: int = 40) -> str:
        return "(in-process broker: its log lines go to this process's logging)"

    def log_text(self) -> str:
        return ""
