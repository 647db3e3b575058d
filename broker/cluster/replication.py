"""Replication: followers fetch from their leaders with Fetch requests between nodes,
and what an ``acks=all`` produce waits for follows from those fetches, as in Kafka.

Each follower node runs one fetcher per leader it replicates from (Kafka's replica
fetcher thread, client id ``broker-N-fetcher-0``): a Fetch v17 naming its replica id in
``replica_state`` and every partition it follows from that leader, from where its copy
ends, sent through ``Network.request`` (broker/cluster/network.py), so cut, delayed and
lossy links, a paused or stopped node and the request fault rules (drop, delay, hold,
close, an error answer) act on it as on any request between nodes. The leader's Fetch
handler (broker/handlers/fetch.py) records how far each follower holds the log
(``handled``) and answers with the records after it, long-polling up to
replica.fetch.wait.max.ms; the follower's copy then ends after them. Storage is shared,
so no bytes are written: the offsets are what is replicated.

The high watermark of a partition is the lowest offset its ISR holds
(broker/cluster/follower_fetches.py). An ``acks=all`` produce, once appended, waits
until it is below that and the ISR is not smaller than the topic's (effective)
min.insync.replicas, or until the request's timeout, which answers REQUEST_TIMED_OUT
(the records stay in the log, as in Kafka). A follower unable to fetch for
``replica.lag.time.max.ms`` (on the broker's clock: ``ctl clock advance`` moves it)
leaves the ISR, as Kafka's ``Partition.maybeShrinkIsr`` drops it; it rejoins once a
fetch of its reaches the high watermark (``maybeExpandIsr``). An ``acks=all`` produce is
refused before its append while the ISR is below min.insync.replicas
(``too_few_in_sync``, NOT_ENOUGH_REPLICAS). acks=1 never waits.

While every node runs and no link fault, request fault rule or request observer is in
force, nothing could delay, lose or refuse a fetch: followers are caught up at once and
no fetcher runs (``quiet``), so a cluster without faults pays nothing for replication.
The fetchers start when that ends (``refresh``, called by the control operations and
when a fault rule is added) and stop once it holds again and every follower is back in
the ISR with the whole log.
"""

from __future__ import annotations

import asyncio
import logging

from broker.cluster.cluster import RUNNING
from broker.cluster.follower_fetches import FollowerFetches, Key
from protocol.answer_wire import request_type

log = logging.getLogger(__name__)

FETCH = 1
OFFSET_OUT_OF_RANGE = 1
FETCH_VERSION = 17  # as Kafka 4.4's fetchers: replica_state, topic ids
FETCH_WAIT_MAX_MS = 500  # Kafka's replica.fetch.wait.max.ms
FETCH_MAX_BYTES = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
PARTITION_MAX_BYTES = 1024 * 1024  # replica.fetch.max.bytes
FETCH_BACKOFF_S = 1.0  # replica.fetch.backoff.ms: after a failed fetch
# A fetch not answered by then (lost, held, its answer dropped) failed and is sent
# again: the long poll plus the same again. Real time, not the broker's clock: moving
# that forward must not fail the fetches under way (their long polls end instead).
FETCH_TIMEOUT_S = 2 * FETCH_WAIT_MAX_MS / 1000
# At most this long a control operation waits for the fetches it set going: a long
# poll under way ends, then a fetch that is lost times out.
HEAL_WAIT_S = FETCH_WAIT_MAX_MS / 1000 + FETCH_TIMEOUT_S + 1.0


def fetcher_client_id(node_id: int) -> str:
    """The client id of a node's fetches (Kafka's ReplicaFetcherManager names its threads so)."""
    return f"broker-{node_id}-fetcher-0"


