"""Nodes, topics, partitions and who leads them.

Every emulated node lives in this one process; partition leadership and coordinator
placement are decided here so that handlers can answer NOT_LEADER_OR_FOLLOWER /
NOT_COORDINATOR consistently.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.clock import SYSTEM_CLOCK, Clock
from broker.cluster.event_history import EventHistory
from broker.config import BrokerConfig
from broker.cluster import RUNNING, STOPPED
from broker.cluster.replication import Leadership, ReplicaState
from broker.log.files import fsync_all, fsync_dir, replace_atomically
from broker.log.recovery_points import FILE_NAME as RECOVERY_POINTS_FILE
from broker.log.recovery_points import read_recovery_points, write_recovery_points
from broker.cluster.topic_intents import ADD, CREATE, DELETE, Intent, TopicIntents, resolve
from broker.cluster.topics import TopicError, TopicInfo, TopicRegistry, effective_topic_config, validate_topic_configs, validate_topic_name
from protocol.names import CONSUMER_OFFSETS, INTERNAL_TOPICS, SHARE_GROUP_STATE, TRANSACTION_STATE

if TYPE_CHECKING:
    from broker.log.partition import Partition
    from broker.log.partition_log import LogConfig

log = logging.getLogger(__name__)

# Written by close() once every partition has closed and flushed; read and deleted by
# open_all() before anything opens, so a crash during the run that follows leaves none.
CLEAN_SHUTDOWN_FILE = "clean-shutdown"

class ReassignmentError(ValueError):
    """A refused reassignment: the Kafka error name, and the control API's field and status."""

    def __init__(self, error_name: str, message: str, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.error_name = error_name
        self.field = field
        self.status = status


@dataclass(slots=True)
class NodeRegistration:
    """A node's registration: where it listens and whether it is up."""

    node_id: int
    host: str
    port: int
    state: str = RUNNING
    # Paused past broker.session.timeout.ms: out of every ISR and off Metadata's list.
    fenced: bool = False
    # advertised (host, port) by listener name; empty: (host, port) on every listener
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where clients of ``listener`` reach this node, or None: not on that listener."""
        if not self.endpoints:
            return self.host, self.port
        return self.endpoints.get(listener)

    @property
    def is_up(self) -> bool:
        return self.state != STOPPED

    def describe(self) -> dict:
        return {"node_id": self.node_id, "host": self.host, "port": self.port, "state": self.state,
                "fenced": self.fenced}


@dataclass(frozen=True)
class CreatePlan:
    """A create ``Cluster.check_create`` passed: what making the topic needs."""

    intent: Intent
    replication_factor: int
    configs: dict[str, str]
    assignments: dict[int, list[int]]


class Cluster:
    def __init__(self, config: BrokerConfig, data_dir: Path, clock: Clock = SYSTEM_CLOCK,
                 history_size: int = 0) -> None:
        """``history_size``: the events the event history keeps (0: none, and nothing tells it)."""
        self.config = config
        self.clock = clock
        self.data_dir = data_dir
        self._checkpoint_write: asyncio.Future | None = None  # its thread, while it runs
        self.cluster_id: str = config["cluster.id"]
        first = config["node.id"]
        self.nodes: list[NodeRegistration] = [NodeRegistration(first + i, "", 0) for i in range(max(1, config["node.count"]))]
        self.replicas = ReplicaState(data_dir / "meta" / "partitions.json", [n.node_id for n in self.nodes])
        self.topics = TopicRegistry(data_dir)
        self.intents = TopicIntents(data_dir / "meta")
        # threads' work on topic directories: deleted topics' being removed, new partitions' made
        self._file_work: set[asyncio.Future] = set()
        self._making: set[str] = set()  # topics being created or grown
        self._topic_changed = asyncio.Event()  # set (and replaced) when one of those ends
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.created_this_run: set[str] = set()
        self._log_configs: dict = {}  # LogConfig -> itself
        # topic name -> (its entry, the dynamic broker settings, LogConfig): built once, not
        # at every partition's open; a change replaces the entry or the settings' dicts
        self._topic_log_configs: dict[str, tuple[TopicInfo, dict, dict, LogConfig]] = {}
        # what open_all found: whether the last run ended cleanly, and its recovery points
        self._clean_start = False
        self._recorded_points: dict[tuple[str, int], int] | None = None  # read at first use
        # the clean-shutdown marker's removal being made durable (_take_clean_shutdown_marker)
        self._marker_removed = None
        # topics whose points the recovery-points file may still hold though they are gone
        # (deleted, or unknown when it was read): dropped at its next write
        self._stale_point_topics: set[str] = set()
        # Told of events that /metrics counts (set by the admin server, else None):
        # (coordinator topic, partition, seconds from load start to loaded) and
        # ("commit" | "abort", seconds from a transaction's start to its markers written).
        self.on_coordinator_loaded: Callable[[str, int, float], None] | None = None
        self.on_transaction_completed: Callable[[str, float], None] | None = None
        self.history = EventHistory(history_size, clock.now_ms)
        # KIP-360 changed the unknown-producer rule in 2.5; older profiles keep the old one.
        version = tuple(int(x) for x in config["emulate.kafka.version"].split("."))
        self.emulate_older_than_2_5 = version < (2, 5)

    @property
    def controller_id(self) -> int:
        return next((n.node_id for n in self.live_nodes), -1)

    @property
    def live_nodes(self) -> list[NodeRegistration]:
        """The nodes a client can see in Metadata: a paused node is listed until its
        session times out and it is fenced, as KRaft lists unfenced brokers only."""
        return [n for n in self.nodes if n.is_up and not n.fenced]

    def leader_of(self, topic: str, partition: int) -> int:
        return self.replicas.leader_of(topic, partition)

    def leadership(self, topic: str, partition: int) -> Leadership | None:
        return self.replicas.get(topic, partition)

    def node(self, node_id: int) -> NodeRegistration | None:
        for n in self.nodes:  # a plain loop (no generator): asked several times per transaction
            if n.node_id == node_id:
                return n
        return None

    def default_replication_factor(self, setting: str = "default.replication.factor") -> int:
        """A setting's replication factor, capped at the node count; left unset, a
        multi-node cluster replicates user topics up to three times."""
        if setting == "default.replication.factor" and setting not in self.config.explicit:
            return min(3, len(self.nodes))
        return max(1, min(self.config[setting], len(self.nodes)))

    # partitions ----------------------------------------------------------------
    @property
    def clean_shutdown_path(self) -> Path:
        return self.data_dir / "meta" / CLEAN_SHUTDOWN_FILE

    def open_all(self) -> None:
        """Readies every known partition for its first use without opening it: its
        leadership declared (assigned when first asked for); a topic create, partition
        add or delete a crash stopped midway completed or rolled back from the intent
        journal (``topic_intents``), which names only those: no partition directory is
        listed, except once for a data directory without a journal yet. The coordinator topics' partitions
        open as their coordinators load them, in the background once the listeners are
        up (broker.coordinators.coordinator_topic).

        A partition opened later recovers as it would have here: after a clean shutdown
        its index files are trusted; otherwise its active segment is validated from its
        recovery point (``partition``).
        """
        started = self.clock.now_ms()
        self._clean_start = self._take_clean_shutdown_marker()
        self._finish_recorded_intents()
        for topic in self.topics.by_name.values():  # leaderships assigned when first asked for
            self.replicas.declare(topic.name, topic.partitions,
                                  self.default_replication_factor(_replication_setting(topic.name)))
        known = sum(t.partitions for t in self.topics.by_name.values())
        if known:
            log.info("%d partitions known, readied in %d ms after %s; each opens on first use (a coordinator "
                     "topic's as its coordinator loads it)", known, self.clock.now_ms() - started,
                     "a clean shutdown (index files trusted)" if self._clean_start
                     else "an unclean shutdown (active segments validated beyond their recovery points)")

    def _finish_recorded_intents(self) -> None:
        try:
            found = self.intents.load()
        except (ValueError, KeyError, TypeError) as e:
            log.warning("%s is unreadable (%s): the partition directories are checked against the registry "
                        "instead", self.intents.path, e)
            found = None  # there, but unreadable: rewritten below
        if not found:
            # written by a version without the journal: its half-made topics are found
            # by one scan, then the (empty) journal says there is nothing to scan for.
            # A data directory with no topic and no journal (a fresh one) writes none:
            # scanning it again costs nothing, and its first create writes the journal
            # before any directory.
            self._repair_half_made_topics()
            if found is None or self.topics.by_name:
                self._clear_all_intents()
            return
        for intent in self.intents.pending:
            topic = self.topics.by_name.get(intent.topic)
            outcome = resolve(intent, None if topic is None else topic.partitions,
                              None if topic is None else topic.topic_id.hex)
            remove = [self.partition_dir(intent.topic, i) for i in outcome.remove]
            remove += [self.data_dir / intent.aside_name(i) for i in outcome.remove_aside]
            _remove_dirs([d for d in remove if d.is_dir() and _holds_only_partition_files(d)])
            for i in outcome.make:
                self.partition_dir(intent.topic, i).mkdir(exist_ok=True)
            if outcome.make:
                fsync_dir(self.data_dir)
            log.warning("%s", outcome.message)
        if self.intents.pending:
            self._clear_all_intents()

    def _clear_all_intents(self) -> None:
        try:
            self.intents.clear_all()
        except OSError as e:  # what was resolved resolves the same way again
            log.warning("could not write %s (%s): the next start checks again", self.intents.path, e)

    def _repair_half_made_topics(self) -> None:
        """The one-time scan of a data directory from before the intent journal: partition
        directories the registry does not name are removed (the registry entry is written
        last when creating, first when deleting); directories missing for a registered
        topic are created."""
        # Set operations on names: a start compares every partition's directory, so the
        # per-name work is kept to the few names that differ.
        names = set(os.listdir(self.data_dir))
        expected = {f"{t.name}-{i}" for t in self.topics.by_name.values() for i in range(t.partitions)}
        present: dict[str, set[int]] = {}
        for entry in names - expected:
            name, dash, index = entry.rpartition("-")
            if dash and name and index.isdigit() and str(int(index)) == index \
                    and os.path.isdir(self.data_dir / entry) and not os.path.islink(self.data_dir / entry):
                present.setdefault(name, set()).add(int(index))
        for name, indexes in sorted(present.items()):
            topic = self.topics.by_name.get(name)
            extra = sorted(i for i in indexes if topic is None or i >= topic.partitions)
            extra = [i for i in extra if _holds_only_partition_files(self.partition_dir(name, i))]
            if extra:
                _remove_dirs([self.partition_dir(name, i) for i in extra])
                log.warning("removed %d partition directories of %s %s (%s) left by a topic create, partition "
                            "add or delete that did not finish", len(extra),
                            "unknown topic" if topic is None else "topic", name, _ranges(extra))
        absent = expected - names
        for topic in list(self.topics.by_name.values()) if absent else ():
            missing = [i for i in range(topic.partitions) if f"{topic.name}-{i}" in absent]
            if missing:
                for i in missing:
                    self.partition_dir(topic.name, i).mkdir(parents=True, exist_ok=True)
                fsync_dir(self.data_dir)
                log.warning("completed topic %s: created its %d missing partition directories (%s)",
                            topic.name, len(missing), _ranges(missing))

    @property
    def recovery_points_path(self) -> Path:
        return self.data_dir / "meta" / RECOVERY_POINTS_FILE

    @property
    def _start_points(self) -> dict[tuple[str, int], int]:
        """The recovery points the last run recorded, read when first needed (a partition
        opens, a checkpoint or a stop records them): a start that opens no partition does
        not parse a line per partition."""
        if self._recorded_points is None:
            points = read_recovery_points(self.recovery_points_path)
            stale = [key for key in points if not self.has_partition(*key)]  # deleted before a crash
            for key in stale:
                del points[key]
            self._stale_point_topics.update(topic for topic, _ in stale)
            self._recorded_points = points
        return self._recorded_points

    def _write_recovery_points(self) -> bool:
        # partitions not opened this run keep the point they had at start
        points = {key: p for key, p in self._start_points.items() if key not in self.partitions}
        points.update((key, p.recovery_point) for key, p in self.partitions.items() if p.recovery_point is not None)
        if not points and not self.recovery_points_path.exists():
            self._stale_point_topics.clear()
            return True  # none to record and no file: reading none gives the same empty set
        try:
            write_recovery_points(self.recovery_points_path, points)
        except OSError as e:
            log.warning("could not write %s: %s", self.recovery_points_path, e)
            return False
        self._stale_point_topics.clear()
        return True

    def _drop_stale_points(self, name: str) -> None:
        """Before partitions of ``name`` are made: points the file still holds for a topic
        of that name that is gone are written away first, so that a crash cannot hand
        them to the new partitions (a delete leaves them to the next write)."""
        self._start_points  # read once per run: what it holds of unknown topics is noted
        if name in self._stale_point_topics and not self._write_recovery_points():
            raise TopicError("KAFKA_STORAGE_ERROR", f"could not rewrite {self.recovery_points_path.name}, which "
                                                    f"still records partitions of an earlier topic {name}")

    async def checkpoint_recovery_points(self) -> None:
        """Moves every partition's recovery point to its log end (log fsynced, producer
        state snapshotted there), off the event loop, then records them all
        (log.flush.offset.checkpoint.interval.ms): a crash recovery validates only
        what was appended after."""
        taken = [c for p in list(self.partitions.values()) if (c := p.checkpoint()) is not None]
        if taken:
            write = self._checkpoint_write = asyncio.ensure_future(asyncio.to_thread(
                lambda: fsync_all([path for c in taken for path in c.write()])))
            write.add_done_callback(lambda f: f.cancelled() or f.exception())  # read even if nobody awaits it
            try:
                await asyncio.shield(write)  # a stopping broker cancels us, not the thread
            except OSError as e:  # a segment or partition went away meanwhile: next time
                log.info("recovery point checkpoint skipped: %s", e)
                return
            for c in taken:
                c.partition.recovery_point = c.end
        self._write_recovery_points()

    async def wait_for_file_threads(self) -> None:
        """Lets a checkpoint's thread finish its snapshot files before the logs close and
        write theirs, deleted topics' directories finish going and new ones finish being
        made (their intents cleared)."""
        write = self._checkpoint_write
        for work in ([write] if write is not None else []) + list(self._file_work):
            if not work.done():
                try:
                    await asyncio.shield(work)
                except (OSError, TopicError):
                    pass
        await asyncio.sleep(0)  # the removals' done callbacks run

    def _take_clean_shutdown_marker(self) -> bool:
        """Removes the marker; its removal is made durable by a thread (an fsync of the
        directory waits for the filesystem's journal, which other writers on the machine
        may hold up), which every partition's first open waits for: no file the marker
        vouches for changes before a crash could no longer bring the marker back."""
        path = self.clean_shutdown_path
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        import concurrent.futures
        import threading

        done = self._marker_removed = concurrent.futures.Future()

        def sync() -> None:
            try:
                fsync_dir(path.parent)
            except BaseException as e:
                done.set_exception(e)
            else:
                done.set_result(None)

        threading.Thread(target=sync, name="clean-shutdown-marker").start()
        return True

    def _wait_for_marker_removal(self) -> None:
        """Before a partition's first open: the marker's removal made durable (if the
        thread's fsync failed, once more here: OSError, the open's, if it fails again)."""
        try:
            self._marker_removed.result()
        except OSError:
            fsync_dir(self.clean_shutdown_path.parent)
        self._marker_removed = None

    async def ready_to_open(self) -> None:
        """What a partition's first open waits for (the clean-shutdown marker's removal
        made durable), awaited without holding up the event loop."""
        done = self._marker_removed
        if done is not None:
            try:
                await asyncio.wrap_future(done)
            except OSError:
                pass  # the open tries again, and raises

    def _open_partition(self, topic: TopicInfo, index: int) -> Partition:
        # The storage machinery loads with the first partition: a fresh broker answers
        # its first Metadata without importing it.
        from broker.log.partition import Partition

        if self._marker_removed is not None:
            self._wait_for_marker_removal()
        key = (topic.name, index)
        part = Partition.open(
            topic.name, index, self.partition_dir(topic.name, index), self.log_config(topic), self.clock.now_ms(),
            self.emulate_older_than_2_5,
            # not opened since start: its files are as the last run left them
            self._clean_start and topic.name not in self.created_this_run, self._start_points.get(key),
        )
        self.partitions[key] = part
        if self.history.enabled and topic.name not in INTERNAL_TOPICS:  # the timeline draws users' partitions
            part.on_offsets_moved = self.history.offsets_moved
            self.history.opened(part)  # an LSO held from before this run: no move will tell it
        leadership = self.replicas.get(topic.name, index)
        if leadership is not None:
            part.set_leader_epoch(leadership.leader_epoch)
        return part

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def has_partition(self, topic: str, index: int) -> bool:
        info = self.topics.by_name.get(topic)
        return info is not None and 0 <= index < info.partitions

    def partition(self, topic: str, index: int) -> Partition | None:
        """The partition, opened (and recovered) on its first use; None when the topic
        or the index is unknown. OSError when its files cannot be opened (out of file
        descriptors, a failing disk): the caller answers KAFKA_STORAGE_ERROR."""
        part = self.partitions.get((topic, index))
        if part is not None:
            return part
        info = self.topics.by_name.get(topic)
        if info is None or not 0 <= index < info.partitions:
            return None
        return self._open_partition(info, index)

    def partition_size(self, topic: str, index: int) -> int:
        """Bytes of the partition's segments; read from the directory when the partition
        is not open (DescribeLogDirs does not open it)."""
        part = self.partitions.get((topic, index))
        if part is not None:
            return part.log.size_bytes
        try:
            with os.scandir(self.partition_dir(topic, index)) as entries:
                return sum(e.stat().st_size for e in entries if e.name.endswith(".log") and e.name[:20].isdigit())
        except OSError:
            return 0

    def unopened_log_end(self, topic: str, index: int) -> int | None:
        """The log end offset of a partition not opened this run, where it is known
        without opening it: 0 for a topic created this run (nothing wrote to it), the
        recorded recovery point after a clean shutdown (it was the log end at that stop,
        and nothing has written since); None otherwise (after a crash the log may hold
        more than its recovery point)."""
        if topic in self.created_this_run:
            return 0
        return self._start_points.get((topic, index)) if self._clean_start else None

    @property
    def clean_start(self) -> bool:
        """Whether the last run ended with a clean shutdown (open_all tells)."""
        return self._clean_start

    async def open_remaining(self) -> None:
        """After an unclean shutdown: opens (so validates beyond its recovery point) every
        partition no request has opened yet, one at a time between requests."""
        opened = 0
        for topic, index in self.partition_keys():
            if (topic, index) in self.partitions:  # a request opened it: no turn spent on it
                continue
            await asyncio.sleep(0)  # the requests' turn before each open, the first too
            if (topic, index) in self.partitions:  # opened by a request in that turn
                continue
            try:
                if self.partition(topic, index) is not None:
                    opened += 1
            except OSError as e:
                log.warning("could not open %s-%d to validate it: %s (validated at its first use)", topic, index, e)
        if opened:
            log.info("validated the %d partitions not used since the unclean shutdown", opened)

    async def partitions_with_data(self, wanted: Callable[[LogConfig], bool]):
        """The partitions whose log config is ``wanted`` (retention, compaction), those not
        open yet opened when their directory holds any record; between partitions the
        event loop serves requests."""
        for n, topic in enumerate(list(self.topics.by_name.values())):
            if not wanted(self.log_config(topic)):
                continue
            for index in range(topic.partitions):
                if (n + index) % 64 == 63:
                    await asyncio.sleep(0)
                part = self.partitions.get((topic.name, index))
                if part is None:
                    if topic.name not in self.topics.by_name or not self.partition_size(topic.name, index):
                        continue
                    try:
                        part = self.partition(topic.name, index)
                    except OSError as e:
                        log.warning("could not open %s-%d for retention or compaction: %s", topic.name, index, e)
                        continue
                if part is not None and wanted(part.log.config):
                    yield part

    def partition_keys(self) -> list[tuple[str, int]]:
        """Every partition of every topic, opened or not."""
        return [(t.name, i) for t in self.topics.by_name.values() for i in range(t.partitions)]

    def log_config(self, topic: TopicInfo) -> LogConfig:
        broker = self.config
        cached = self._topic_log_configs.get(topic.name)
        if cached is not None and cached[0] is topic and cached[1] is broker.dynamic \
                and cached[2] is broker.dynamic_default:
            return cached[3]
        from broker.log.partition_log import LogConfig

        config = LogConfig.from_topic_configs(effective_topic_config(topic, broker))
        # equal configs (most partitions') share one object; configs are frozen
        config = self._log_configs.setdefault(config, config)
        self._topic_log_configs[topic.name] = (topic, broker.dynamic, broker.dynamic_default, config)
        return config

    def max_message_bytes(self, topic: str) -> int:
        info = self.topics.by_name[topic]
        return int(info.configs.get("max.message.bytes", self.config["message.max.bytes"]))

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas, else the broker's."""
        info = self.topics.by_name.get(topic)
        default = self.config["min.insync.replicas"]
        return int(info.configs.get("min.insync.replicas", default)) if info is not None else default

    # topics --------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str | None] | None = None,
        validate_only: bool = False,
        assignments: dict[int, list[int]] | None = None,
    ) -> TopicInfo | None:
        """Creates a topic with its directories made here, on the caller's thread: for the
        small topics a broker makes itself (coordinator topics, auto-creation, a streams
        group's internal topics) and for callers without an event loop."""
        plan = self.check_create(name, partitions, replication_factor, configs, assignments)
        if validate_only:
            return None
        intent = self._begin_making(plan.intent)
        try:
            self._made_dirs(intent, *_make_dirs(self.data_dir, intent))
            return self._register_topic(plan)
        finally:
            self._making.discard(name)

    async def create_off_loop(self, plan: CreatePlan) -> TopicInfo:
        """CreateTopics' create of a topic ``check_create`` passed: recorded on the loop, its
        directories made by a thread while the broker goes on answering, then registered
        on the loop. It finishes even if the requester goes away meanwhile (as Kafka's
        controller does)."""
        return await self._finish_off_loop(self._begin_making(plan.intent), lambda: self._register_topic(plan))

    def check_create(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str | None] | None,
                     assignments: dict[int, list[int]] | None) -> CreatePlan:
        """What a create would make (-1: the broker's default), or TopicError: Kafka's
        checks, in its order."""
        validate_topic_name(name)
        if name in self.topics.by_name or name in self._making:
            raise TopicError("TOPIC_ALREADY_EXISTS", f"Topic '{name}' already exists.")
        if assignments:
            partitions, replication_factor = self._check_assignments(assignments)
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if partitions <= 0:
            raise TopicError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
        if replication_factor == -1:
            replication_factor = self.default_replication_factor(_replication_setting(name))
        if replication_factor <= 0:
            raise TopicError("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0.")
        if replication_factor > max(len(self.nodes), 1):
            raise TopicError(
                "INVALID_REPLICATION_FACTOR",
                f"Unable to replicate the partition {replication_factor} time(s): "
                f"The target replication factor of {replication_factor} cannot be reached because only "
                f"{max(len(self.nodes), 1)} broker(s) are registered.",
            )
        checked = validate_topic_configs(configs or {})
        intent = Intent(CREATE, name, 0, partitions, tuple(sorted(checked.items())))
        return CreatePlan(intent, replication_factor, checked, assignments or {})

    def _register_topic(self, plan: CreatePlan) -> TopicInfo:
        """Its directories made: the registry names the topic (the commit point)."""
        intent = plan.intent
        name, partitions = intent.topic, intent.end
        try:
            topic = self.topics.add(name, partitions, plan.configs)  # the commit point
        except OSError as e:
            self._remove_partition_dirs(intent)
            log.warning("could not record topic %s (%s): nothing created", name, e)
            raise TopicError("KAFKA_STORAGE_ERROR", f"could not record topic {name}: {e}") from None
        self._clear(intent)
        self.created_this_run.add(name)
        for i in range(partitions):
            self.replicas.assign(name, i, plan.replication_factor, plan.assignments.get(i))
        self._save_leaderships([(name, i) for i in range(partitions)])
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def _begin_making(self, intent: Intent) -> Intent:
        """A create or add starts: the topic's name is taken until it ends (another create
        of it is refused, an add of it waits), its intent recorded."""
        self._drop_stale_points(intent.topic)
        self._begin(intent)
        self._making.add(intent.topic)
        return intent

    async def _finish_off_loop(self, intent: Intent, register: Callable[[], TopicInfo]) -> TopicInfo:
        async def finish() -> TopicInfo:
            try:
                self._made_dirs(intent, *await asyncio.to_thread(_make_dirs, self.data_dir, intent))
                return register()
            finally:
                self._making.discard(intent.topic)
                self._topic_changed.set()
                self._topic_changed = asyncio.Event()

        work = asyncio.ensure_future(finish())
        self._file_work.add(work)
        work.add_done_callback(self._file_work.discard)
        work.add_done_callback(lambda f: f.cancelled() or f.exception())  # read even if nobody awaits it
        return await asyncio.shield(work)

    def _save_leaderships(self, keys: list[tuple[str, int]]) -> None:
        """After the registry has committed a change: a failure to record the leaderships
        does not undo it (start-up assigns what partitions.json lacks)."""
        try:
            self.replicas.save(keys)
        except OSError as e:
            log.warning("could not record the partition leaderships (%s): assigned again at the next start", e)

    def _begin(self, intent: Intent) -> Intent:
        """Records the intent durably before any directory is touched; a crash from
        here until ``_clear`` is completed or rolled back at the next start."""
        try:
            self.intents.begin(intent)
        except OSError as e:
            log.warning("could not record the %s of topic %s (%s): nothing changed", intent.op, intent.topic, e)
            raise TopicError("KAFKA_STORAGE_ERROR", f"could not record the {intent.op} of {intent.topic}: {e}") from None
        return intent

    def _clear(self, intent: Intent) -> None:
        """After the step's commit point: failing to clear only leaves the next start
        an intent that resolves to what is already there."""
        try:
            self.intents.clear(intent)
        except OSError as e:
            log.warning("could not clear the %s of topic %s from the intent journal (%s): the next start "
                        "checks it", intent.op, intent.topic, e)

    def _remove_partition_dirs(self, intent: Intent, made: int | None = None) -> None:
        """Removes the directories of the intent's first ``made`` partitions (all by
        default): a create or add rolled back, a delete finished. Then clears the intent,
        unless one is left (the next start removes it)."""
        end = intent.end if made is None else intent.first + made
        dirs = [self.partition_dir(intent.topic, i) for i in range(intent.first, end)]
        _remove_dirs([d for d in dirs if d.is_dir()])
        if not any(d.is_dir() for d in dirs):
            self._clear(intent)

    def _remove_deleted_dirs(self, intent: Intent) -> None:
        """A delete's directories renamed aside at once (the topic's name is free for a
        create), then removed by a thread while the broker goes on answering (Kafka too
        renames them and removes them later); the intent is cleared when they are gone.
        Where a rename fails, or there is no event loop, they are removed here."""
        aside: list[Path] = []
        try:
            for i in range(intent.first, intent.end):
                path = self.partition_dir(intent.topic, i)
                if path.is_dir():
                    target = path.with_name(intent.aside_name(i))
                    path.rename(target)
                    aside.append(target)
            if aside:
                fsync_dir(self.data_dir)
        except OSError as e:
            log.warning("could not rename the directories of deleted topic %s aside (%s): removing them now",
                        intent.topic, e)
            _remove_dirs(aside)
            self._remove_partition_dirs(intent)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or not aside:
            _remove_dirs(aside)
            self._clear(intent)
            return
        removal = loop.run_in_executor(None, _remove_dirs, aside)
        self._file_work.add(removal)

        def removed(done) -> None:
            self._file_work.discard(done)
            if done.cancelled() or done.exception() is not None:
                log.warning("could not remove the directories of deleted topic %s (%s): the next start "
                            "removes them", intent.topic, None if done.cancelled() else done.exception())
            else:
                self._clear(intent)

        removal.add_done_callback(removed)

    def _made_dirs(self, intent: Intent, made: int, error: OSError | None) -> None:
        """After ``_make_dirs``: on its failure removes those made and raises TopicError
        (KAFKA_STORAGE_ERROR), so nothing of them is left."""
        if error is None:
            return
        self._remove_partition_dirs(intent, made)
        log.warning("could not create the partition directories of %s (%s): nothing created", intent.topic, error)
        raise TopicError("KAFKA_STORAGE_ERROR",
                         f"could not create partition {intent.topic}-{intent.first + made}: {error}")

    def ensure_topic(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
        """Creates an internal topic if it is missing (coordinator topics)."""
        topic = self.topics.by_name.get(name)
        return topic if topic is not None else self.create_topic(name, partitions, -1, configs)

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self.topics.by_name.get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.")
        if not self.config["delete.topic.enable"]:
            raise TopicError("TOPIC_DELETION_DISABLED", "Topic deletion is disabled.")
        intent = self._begin(Intent(DELETE, name, 0, topic.partitions, aside=topic.topic_id.hex))
        try:
            self.topics.remove(name)  # the commit point, before any directory goes
        except OSError as e:
            self._clear(intent)
            raise TopicError("KAFKA_STORAGE_ERROR", f"could not record the delete of {name}: {e}") from None
        self._topic_log_configs.pop(name, None)
        for i in range(topic.partitions):
            part = self.partitions.pop((name, i), None)
            if part is not None:
                part.discard()
            self.replicas.forget(name, i)
            if self._recorded_points is not None:  # else the read leaves them out
                self._recorded_points.pop((name, i), None)
        # its points stay in the file until the next write (periodic, at stop, or before
        # a topic of the name is made): a delete does not rewrite every partition's
        self._stale_point_topics.add(name)
        self._remove_deleted_dirs(intent)
        self.created_this_run.discard(name)
        self.replicas.save([])  # the forgotten partitions only
        log.info("deleted topic %s", name)
        return topic

    async def add_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None,
                             validate_only: bool = False) -> TopicInfo | None:
        """Grows a topic to ``count`` partitions, the new ones on ``assignments`` (replica
        lists, in the order given) or spread as at creation; checked as Kafka's controller
        checks, in its order and with its messages. Their directories are made by a thread
        (as ``create_off_loop``); an add of a topic still being made or grown waits
        for that first, so it is checked against what that left."""
        while name in self._making:
            await self._topic_changed.wait()
        topic, replication_factor = self._check_add(name, count, assignments)
        if validate_only:
            return None
        intent = self._begin_making(Intent(ADD, name, topic.partitions, count))
        return await self._finish_off_loop(
            intent, lambda: self._register_partitions(topic, intent, replication_factor, assignments))

    def _check_add(self, name: str, count: int,
                   assignments: list[list[int]] | None) -> tuple[TopicInfo, int]:
        """The topic to grow and its replication factor, or TopicError."""
        topic = self.topics.by_name.get(name)
        if topic is None:
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", None)
        if count == topic.partitions:
            raise TopicError("INVALID_PARTITIONS", f"Topic already has {topic.partitions} partition(s).")
        if count < topic.partitions:
            raise TopicError("INVALID_PARTITIONS", f"The topic {name} currently has {topic.partitions} partition(s); "
                                                   f"{count} would not be an increase.")
        first = topic.partitions
        additional = count - first
        replication_factor = len(self.replicas.get(name, 0).replicas)
        if assignments is not None:
            if len(assignments) != additional:
                raise TopicError("INVALID_REPLICA_ASSIGNMENT", f"Attempted to add {additional} additional partition(s), "
                                                               f"but only {len(assignments)} assignment(s) were specified.")
            for offset, replicas in enumerate(assignments):
                self._check_manual_assignment(replicas, replication_factor)
                if not any(r in self.replicas.up for r in replicas):
                    raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                                     f"All brokers specified in the manual partition assignment for partition "
                                     f"{first + offset} are fenced or in controlled shutdown.")
        return topic, replication_factor

    def _register_partitions(self, topic: TopicInfo, intent: Intent, replication_factor: int,
                             assignments: list[list[int]] | None) -> TopicInfo:
        """Their directories made: the registry counts the new partitions (the commit point),
        unless the topic was deleted meanwhile (then they go)."""
        name, first, count = intent.topic, intent.first, intent.end
        if self.topics.by_name.get(name) is not topic:
            self._remove_partition_dirs(intent)
            raise TopicError("UNKNOWN_TOPIC_OR_PARTITION", f"Topic {name} was deleted while its partitions were added.")
        try:
            topic = self.topics.set_partitions(name, count)  # the commit point
        except OSError as e:
            self._remove_partition_dirs(intent)
            raise TopicError("KAFKA_STORAGE_ERROR", f"could not record the new partitions of {name}: {e}") from None
        self._clear(intent)
        for k, i in enumerate(range(first, count)):
            self.replicas.assign(name, i, replication_factor, list(assignments[k]) if assignments else None)
        self._save_leaderships([(name, i) for i in range(first, count)])
        return topic

    def _check_manual_assignment(self, replicas: list[int], replication_factor: int) -> None:
        """Kafka's checks of one partition's replica list: the brokers in ascending order."""
        if not replicas:
            raise TopicError("INVALID_REPLICA_ASSIGNMENT", "The manual partition assignment includes an empty replica list.")
        known = {n.node_id for n in self.nodes}
        previous = None
        for broker in sorted(replicas):
            if broker not in known:
                raise TopicError("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes broker "
                                                               f"{broker}, but no such broker is registered.")
            if broker == previous:
                raise TopicError("INVALID_REPLICA_ASSIGNMENT", f"The manual partition assignment includes the broker "
                                                               f"{broker} more than once.")
            previous = broker
        if len(replicas) != replication_factor:
            raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                             f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
                             f"but this is not consistent with previous partitions, which have {replication_factor} "
                             f"replica(s).")

    def _check_assignments(self, assignments: dict[int, list[int]]) -> tuple[int, int]:
        """(partition count, replication factor) of explicit CreateTopics assignments."""
        if sorted(assignments) != list(range(len(assignments))):
            raise TopicError("INVALID_REPLICA_ASSIGNMENT", "partitions must be numbered from 0 without gaps")
        sizes = {len(r) for r in assignments.values()}
        known = {n.node_id for n in self.nodes}
        for index, replicas in assignments.items():
            if not replicas or len(set(replicas)) != len(replicas):
                raise TopicError("INVALID_REPLICA_ASSIGNMENT", f"partition {index} has no or duplicate replicas")
            if not set(replicas) <= known:
                raise TopicError("INVALID_REPLICA_ASSIGNMENT",
                                 f"partition {index} names unknown brokers {sorted(set(replicas) - known)}")
        if len(sizes) != 1:
            raise TopicError("INVALID_REPLICA_ASSIGNMENT", "all partitions must have the same number of replicas")
        return len(assignments), sizes.pop()

    def reassign_partition(self, topic: str, index: int, replicas: list[int] | None = None,
                           leader: int | None = None) -> Leadership:
        """New replicas and/or leader for a partition (AlterPartitionReassignments, the
        control API). Completes at once: every node already has the data."""
        if topic not in self.topics.by_name:
            raise ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION", f"no topic {topic!r}", "topic", 404)
        state = self.leadership(topic, index)
        if state is None:
            raise ReassignmentError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has no partition {index}", "partition", 404)
        known = {n.node_id for n in self.nodes}
        if replicas is not None:
            if not replicas or len(set(replicas)) != len(replicas):
                raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT",
                                        "replicas must be a non-empty list of distinct node ids", "replicas")
            if not set(replicas) <= known:
                raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT",
                                        f"replicas names unknown nodes {sorted(set(replicas) - known)}", "replicas")
        new_replicas = replicas if replicas is not None else state.replicas
        if leader is not None:
            if leader not in known:
                raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT", f"no node {leader}", "leader", 404)
            if leader not in new_replicas:
                raise ReassignmentError("INVALID_REPLICA_ASSIGNMENT",
                                        f"node {leader} is not a replica of {topic}-{index} (replicas {new_replicas})",
                                        "leader")
            if not self.node(leader).is_up:
                raise ReassignmentError("PREFERRED_LEADER_NOT_AVAILABLE", f"node {leader} is stopped", "leader", 409)
        return self.replicas.reassign(topic, index, replicas, leader)

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        topic = self.topics.set_configs(name, validate_topic_configs(configs))
        cfg = self.log_config(topic)
        for i in range(topic.partitions):
            part = self.partitions.get((name, i))  # one not opened yet gets it at open
            if part is not None:
                part.log.update_config(cfg)
        return topic

    def close(self) -> None:
        """Closes every partition (each flushes and snapshots), makes what they wrote
        durable in one fsync pass, then writes the clean shutdown marker so the next
        start need not re-scan the active segments."""
        unsynced: list[Path] = []
        for part in self.partitions.values():
            unsynced += part.close(sync=False)
        try:
            fsync_all(unsynced)
        except OSError as e:
            log.error("could not make the partitions' files durable at shutdown (%s): no clean-shutdown marker, "
                      "the next start validates them", e)
            return
        for part in self.partitions.values():
            part.recovery_point = part.log.log_end_offset  # flushed, snapshotted there
        self._write_recovery_points()
        for registry in (self.topics, self.replicas):
            try:
                registry.compact()
            except OSError as e:  # the journal still holds every change
                log.warning("could not fold a metadata journal into its file: %s", e)
        if not self._clean_start:
            unchecked = sum(1 for key in self.partition_keys()
                            if key not in self.partitions and key[0] not in self.created_this_run)
            if unchecked:
                # the marker would let the next start trust files nothing has validated
                log.info("no clean-shutdown marker: %d partitions not opened since the unclean shutdown are "
                         "validated at the next start", unchecked)
                return
        replace_atomically(self.clean_shutdown_path, b"", sync_dir=True)


