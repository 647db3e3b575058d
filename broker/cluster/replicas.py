"""Who holds and who leads each partition: replicas, ISR, leader and leader epoch.

Storage is one copy per partition shared by every node of the process; replication is
emulated here. A replica on a node that is up is in the ISR (it is caught up by
construction); a stopped node leaves every ISR and hands its leaderships to the next
ISR member, each change of leader bumping the partition's leader epoch, as Kafka's
controller does. Assignments and epochs are kept in ``meta/partitions.json`` so that
epochs never go backwards across restarts (clients remember them, and markers carry
the coordinator epoch, which is the coordinator partition's leader epoch).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.files import JsonJournal

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
        return {"leader": self.leader, "leader_epoch": self.leader_epoch, "replicas": list(self.replicas),
                "isr": list(self.isr)}


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
