"""Replication: who holds and who leads each partition, and how the followers keep up
with their leaders, as Kafka's Partition keeps a partition's replicas, ISR, leader and
leader epoch beside the acks=all wait and the ISR's shrink and expansion.

The leaderships (``ReplicaState``). Storage is one copy per partition shared by every
node of the process. A replica on a node that is up is in the ISR unless it falls
behind (below); a stopped node leaves every ISR and hands its leaderships to the next
ISR member, each change of leader bumping the partition's leader epoch, as Kafka's
controller does. Assignments and epochs are kept in ``meta/partitions.json`` so that
epochs never go backwards across restarts (clients remember them, and markers carry
the coordinator epoch, which is the coordinator partition's leader epoch).

The followers (``Replication``) fetch from their leaders with Fetch requests between
nodes, and what an ``acks=all`` produce waits for follows from those fetches, as in Kafka.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.cluster import RUNNING
from broker.cluster.follower_fetches import FollowerFetches, Key
from broker.log.files import JsonJournal
from protocol.answer_wire import request_type

if TYPE_CHECKING:  # shuffle's annotation only: random itself loads when a shuffle runs
    import random

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(slots=True)
class Leadership:
    """One partition's replicas, in-sync replicas, leader and leader epoch."""

    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0

    def describe(self) -> dict:
        return asdict(self)  # its lists copied


class RemovalRefused(ValueError):
    """Removing the node would lose a partition's last in-sync copy."""


# (topic, partition, the leadership before, the leadership now): told after every change
LeaderListener = Callable[[str, int, int, Leadership], None]


