"""Connection and request-memory limits of one listener, under Kafka's setting names.

- ``max.connections``: beyond it a new connection is held unread until one closes, as
  Kafka's acceptor waits for a slot (the client sees its requests unanswered, not refused).
- ``max.connections.per.ip`` (and ``max.connections.per.ip.overrides``, "host:count,..."):
  beyond it a new connection from that address is closed at once with a log line.
- ``queued.max.request.bytes``: request bytes read but not yet handled, over every
  connection; when spent, connections stop reading until requests finish (Kafka's
  request memory pool). -1 means no limit, and then the listener keeps no pool (as
  Kafka's ``MemoryPool.NONE``): read-ahead is bounded per connection by
  ``queued.max.requests`` frames.
"""

from __future__ import annotations

import asyncio

from broker.config import host_counts


class _Waiters:
    """Wakes every waiter when a slot or some memory is given back; each re-checks."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    async def until(self, ready) -> None:
        while not ready():
            self._event.clear()
            await self._event.wait()

    def changed(self) -> None:
        self._event.set()


class ConnectionQuotas:
    """The connections a listener admits (Kafka's ConnectionQuotas)."""

    def __init__(self, config) -> None:
        self.max_connections = config["max.connections"]
        self.max_per_ip = config["max.connections.per.ip"]
        self.per_ip_overrides = host_counts(config["max.connections.per.ip.overrides"])
        self.active = 0
        self.per_ip: dict[str, int] = {}
        self._slots = _Waiters()

    def admit(self, ip: str) -> int | None:
        """Counts a new connection from ``ip``; returns the exceeded per-IP limit instead."""
        limit = self.per_ip_overrides.get(ip, self.max_per_ip)
        if self.per_ip.get(ip, 0) >= limit:
            return limit
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        return None

    def try_slot(self) -> bool:
        """Takes a connection slot if one is free now (else ``slot`` waits for one)."""
        if self.active < self.max_connections:
            self.active += 1
            return True
        return False

    async def slot(self) -> None:
        await self._slots.until(lambda: self.active < self.max_connections)
        self.active += 1

    def leave(self, ip: str, had_slot: bool) -> None:
        left = self.per_ip.get(ip, 0) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)
        if had_slot:
            self.active -= 1
            self._slots.changed()


def request_memory(config) -> RequestMemory | None:
    """The listener's request memory pool; None without a limit (``queued.max.request.bytes``
    -1), as Kafka keeps ``MemoryPool.NONE`` then: nothing to count per request."""
    max_bytes = config["queued.max.request.bytes"]
    return RequestMemory(max_bytes) if max_bytes >= 0 else None


class RequestMemory:
    """Request bytes read but not yet handled, over every connection of a listener
    (Kafka's request memory pool)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.queued_bytes = 0
        self._memory = _Waiters()

    def try_reserve(self, size: int) -> bool:
        # one request is always let through, or a frame over the limit could never be read
        if self.queued_bytes == 0 or self.queued_bytes + size <= self.max_bytes:
            self.queued_bytes += size
            return True
        return False

    async def reserve(self, size: int) -> None:
        await self._memory.until(lambda: self.try_reserve(size))

    def release(self, size: int) -> None:
        self.queued_bytes -= size
        self._memory.changed()
