"""Emulated replication: what an ``acks=all`` produce waits for, and when the ISR
shrinks and grows back.

Storage is shared, so a follower never copies bytes; what is emulated is whether it
*could* fetch from its leader: it can when its node is running (not paused or stopped)
and neither direction of the link between it and the leader is cut (or loses every
message). A follower that cannot fetch falls behind; after ``replica.lag.time.max.ms``
(on the broker's clock, so ``ctl clock advance`` moves it) the leader drops it from the
ISR, as Kafka's ``Partition.maybeShrinkIsr`` does. When it can fetch again it rejoins the ISR.

An ``acks=all`` produce, once appended, waits until every other ISR member could fetch
it: at once when all can (plus the links' delays, and a fetch retry for each fetch a
lossy link loses), else until the ISR shrinks or the request's timeout passes, which
answers REQUEST_TIMED_OUT (the records stay in the log, as in Kafka). A shrink below
the topic's ``min.insync.replicas`` holds the answer (the high watermark does not
advance) until the ISR grows back or the timeout passes, as in Kafka 4.4. An
``acks=all`` produce is refused before its append while the ISR is that small
(``Cluster.too_few_in_sync``, NOT_ENOUGH_REPLICAS). acks=1 never waits. Control
operations that change reachability call ``refresh``.
"""

from __future__ import annotations

import asyncio
import logging

from broker.cluster.cluster import RUNNING

log = logging.getLogger(__name__)

LOST_FETCH_RETRY_S = 0.5  # a lost fetch is sent again after Kafka's replica.fetch.wait.max.ms


class Replication:
    def __init__(self, broker) -> None:
        self.broker = broker
        # (topic, partition, follower) -> the clock's monotonic time it fell behind
        self.behind_since: dict[tuple[str, int, int], float] = {}
        self._changed = asyncio.Event()
        self._shrink_timer = None

    @property
    def _lag_s(self) -> float:
        return self.broker.cluster.config["replica.lag.time.max.ms"] / 1000

    def can_fetch(self, follower: int, leader: int) -> bool:
        node = self.broker.cluster.node(follower)
        if node is None or node.state != RUNNING:
            return False
        network = self.broker.network
        for source, target in ((follower, leader), (leader, follower)):
            faults = network.faults(source, target)
            if faults is not None and (faults.cut or faults.loss >= 1):
                return False
        return True

    def quiet(self) -> bool:
        """Nothing can be behind: every node running, no link fault, nobody behind."""
        if self.broker.network.links or self.behind_since:
            return False
        for n in self.broker.cluster.nodes:  # a plain loop (no generator): asked by every acks=all produce
            if n.state != RUNNING and n.is_up:
                return False
        return True

    # -- the ISR ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """After reachability changed: followers that cannot fetch start falling behind,
        those that can again rejoin the ISR; waiting produces look again."""
        clock = self.broker.clock
        now = clock.monotonic()
        replicas = self.broker.cluster.replicas
        expanded = False
        for (topic, index), state in replicas.partitions.items():
            if state.leader < 0:
                continue
            for follower in state.replicas:
                if follower == state.leader:
                    continue
                key = (topic, index, follower)
                if self.can_fetch(follower, state.leader):
                    self.behind_since.pop(key, None)
                    if follower not in state.isr and follower in replicas.up:
                        state.isr = [r for r in state.replicas if r in state.isr or r == follower]
                        log.info("%s-%d: ISR expanded to %s (node %d caught up)", topic, index, state.isr, follower)
                        expanded = True
                elif follower in state.isr:
                    self.behind_since.setdefault(key, now)
                else:
                    self.behind_since.pop(key, None)
        if expanded:
            replicas.save()
        self._schedule_shrink()
        self._wake()

    def _schedule_shrink(self) -> None:
        if self._shrink_timer is not None:
            self._shrink_timer.cancel()
            self._shrink_timer = None
        if self.behind_since:
            due = min(self.behind_since.values()) + self._lag_s
            self._shrink_timer = self.broker.clock.call_later(due - self.broker.clock.monotonic(), self._shrink)

    def _shrink(self) -> None:
        """Drops from the ISR every follower behind for longer than replica.lag.time.max.ms."""
        self._shrink_timer = None
        now = self.broker.clock.monotonic()
        replicas = self.broker.cluster.replicas
        for key, since in list(self.behind_since.items()):
            if now - since < self._lag_s:
                continue
            topic, index, follower = key
            del self.behind_since[key]
            state = replicas.get(topic, index)
            if state is None or follower not in state.isr or follower == state.leader \
                    or self.can_fetch(follower, state.leader):
                continue
            state.isr.remove(follower)
            log.warning("%s-%d: ISR shrunk to %s: node %d could not fetch for %d ms (replica.lag.time.max.ms)",
                        topic, index, state.isr, follower, (now - since) * 1000)
        self._schedule_shrink()
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- acks=all --------------------------------------------------------------------------

    async def wait_for_isr(self, topic: str, index: int, timeout_s: float) -> str | None:
        """Waits until the partition's high watermark covers what was just appended: every
        other ISR member could have fetched it and the ISR is not smaller than the
        topic's (effective) min.insync.replicas, below which Kafka 4.4 does not advance
        the high watermark. Returns the Kafka error to answer instead of success, if any:
        REQUEST_TIMED_OUT when that did not happen in time (the records stay in the
        log), NOT_LEADER_OR_FOLLOWER when the leadership moved. Kafka answers
        NOT_ENOUGH_REPLICAS_AFTER_APPEND only when the ISR shrinks between the high
        watermark's advance and the produce's completion check, a window this emulation
        does not have: a shrink below min.insync.replicas holds the answer instead."""
        cluster = self.broker.cluster
        state = cluster.leadership(topic, index)
        if state is None or self.quiet() and (len(state.isr) == len(state.replicas)
                                              or cluster.too_few_in_sync(topic, index) is None):
            return None
        clock = self.broker.clock
        leader = state.leader
        deadline = clock.monotonic() + timeout_s
        while True:
            if state.leader != leader:
                return "NOT_LEADER_OR_FOLLOWER"
            behind = [f for f in state.isr if f != leader and not self.can_fetch(f, leader)]
            if not behind and cluster.too_few_in_sync(topic, index) is None:
                fetch_s = max((self._fetch_time(f, leader) for f in state.isr if f != leader), default=0.0)
                if not fetch_s:
                    return None
                remaining = deadline - clock.monotonic()
                await clock.sleep(min(fetch_s, max(remaining, 0)))
                if fetch_s > remaining:
                    return "REQUEST_TIMED_OUT"
                if state.leader == leader and cluster.too_few_in_sync(topic, index) is None:
                    return None
                continue  # the ISR shrank while the followers fetched: the high watermark waits
            if any((topic, index, f) not in self.behind_since for f in behind):
                self.refresh()  # reachability changed without a control call: start the lag clock
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return "REQUEST_TIMED_OUT"
            try:
                await clock.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                return "REQUEST_TIMED_OUT"

    def _fetch_time(self, follower: int, leader: int) -> float:
        """Seconds until a follower has fetched: the links' delays both ways, once more
        for each fetch a lossy link loses (seeded per link)."""
        network = self.broker.network
        total = 0.0
        for source, target in ((follower, leader), (leader, follower)):
            faults = network.faults(source, target)
            if faults is None:
                continue
            total += faults.delay_ms / 1000
            lost = 0
            while faults.loss and faults.lost() and lost < 100:
                lost += 1
            total += lost * (LOST_FETCH_RETRY_S + faults.delay_ms / 1000)
        return total