@dataclass
class ReplicaState:
    """Every partition's leadership, and which nodes are up; kept in meta/partitions.json."""

    path: Path
    node_ids: list[int]
    up: set[int] = field(default_factory=set)
    partitions: dict[tuple[str, int], Leadership] = field(default_factory=dict)
    listeners: list[LeaderListener] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.up = set(self.node_ids)
        self._stored_value: dict[str, list] | None = None  # read when first needed (``_stored``)
        self._forgotten: set[str] = set()  # stored names forgotten since the last save
        # topic -> (partitions, replication factor): leaderships assigned when one of the
        # topic's is first asked for (``declare``)
        self._declared: dict[str, tuple[int, int]] = {}
        # (follower, leader) -> the partitions the follower replicates from that leader;
        # kept only while followers fetch (``followed``), so a quiet cluster holds none
        self._following: dict[tuple[int, int], dict[tuple[str, int], Leadership]] | None = None
        self._journal = JsonJournal(self.path, separators=(",", ":"))

    @property
    def _stored(self) -> dict[str, list]:
        """The recorded leaderships ("topic-index" -> [replicas, leader epoch, leader]),
        read when a leadership is first assigned or saved: a start that asks for none (no
        coordinator topic, a Metadata for brokers only) parses no line per partition."""
        if self._stored_value is None:
            self._stored_value = {}
            try:
                self._stored_value = self._journal.load()
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as e:
                log.warning("ignoring unreadable %s (%s): partition leaders are assigned afresh", self.path, e)
        return self._stored_value

    # -- assignment ----------------------------------------------------------------------

    def assign(self, topic: str, index: int, replication_factor: int, replicas: list[int] | None = None) -> Leadership:
        """The partition's leadership: the stored one if its replicas all still exist,
        else a fresh spread over the nodes (partition i starts at node i, as the
        coordinator topics' partitions are spread)."""
        stored = self._stored.get(f"{topic}-{index}")  # [replicas, leader epoch, leader]
        node_ids = self.node_ids
        if replicas is None and stored is not None and all(r in node_ids for r in stored[0]):
            replicas = stored[0]
        if replicas is None:
            n = len(node_ids)
            rf = max(1, min(replication_factor, n))
            replicas = [node_ids[(index + k) % n] for k in range(rf)]
        up = self.up
        isr = [r for r in replicas if r in up]
        leader = isr[0] if isr else NO_LEADER
        epoch = 0 if stored is None else stored[1] + (leader != stored[2])
        key = (topic, index)
        self._unfollow(key)
        state = self.partitions[key] = Leadership(list(replicas), isr, leader, epoch)
        self._follow(key, state)
        return state

    def declare(self, topic: str, partitions: int, replication_factor: int) -> None:
        """The topic's partitions get their leaderships (``assign``) when one of them is
        first asked for (``get``), or all at once before a change of the nodes: a start
        does no work per partition. What they get then is what they would have got now:
        it follows from the stored leaderships and the nodes, which are all up at start
        and change only after every declared topic is assigned."""
        self._declared[topic] = (partitions, replication_factor)

    def get(self, topic: str, index: int) -> Leadership | None:
        """The partition's leadership; None for a partition neither assigned nor declared."""
        state = self.partitions.get((topic, index))
        if state is None and topic in self._declared:
            self._assign_declared(topic)
            state = self.partitions.get((topic, index))
        return state

    def _assign_declared(self, topic: str) -> None:
        count, replication_factor = self._declared.pop(topic)
        for i in range(count):
            if (topic, i) not in self.partitions:
                self.assign(topic, i, replication_factor)

    def assign_all(self) -> dict[tuple[str, int], Leadership]:
        """Every partition's leadership, the declared ones assigned now."""
        while self._declared:
            self._assign_declared(next(iter(self._declared)))
        return self.partitions

    def first_leader(self, index: int) -> int:
        """The leader ``assign`` gives partition ``index`` of a new topic."""
        n = len(self.node_ids)
        return next((self.node_ids[(index + k) % n] for k in range(n) if self.node_ids[(index + k) % n] in self.up),
                    NO_LEADER)

    def forget(self, topic: str, index: int) -> None:
        self._declared.pop(topic, None)
        self._unfollow((topic, index))
        self.partitions.pop((topic, index), None)
        if self._stored.pop(f"{topic}-{index}", None) is not None:
            self._forgotten.add(f"{topic}-{index}")

    def save(self, keys=None) -> None:
        """Records the leaderships of ``keys`` ((topic, index) pairs; every partition's
        when None) that changed since they were last recorded, and the partitions
        forgotten since: a journal line each, not the whole file."""
        items = (self.partitions.items() if keys is None
                 else ((k, self.partitions[k]) for k in keys if k in self.partitions))
        changed = {}
        for (t, i), s in items:
            name, value = f"{t}-{i}", [list(s.replicas), s.leader_epoch, s.leader]
            if self._stored.get(name) != value:
                changed[name] = value
        removed, self._forgotten = self._forgotten, set()
        if not changed and not removed:
            return  # nothing to record (and no empty file written: reading none gives the same state)
        self._stored.update(changed)
        self._journal.change(self._stored, changed, removed)

    def compact(self) -> None:
        """At a clean stop: the journal folded into the file, for a quick next start."""
        if self._stored_value is not None:  # else nothing was read, nor changed
            self._journal.compact(self._stored_value)

    def leader_of(self, topic: str, index: int) -> int:
        state = self.get(topic, index)
        return NO_LEADER if state is None else state.leader

    # -- who follows what ------------------------------------------------------------------

    def followed(self, follower: int, leader: int) -> dict[tuple[str, int], Leadership]:
        """The partitions ``follower`` replicates from ``leader`` (a replica, not the leader):
        an index built at the first call and kept as leaders and replicas change, so a
        follower's fetch costs what it follows, not what the cluster holds."""
        if self._following is None:
            self._following = {}
            for key, state in self.assign_all().items():
                self._follow(key, state)
        return self._following.get((follower, leader), {})

    def drop_followed(self) -> None:
        """Nothing fetches any more: the index goes until ``followed`` is asked again."""
        self._following = None

    def _follow(self, key: tuple[str, int], state: Leadership) -> None:
        following, leader = self._following, state.leader
        if following is None or leader == NO_LEADER:
            return
        for r in state.replicas:
            if r != leader:
                following.setdefault((r, leader), {})[key] = state

    def _unfollow(self, key: tuple[str, int]) -> None:
        """Before the partition's leader or replicas change (``_follow`` after)."""
        following = self._following
        state = self.partitions.get(key)
        if following is None or state is None or state.leader == NO_LEADER:
            return
        for r in state.replicas:
            parts = following.get((r, state.leader))
            if parts is not None and parts.pop(key, None) is not None and not parts:
                del following[(r, state.leader)]

    # -- changes -------------------------------------------------------------------------

    def set_leader(self, topic: str, index: int, leader: int, reason: str) -> bool:
        """Makes ``leader`` (an ISR member, or NO_LEADER) lead the partition with a new
        epoch; False if it already does."""
        state = self.get(topic, index)
        if state.leader == leader:
            return False
        before = state.leader
        self._unfollow((topic, index))
        state.leader = leader
        self._follow((topic, index), state)
        state.leader_epoch += 1
        log.info("%s-%d: leader %d -> %d, epoch %d (%s)", topic, index, before, leader, state.leader_epoch, reason)
        for listener in self.listeners:
            listener(topic, index, before, state)
        return True

    def node_down(self, node_id: int) -> list[tuple[str, int]]:
        """The node leaves every ISR; partitions it led move to the next ISR member
        (or go offline). Returns the partitions whose leader changed."""
        partitions = self.assign_all()  # before the change: as a start would have assigned them
        self.up.discard(node_id)
        moved = []
        for (topic, index), state in partitions.items():
            if node_id in state.isr:
                state.isr.remove(node_id)
            if state.leader == node_id:
                self.set_leader(topic, index, state.isr[0] if state.isr else NO_LEADER, f"node {node_id} down")
                moved.append((topic, index))
        self.save()
        return moved

    def node_up(self, node_id: int) -> list[tuple[str, int]]:
        """The node rejoins the ISR of its replicas and leads the offline ones."""
        partitions = self.assign_all()  # before the change: as a start would have assigned them
        self.up.add(node_id)
        moved = []
        for (topic, index), state in partitions.items():
            if node_id in state.replicas and node_id not in state.isr:
                state.isr = [r for r in state.replicas if r in state.isr or r == node_id]
            if state.leader == NO_LEADER and node_id in state.isr:
                self.set_leader(topic, index, node_id, f"node {node_id} up")
                moved.append((topic, index))
        self.save()
        return moved

    # -- nodes joining and leaving the cluster ---------------------------------------------

    def add_node(self, node_id: int) -> None:
        """A new node: new topics spread over it too; it holds nothing yet (as a new
        Kafka broker, until partitions are reassigned to it)."""
        self.assign_all()  # as they would have been before it joined
        self.node_ids.append(node_id)
        self.up.add(node_id)

    def plan_removal(self, node_id: int, candidates: list[int]) -> dict[tuple[str, int], tuple[list[int], int]]:
        """Where the replicas of a node that leaves go: {partition: (new replicas, new
        leader)} for every partition the node holds. Its place in each replica list goes
        to the ``candidates`` member (nodes that are up, best first) holding the fewest
        replicas so far; a list shrinks when every candidate already holds the partition.
        The leader stays unless it is the node; then the next in-sync replica leads (or
        the replacement, which catches up from the node before it leaves). Raises
        RemovalRefused when a partition's only in-sync copy is on a node that is down."""
        load = {c: 0 for c in candidates}
        for state in self.assign_all().values():
            for r in state.replicas:
                if r in load:
                    load[r] += 1
        plan = {}
        for key, state in sorted(self.partitions.items()):
            if node_id not in state.replicas:
                continue
            others = [r for r in state.isr if r != node_id]
            if not others and node_id not in state.isr:
                raise RemovalRefused(f"{key[0]}-{key[1]} has no in-sync replica left: removing node {node_id} "
                                     f"would lose its data (start the node first)")
            spare = [c for c in candidates if c not in state.replicas]
            replacement = min(spare, key=lambda c: (load[c], candidates.index(c))) if spare else None
            if replacement is None and not others:
                raise RemovalRefused(f"{key[0]}-{key[1]} would have no replica left on a live node")
            if replacement is not None:
                load[replacement] += 1
                replicas = [replacement if r == node_id else r for r in state.replicas]
            else:
                replicas = [r for r in state.replicas if r != node_id]
            leader = state.leader
            if leader in (node_id, NO_LEADER):
                leader = others[0] if others else replacement
            plan[key] = (replicas, leader)
        return plan

    def remove_node(self, node_id: int, plan: dict[tuple[str, int], tuple[list[int], int]]) -> list[tuple[str, int]]:
        """Applies ``plan_removal``'s plan, then forgets the node. Returns the partitions
        whose replicas or leader changed."""
        for (topic, index), (replicas, leader) in plan.items():
            state = self.partitions[(topic, index)]
            self._unfollow((topic, index))
            state.replicas = list(replicas)
            self._follow((topic, index), state)
            state.isr = [r for r in state.replicas if r in self.up and r != node_id]
            self.set_leader(topic, index, leader, f"node {node_id} removed")
        self.node_ids.remove(node_id)
        self.up.discard(node_id)
        self.save()
        return list(plan)

    def elect_preferred(self, partitions: list[tuple[str, int]] | None = None) -> list[tuple[str, int]]:
        """Gives each partition back to its first replica where that one is in the ISR."""
        moved = []
        for key in partitions if partitions is not None else list(self.assign_all()):
            state = self.get(*key)
            preferred = state.replicas[0]
            if preferred in state.isr and self.set_leader(*key, preferred, "preferred leader election"):
                moved.append(key)
        if moved:
            self.save()
        return moved

    def shuffle(self, rng: random.Random | None = None) -> list[tuple[str, int]]:
        """A different ISR member leads every partition that has more than one."""
        import random  # here: a broker that never shuffles never loads it

        rng = rng or random.Random()
        moved = []
        for key, state in self.assign_all().items():
            others = [r for r in state.isr if r != state.leader]
            if others and self.set_leader(*key, rng.choice(others), "shuffle"):
                moved.append(key)
        if moved:
            self.save()
        return moved

    def reassign(self, topic: str, index: int, replicas: list[int] | None, leader: int | None) -> Leadership:
        """New replicas and/or leader for a partition (the leader must be one of its
        replicas and up)."""
        state = self.get(topic, index)
        if replicas is not None:
            self._unfollow((topic, index))
            state.replicas = list(replicas)
            self._follow((topic, index), state)
            state.isr = [r for r in state.replicas if r in self.up]
        if leader is None:
            leader = state.leader if state.leader in state.isr else (state.isr[0] if state.isr else NO_LEADER)
        self.set_leader(topic, index, leader, "reassignment")
        self.save()
        return state


# -- the followers ----------------------------------------------------------------------

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