def end_of_records(records, start: int) -> int:
    """The offset after the last batch in fetched ``records`` (``start`` if none)."""
    end = start
    view = memoryview(records) if records else b""
    pos, size = 0, len(view)
    while pos + 27 <= size:  # base offset (8), length (4), ... last offset delta at 23
        base = int.from_bytes(view[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
        if length <= 0 or pos + 12 + length > size:
            break  # a partial batch at the end of the answer: fetched next time
        end = base + int.from_bytes(view[pos + 23:pos + 27], "big", signed=True) + 1
        pos += 12 + length
    return end


class _Fetcher:
    """One follower's fetches from one leader."""

    __slots__ = ("follower", "leader", "task", "kick", "settled", "polling")

    def __init__(self, follower: int, leader: int) -> None:
        self.follower = follower
        self.leader = leader
        self.task: asyncio.Task | None = None
        # Set when the network changed: ends a backoff, and the fetches until ``settled``
        # do not long-poll, so that what the change did shows at once.
        self.kick = asyncio.Event()
        self.settled = asyncio.Event()  # since the last kick: failed, or in sync with the whole log
        self.polling: asyncio.Future | None = None  # a long-polling fetch under way: a kick ends it


class Replication:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.progress = FollowerFetches(broker.cluster.config["replica.lag.time.max.ms"])
        self.positions: dict[Key, int] = {}  # where each follower's copy ends (its own view)
        self._fetchers: dict[tuple[int, int], _Fetcher] = {}
        self._changed = asyncio.Event()
        self._shrink_timer = None
        self._shrink_due: float | None = None
        broker.faults.on_change = self.refresh  # a rule added or removed may end quiet
        broker.cluster.replicas.listeners.append(lambda topic, index, before, state: self.leader_changed(topic, index))

    # -- whether fetching is needed ------------------------------------------------------

    def _undisturbed(self) -> bool:
        """No link fault, no request rule or observer, every node that is up running (or
        only one node: nothing to replicate)."""
        nodes = self.broker.cluster.nodes
        if len(nodes) == 1:
            return True
        if self.broker.network.links or self.broker.faults.active:
            return False
        for n in nodes:  # a plain loop (no generator): asked by every acks=all produce
            if n.state != RUNNING and n.is_up:
                return False
        return True

    def quiet(self) -> bool:
        """Followers are caught up at once: nothing fetches, nothing could be behind."""
        return not self._fetchers and self._undisturbed()

    def refresh(self) -> None:
        """After the network, the nodes or the fault rules changed: the fetchers start
        (or wake from a backoff to try again at once) unless all is quiet."""
        if self._fetchers or not self._undisturbed():
            self._fetch_all()
        self._schedule_shrink()
        self._wake()

    async def settled(self) -> None:
        """Waits (at most HEAL_WAIT_S) until each fetcher ``refresh`` woke has caught up
        in sync, or failed: what a control operation changed shows in the ISR it answers.
        Not for those whose fetches cannot end (a node paused) or end by chance (a link
        losing some messages): the broker's clock goes on meanwhile."""
        waits = [asyncio.ensure_future(f.settled.wait()) for f in self._fetchers.values()
                 if not f.settled.is_set() and self._answers_at_once(f.follower, f.leader)]
        if waits:
            done, pending = await asyncio.wait(waits, timeout=HEAL_WAIT_S)
            for w in pending:
                w.cancel()

    def _answers_at_once(self, follower: int, leader: int) -> bool:
        cluster = self.broker.cluster
        for node_id in (follower, leader):
            node = cluster.node(node_id)
            if node is None or node.state != RUNNING:
                return False
        network = self.broker.network
        for source, target in ((follower, leader), (leader, follower)):
            faults = network.faults(source, target)
            if faults is not None and 0 < faults.loss < 1:
                return False  # (every message lost: the fetch fails within FETCH_TIMEOUT_S)
        return True

    def leader_changed(self, topic: str, index: int) -> None:
        """A partition moved: its followers fetch from the new leader, which knows them
        as they are in its ISR (caught up), as a Kafka leader resets its replicas' state."""
        if not self._fetchers:
            return
        state = self.broker.cluster.leadership(topic, index)
        if state is None:
            return
        log_end = self._log_end(topic, index)
        for follower in state.replicas:
            key = (topic, index, follower)
            if follower in state.isr and follower != state.leader:
                self.progress.caught_up(key, log_end)
            else:
                self.progress.forget(key)
        self._fetch_all([(topic, index)])

    def _fetch_all(self, partitions: list[tuple[str, int]] | None = None) -> None:
        """A fetcher for every (follower, leader) pair with partitions to fetch (of
        ``partitions`` only, when given: those whose leader just moved), every fetcher
        woken; the followers first met here hold the whole log (they were in sync until now)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # set up before the broker runs: the first acks=all wait starts them
        replicas = self.broker.cluster.replicas
        up = replicas.up
        pairs = set()
        items = (replicas.assign_all().items() if partitions is None
                 else [(key, state) for key in partitions if (state := replicas.get(*key)) is not None])
        for (topic, index), state in items:
            leader = state.leader
            if leader < 0:
                continue
            for follower in state.replicas:
                if follower == leader:
                    continue
                key = (topic, index, follower)
                if follower not in up:
                    self.progress.forget(key)
                    self.positions.pop(key, None)
                    continue
                pairs.add((follower, leader))
                if key not in self.positions:
                    log_end = self._log_end(topic, index)
                    self.positions[key] = log_end
                    if follower in state.isr:
                        self.progress.caught_up(key, log_end)
        for pair in pairs:
            if pair not in self._fetchers:
                fetcher = self._fetchers[pair] = _Fetcher(*pair)
                fetcher.task = loop.create_task(self._run(fetcher))
        # all, not only the pairs met: one whose partitions moved away ends at once
        for fetcher in self._fetchers.values():
            fetcher.settled.clear()
            fetcher.kick.set()
            if fetcher.polling is not None:
                fetcher.polling.cancel()  # its answer would wait for data: fetch again at once instead

    def _log_end(self, topic: str, index: int) -> int:
        try:
            part = self.broker.cluster.partition(topic, index)
        except OSError:
            return 0
        return 0 if part is None else part.log.log_end_offset

    # -- the fetchers (the follower's side) ------------------------------------------------

    async def _run(self, fetcher: _Fetcher) -> None:
        try:
            while await self._fetch_once(fetcher):
                pass
        except asyncio.CancelledError:
            raise
        except Exception:  # a fetcher's failure must not end replication silently
            log.exception("node %d's fetcher from node %d failed", fetcher.follower, fetcher.leader)
        finally:
            if self._fetchers.get((fetcher.follower, fetcher.leader)) is fetcher:
                del self._fetchers[(fetcher.follower, fetcher.leader)]
            fetcher.settled.set()

    def _followed(self, follower: int, leader: int) -> list[tuple[str, int, object, int]]:
        """(topic, partition, topic id, leader epoch) of what ``follower`` fetches from ``leader``."""
        cluster = self.broker.cluster
        by_name = cluster.topics.by_name
        out = []
        for (topic, index), state in cluster.replicas.followed(follower, leader).items():
            info = by_name.get(topic)
            if info is not None:
                out.append((topic, index, info.topic_id, state.leader_epoch))
        return out

    async def _fetch_once(self, fetcher: _Fetcher) -> bool:
        """One fetch and what it changed; False when the fetcher ends (its node stopped,
        nothing left to fetch from that leader, or all quiet and caught up again)."""
        from broker.cluster.network import Unreachable

        follower, leader = fetcher.follower, fetcher.leader
        node = self.broker.cluster.node(follower)
        if node is None or not node.is_up:
            return False
        followed = self._followed(follower, leader)
        if not followed:
            return False
        positions = self.positions
        topics: dict[object, list] = {}
        fetch_request = request_type(FETCH)  # built at the first follower fetch: a single node never pays for it
        for topic, index, topic_id, leader_epoch in followed:
            offset = positions.setdefault((topic, index, follower), self._log_end(topic, index))
            topics.setdefault(topic_id, []).append(fetch_request.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=PARTITION_MAX_BYTES))
        settling = not fetcher.settled.is_set()
        body = fetch_request(cluster_id=None, replica_state=fetch_request.ReplicaState(replica_id=follower, replica_epoch=-1),
                      max_wait_ms=0 if settling else FETCH_WAIT_MAX_MS, min_bytes=1, max_bytes=FETCH_MAX_BYTES,
                      isolation_level=0, session_id=0, session_epoch=-1,
                      topics=tuple(fetch_request.FetchTopic(topic_id=t, partitions=tuple(parts)) for t, parts in topics.items()),
                      forgotten_topics_data=(), rack_id="")
        fetcher.kick.clear()
        keys = [(topic, index, follower) for topic, index, _, _ in followed]
        sent_ms = self._now_ms()
        request = asyncio.ensure_future(asyncio.wait_for(self.broker.network.request(
            follower, leader, FETCH, FETCH_VERSION, body, typed=False, client_id=fetcher_client_id(follower),
            timeout_s=None), FETCH_TIMEOUT_S))
        if not settling:
            fetcher.polling = request
        try:
            await asyncio.wait((request,))
        except asyncio.CancelledError:
            request.cancel()
            raise
        finally:
            fetcher.polling = None
        if request.cancelled():
            return True  # ended by a kick: the next fetch does not wait
        try:
            answer = request.result()
        except (Unreachable, asyncio.TimeoutError) as e:
            return await self._failed(fetcher, keys, sent_ms, str(e) or "no answer in time")
        failed = self._received(follower, answer)
        if failed is not None:
            return await self._failed(fetcher, [k for k in keys if k in failed or not failed], sent_ms,
                                      "an error answer")
        if settling and self._in_sync(keys):
            fetcher.settled.set()
        # its own partitions first: the walk over every partition only once they are in sync
        if self._undisturbed() and self._in_sync(keys) and self._all_caught_up():
            self._stop_fetching()  # all quiet again: followers keep up at once from here
            return False
        return True

    def _in_sync(self, keys: list[Key]) -> bool:
        """Each of the follower's partitions: in the ISR, its copy holding the whole log."""
        replicas = self.broker.cluster.replicas
        for key in keys:
            state = replicas.get(*key[:2])
            if state is not None and (key[2] not in state.isr or self.positions.get(key, -1) < self._log_end(*key[:2])):
                return False
        return True

    def _all_caught_up(self) -> bool:
        """Every follower that is up in its partitions' ISR, holding the whole log."""
        up = self.broker.cluster.replicas.up
        for (topic, index), state in self.broker.cluster.replicas.assign_all().items():
            if state.leader < 0:
                continue
            for follower in state.replicas:
                if follower == state.leader or follower not in up:
                    continue
                key = (topic, index, follower)
                if follower not in state.isr or self.positions.get(key, -1) < self._log_end(topic, index):
                    return False
        return True

    async def close(self) -> None:
        """At the broker's stop: the fetchers end before the nodes do."""
        if self._shrink_timer is not None:
            self._shrink_timer.cancel()
            self._shrink_timer = None
        tasks = [f.task for f in self._fetchers.values() if f.task is not None]
        self._stop_fetching()
        if tasks:
            await asyncio.wait(tasks)

    def _stop_fetching(self) -> None:
        current = asyncio.current_task()
        for fetcher in list(self._fetchers.values()):
            fetcher.settled.set()
            if fetcher.task is not current:
                fetcher.task.cancel()
        self._fetchers.clear()
        self.progress.clear()
        self.positions.clear()
        self.broker.cluster.replicas.drop_followed()
        self._wake()

    def _received(self, follower: int, answer) -> set[Key] | None:
        """Moves the follower's copy to the end of the records received; the keys of the
        partitions answered with an error (an empty set: the whole answer was one)."""
        if answer.error_code:
            return set()  # the whole fetch refused
        by_id = self.broker.cluster.topics.by_id
        failed: set[Key] = set()
        for topic in answer.responses:
            info = by_id.get(topic.topic_id)
            if info is None:
                continue
            for p in topic.partitions:
                key = (info.name, p.partition_index, follower)
                error = p.error_code
                if error == OFFSET_OUT_OF_RANGE:  # truncated or deleted below it: the copy ends where the log does
                    self.positions[key] = self._log_end(key[0], key[1])
                    continue
                if error:
                    failed.add(key)
                    continue
                self.progress.answered(key)
                start = self.positions.get(key, 0)
                self.positions[key] = end_of_records(p.records, start)
        return failed or None

    async def _failed(self, fetcher: _Fetcher, keys: list[Key], sent_ms: int, why: str) -> bool:
        """The attempt sent at ``sent_ms`` failed: the follower has been unable since then."""
        leader = self.broker.cluster.node(fetcher.leader)
        if leader is not None and leader.state == RUNNING:  # a paused leader's ISR changes nothing
            for key in keys:
                self.progress.failed(key, sent_ms)
            self._schedule_shrink()
        log.debug("node %d could not fetch from node %d: %s", fetcher.follower, fetcher.leader, why)
        fetcher.settled.set()
        try:
            await self.broker.clock.wait_for(fetcher.kick.wait(), FETCH_BACKOFF_S)
        except asyncio.TimeoutError:
            pass
        return True

    def _now_ms(self) -> int:
        return int(self.broker.clock.monotonic() * 1000)

    # -- the leader's side -------------------------------------------------------------------

    def handled(self, follower: int, fetched: list[tuple[str, int, int, int]]) -> None:
        """The leader handled a follower's fetch (broker/handlers/fetch.py): for each
        (topic, partition, fetch offset, the leader's log end) the follower holds the
        log below the fetch offset; it rejoins the ISR once that reaches the high
        watermark."""
        replicas = self.broker.cluster.replicas
        for topic, index, fetch_offset, log_end in fetched:
            state = replicas.get(topic, index)
            if state is None or follower not in state.replicas or follower == state.leader:
                continue
            key = (topic, index, follower)
            self.progress.handled(key, fetch_offset)
            if follower not in state.isr and follower in replicas.up and self.progress.able(key):
                isr_keys = [(topic, index, f) for f in state.isr if f != state.leader]
                if fetch_offset >= self.progress.high_watermark(isr_keys, log_end):
                    state.isr = [r for r in state.replicas if r in state.isr or r == follower]
                    log.info("%s-%d: ISR expanded to %s (node %d caught up)", topic, index, state.isr, follower)
                    replicas.save()
        self._wake()

    # -- the ISR shrinking -----------------------------------------------------------------

    def _schedule_shrink(self) -> None:
        due_ms = self.progress.next_out_of_sync_ms()
        if due_ms is None:
            return
        due = due_ms / 1000
        if self._shrink_timer is not None:
            if self._shrink_due is not None and self._shrink_due <= due:
                return
            self._shrink_timer.cancel()
        self._shrink_due = due
        self._shrink_timer = self.broker.clock.call_later(max(due - self.broker.clock.monotonic(), 0), self._shrink)

    def _shrink(self) -> None:
        """Drops from the ISR every follower unable to fetch for longer than
        replica.lag.time.max.ms (not while its leader is paused: nothing of it runs)."""
        self._shrink_timer = self._shrink_due = None
        now_ms = self._now_ms()
        cluster = self.broker.cluster
        replicas = cluster.replicas
        for key, since in self.progress.take_out_of_sync(now_ms):
            topic, index, follower = key
            state = replicas.get(topic, index)
            if state is None or follower not in state.isr or follower == state.leader:
                continue
            leader = cluster.node(state.leader)
            if leader is None or leader.state != RUNNING:
                continue
            state.isr.remove(follower)
            log.warning("%s-%d: ISR shrunk to %s: node %d could not fetch for %d ms (replica.lag.time.max.ms)",
                        topic, index, state.isr, follower, now_ms - since)
        self._schedule_shrink()
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- acks=all --------------------------------------------------------------------------

    def too_few_in_sync(self, topic: str, index: int) -> str | None:
        """Why an acks=all write to the partition is refused (NOT_ENOUGH_REPLICAS), or None:
        its ISR is smaller than min.insync.replicas capped at its replica count (Kafka's
        effectiveMinIsr: a setting above the replication factor refuses nothing). While
        this holds, the high watermark does not advance either (``wait_for_isr``)."""
        state = self.broker.cluster.replicas.get(topic, index)
        if state is None or len(state.isr) >= len(state.replicas):  # the usual case: no config looked up
            return None
        min_isr = min(self.broker.cluster.min_insync_replicas(topic), len(state.replicas))
        if len(state.isr) >= min_isr:
            return None
        return (f"The size of the current ISR : {len(state.isr)} is insufficient to satisfy the min.isr requirement "
                f"of {min_isr} for partition {topic}-{index}, live replica(s) broker.id are : {state.isr}")

    async def wait_for_isr(self, topic: str, index: int, timeout_s: float) -> str | None:
        """Waits until the partition's high watermark covers what was just appended
        (everything below its log end now) and the ISR is not smaller than the topic's
        (effective) min.insync.replicas, below which Kafka 4.4 does not advance the high
        watermark. Returns the Kafka error to answer instead of success, if any:
        REQUEST_TIMED_OUT when that did not happen in time (the records stay in the
        log), NOT_LEADER_OR_FOLLOWER when the leadership moved. Kafka answers
        NOT_ENOUGH_REPLICAS_AFTER_APPEND only when the ISR shrinks between the high
        watermark's advance and the produce's completion check, a window this emulation
        does not have: a shrink below min.insync.replicas holds the answer instead."""
        cluster = self.broker.cluster
        state = cluster.leadership(topic, index)
        if state is None or len(state.replicas) == 1 or self.quiet() and (
                len(state.isr) == len(state.replicas) or self.too_few_in_sync(topic, index) is None):
            return None
        if not self._fetchers and not self._undisturbed():
            self._fetch_all()  # disturbed without a refresh (an observer added directly)
        clock = self.broker.clock
        leader = state.leader
        target = self._log_end(topic, index)
        deadline = clock.monotonic() + timeout_s
        while True:
            if state.leader != leader:
                return "NOT_LEADER_OR_FOLLOWER"
            if self.too_few_in_sync(topic, index) is None and self._replicated(topic, index, state, target):
                return None
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return "REQUEST_TIMED_OUT"
            try:
                await clock.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                return "REQUEST_TIMED_OUT"

    def _replicated(self, topic: str, index: int, state, target: int) -> bool:
        if not self._fetchers:
            return True  # nothing fetches: every ISR member is caught up
        fetched = self.progress.fetched_offset
        for follower in state.isr:
            if follower != state.leader and fetched((topic, index, follower)) < target:
                return False
        return True