# What a partition directory may hold (segments, indexes, snapshots are named by a
# 20-digit offset): start-up removes a leftover directory only when it holds nothing else.
_PARTITION_FILES = frozenset({"leader-epoch-checkpoint", "aborted-transactions.index", "log-start-offset",
                              "cleaner-offset-checkpoint"})


def _holds_only_partition_files(directory: Path) -> bool:
    for name in os.listdir(directory):
        stem = name.removesuffix(".tmp")
        if stem not in _PARTITION_FILES and not (len(stem) > 20 and stem[:20].isdigit() and stem[20] == "."):
            return False
    return True


def _make_dirs(data_dir: Path, intent: Intent) -> tuple[int, OSError | None]:
    """Makes the directories of the intent's partitions in order (as ``partition_dir``
    names them), then syncs ``data_dir``: how many were made, and the error that stopped
    it (None when all were)."""
    made = 0
    prefix = f"{data_dir}{os.sep}{intent.topic}-"
    try:
        for i in range(intent.first, intent.end):
            os.mkdir(f"{prefix}{i}")
            made += 1
        fsync_dir(data_dir)
    except OSError as e:
        return made, e
    return made, None


def _remove_dirs(paths: list[Path]) -> None:
    if not paths:
        return
    import shutil  # here, not at start-up: it loads bz2, lzma and zlib

    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    fsync_dir(paths[0].parent)


def _ranges(indexes: list[int]) -> str:
    """"0-3, 7" for [0, 1, 2, 3, 7]."""
    out: list[str] = []
    start = prev = indexes[0]
    for i in indexes[1:] + [None]:
        if i is None or i != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = i
        prev = i
    return ", ".join(out)


def _replication_setting(topic: str) -> str:
    return {CONSUMER_OFFSETS: "offsets.topic.replication.factor",
            TRANSACTION_STATE: "transaction.state.log.replication.factor",
            SHARE_GROUP_STATE: "share.coordinator.state.topic.replication.factor"}.get(topic, "default.replication.factor")
