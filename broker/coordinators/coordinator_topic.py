"""A coordinator's internal topic in the broker (__consumer_offsets, __transaction_state):
the I/O around the sans-IO ``coordinator.runtime.CoordinatorRuntime``.

It creates the topic on first use (as Kafka does), loads the partitions this node
leads in the background (requests for a partition not yet loaded get
COORDINATOR_LOAD_IN_PROGRESS), loads and unloads single partitions when their
leadership moves (with the new leader epoch as the coordinator epoch), and is the
runtime's ``CoordinatorLog`` over the topic's partitions. Every runtime event runs to
completion without awaiting, so two nodes never interleave on one partition.

Each append carries the coordinator epoch the partition was loaded at, and the
partition refuses it once its leader epoch has moved on (as Kafka's replica manager
refuses a deposed leader): the runtime then resigns the partition and the request is
answered NOT_COORDINATOR, with nothing of it applied.

It also times the runtime's timers, on the broker's clock: a clock timer is set for
the next one due (set again when ``wake_timers`` says deadlines may have moved), and
when it fires, each due ``TimerEvent`` goes through the service's write path
(``write_timer_event``), the one requests take: run at once, in the loop turn after
the clock's timer (as a request's handler runs, so a request sent after a clock jump
finds it done), then its write waits for the ISR as a request's does. A paused node's
timers do not fire until it resumes; a stopped node's end with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from broker.cluster.cluster import Cluster
from broker.log.partition import ProduceRejected
from coordinator.runtime import AppendRefused, AppendUnavailable, CoordinatorRuntime, StateMachine, Timer, TimerEvent
from protocol.records import RecordBatch

log = logging.getLogger(__name__)

_REOPEN_DELAY_S = 1  # between attempts to open a coordinator partition that failed to open

# Never sleep longer than this between looks at the timers: a safety net, not a schedule.
_MAX_TIMER_SLEEP_S = 30.0


class CoordinatorTopic:
    def __init__(self, name: str, topic: str, partitions: int, topic_configs: dict[str, str],
                 machine: StateMachine, cluster: Cluster, node_id: int, perform: Callable[[Any], None],
                 timers: tuple[Timer, ...] = (),
                 write_timer_event: Callable[[TimerEvent], Awaitable[Any]] | None = None) -> None:
        """``timers``: the machine's; ``write_timer_event``: the service's write path,
        which runs a due timer's event through the runtime now and returns the wait for
        its write."""
        self.name = name
        self.topic = topic
        self.partition_count = partitions
        self.topic_configs = topic_configs
        self.cluster = cluster
        self.clock = cluster.clock
        self.node_id = node_id
        self.machine = machine
        self.runtime = CoordinatorRuntime(machine, self, perform, resign=self._resign, timers=timers)
        self._epochs: dict[int, int] = {}  # the coordinator epoch each partition was loaded at
        self._write_timer_event = write_timer_event
        self._timers_on = False
        self._timer = None  # the clock's timer for the next due one
        self._timer_due: float | None = None  # when it fires (monotonic seconds)
        self._timer_writes: set[asyncio.Task] = set()  # timer events waiting for the ISR (or a resume)
        self._loads: dict[int, asyncio.Task] = {}
        self._last_load: asyncio.Task | None = None
        self._started = False
        self.on_unload: Callable[[int], None] | None = None
        self.on_partition_loaded: Callable[[int], None] | None = None
        self.load_delay_s = 0.0  # fault injection: emulate.fault.coordinator.load.ms
        # Set: an append with fewer replicas in sync than the topic's min.insync.replicas
        # (``replication``'s rule, broker.cluster.replication.Replication) is refused with
        # this error, as an acks=all append is (NOT_ENOUGH_REPLICAS).
        self.too_few_in_sync = None
        self.replication = None
        # The node's serving event (cleared while it is paused): a hung node's coordinator
        # changes nothing until it resumes.
        self.serving: asyncio.Event | None = None

    # -- loading -------------------------------------------------------------------------

    def start(self) -> None:
        """Creates the topic on first use and starts loading, in the background, the
        partitions this node leads. Later calls do nothing, unless the topic was
        deleted meanwhile: then this node resigns its partitions (requests in flight get
        NOT_COORDINATOR) and starts over on a new topic, rather than writing to nothing."""
        if self._started and self.topic not in self.cluster.topics.by_name:
            log.warning("%s of node %d: %s was deleted; resigning and recreating it", self.name, self.node_id, self.topic)
            for p in self.runtime.loads.held():
                self.unload_partition(p)
            self._started = False
        if self._started:
            return
        self._started = True
        self.cluster.ensure_topic(self.topic, self.partition_count, self.topic_configs)
        if self.runtime.timers and not self._timers_on:
            self._timers_on = True
            self.runtime.start_timers(self.clock.now_ms())
            self.wake_timers()
        for p in range(self.partition_count):
            leadership = self.cluster.leadership(self.topic, p)
            if leadership is not None and leadership.leader == self.node_id:
                self.load_partition(p, leadership.leader_epoch)

    async def started(self) -> None:
        """``start``, then, for a topic created by this process, waits for its (short) load:
        the first request is served rather than told to come back."""
        self.start()
        if self.topic in self.cluster.created_this_run:
            loads = [t for t in self._loads.values() if not t.done()]
            if loads:
                await asyncio.shield(asyncio.gather(*loads, return_exceptions=True))

    def load_partition(self, partition: int, coordinator_epoch: int) -> None:
        """This node now leads ``partition`` (coordinator epoch ``coordinator_epoch``):
        requests for it get COORDINATOR_LOAD_IN_PROGRESS until its log is replayed, in
        the background."""
        self.unload_partition(partition, quiet=True)
        self._epochs[partition] = coordinator_epoch
        self.runtime.begin_load(partition, coordinator_epoch)
        task = asyncio.get_running_loop().create_task(self._load(partition, self._last_load))
        self._last_load = task
        self._loads[partition] = task
        task.add_done_callback(lambda t, p=partition: self._loads.pop(p, None) if self._loads.get(p) is t else None)

    async def _load(self, partition: int, previous: asyncio.Task | None) -> None:
        scheduled = self.clock.monotonic()  # Kafka's load time counts the wait for its turn too
        if self.load_delay_s:
            await self.clock.sleep(self.load_delay_s)  # the broker's clock: a test can jump past it
        # Logs found at start-up (a restart) load one partition at a time, in the order
        # given (as Kafka's loader thread), each in a loop turn of its own: the listener
        # answers Metadata, ApiVersions and the loaded partitions' requests between them
        # instead of after the last one. A topic this process created holds only what
        # this run wrote: its partitions load in the turn they are given, all together.
        if self.topic not in self.cluster.created_this_run:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            await asyncio.sleep(0)  # the previous load may have ended in this very turn
        # Opened here, in its turn, rather than before the listener starts: a restart
        # answers its first requests without waiting for every coordinator partition.
        await self.cluster.ready_to_open()
        while True:
            try:
                self.cluster.partition(self.topic, partition)
                break
            except OSError as e:  # out of descriptors, a failing disk: requests keep getting LOAD_IN_PROGRESS
                log.error("%s of node %d: cannot open %s-%d to load it (%s); trying again in %d s", self.name,
                          self.node_id, self.topic, partition, e, _REOPEN_DELAY_S)
                await self.clock.sleep(_REOPEN_DELAY_S)
        started = self.clock.now_ms()
        records = self.runtime.load(partition, started)
        if records is None:  # the load raised: the runtime logged it and refuses the partition
            return
        if self.on_partition_loaded is not None:
            self.on_partition_loaded(partition)
        self.wake_timers()  # loaded groups' members have session deadlines now
        if self.cluster.on_coordinator_loaded is not None:
            self.cluster.on_coordinator_loaded(self.topic, partition, self.clock.monotonic() - scheduled)
        if records:
            log.info("%s of node %d loaded %d records from %s-%d in %d ms", self.name, self.node_id, records,
                     self.topic, partition, self.clock.now_ms() - started)
        if self.runtime.written_at_load:
            log.info("%s of node %d wrote %d records to %s-%d on loading it: what timed out while no coordinator "
                     "served it (fenced and aborted before any request)", self.name, self.node_id,
                     self.runtime.written_at_load, self.topic, partition)

    def unload_partition(self, partition: int, quiet: bool = False) -> None:
        """The partition's leadership moved away: its state is dropped, parked requests
        learn NOT_COORDINATOR, and ``on_unload`` stops its work."""
        task = self._loads.pop(partition, None)
        if task is not None and not task.done():
            task.cancel()
        self._epochs.pop(partition, None)
        self.runtime.unload(partition)
        if self.on_unload is not None:
            self.on_unload(partition)
        if not quiet:
            log.info("%s of node %d unloaded %s-%d", self.name, self.node_id, self.topic, partition)

    def state_of(self, partition: int) -> str:
        """"loading", "loaded", "failed" or "not loaded" (for the control API)."""
        if partition in self._loads:
            return "loading"
        if partition in self.runtime.loads.failed():
            return "failed"
        return "loaded" if partition in self.runtime.loads.loaded() else "not loaded"

    def _resign(self, partition: int) -> None:
        log.warning("%s of node %d: an append to %s-%d was refused (coordinator epoch %s is stale); resigning it",
                    self.name, self.node_id, self.topic, partition, self._epochs.get(partition))
        self.unload_partition(partition)

    def stop_loading(self) -> None:
        for task in self._loads.values():
            task.cancel()
        self._loads.clear()

    def halt(self) -> None:
        """The node stopped or died: loads and timers end and every partition's state is
        dropped, in this turn (the log keeps what was appended; the new leaders reload it)."""
        self.stop_loading()
        self._timers_on = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._timer_writes:
            task.cancel()
        self._timer_writes.clear()
        for p in self.runtime.loads.held():
            self.runtime.unload(p)
        self._epochs.clear()

    async def wait_while_paused(self) -> None:
        if self.serving is not None and not self.serving.is_set():
            await self.serving.wait()

    # -- the runtime's timers ----------------------------------------------------------------

    def wake_timers(self) -> None:
        """Deadlines may have moved (a write or a load changed them): the clock's timer is
        set for the next one, if it is sooner than the one set."""
        if not self._timers_on:
            return
        deadline = self.runtime.next_timer_deadline()
        # at least a millisecond: a deadline that failed to move cannot spin the loop
        delay_s = _MAX_TIMER_SLEEP_S if deadline is None else \
            min(max(deadline - self.clock.now_ms(), 1) / 1000, _MAX_TIMER_SLEEP_S)
        due = self.clock.monotonic() + delay_s
        if self._timer is not None:
            if self._timer_due <= due:
                return  # it fires first (and sets the next one)
            self._timer.cancel()
        self._timer_due = due
        self._timer = self.clock.call_later(delay_s, self._timers_due)

    def _timers_due(self) -> None:
        # After the turn the clock's timer fires in: a clock jump fires every timer due
        # first, as each wakes its waiter, and its caller's next step finds the writes done.
        self._timer = None
        asyncio.get_running_loop().call_soon(self._fire_timers)

    def _fire_timers(self) -> None:
        if not self._timers_on:
            return
        if self.serving is not None and not self.serving.is_set():  # a hung node's timers do not fire
            self._spawn(self._fire_timers_on_resume())
            return
        try:
            for event in self.runtime.due_timer_events(self.clock.now_ms()):
                # each waits on its own: one write waiting for a cut-off follower holds up no other
                self._spawn(self._write_timer_event(event))
        except Exception:
            log.exception("%s of node %d: timers failed", self.name, self.node_id)
            self._timer_due = self.clock.monotonic() + 1
            self._timer = self.clock.call_later(1, self._timers_due)  # tried again in a second
            return
        self.wake_timers()

    async def _fire_timers_on_resume(self) -> None:
        await self.wait_while_paused()
        self._fire_timers()

    def _spawn(self, awaitable: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(awaitable)
        self._timer_writes.add(task)
        task.add_done_callback(self._timer_written)

    def _timer_written(self, task: asyncio.Task) -> None:
        self._timer_writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s of node %d: a timer's write failed", self.name, self.node_id, exc_info=task.exception())

    # -- the runtime's CoordinatorLog ------------------------------------------------------

    def append(self, partition: int, batch: RecordBatch, now_ms: int) -> int:
        epoch = self._epochs.get(partition)
        part = self.cluster.partition(self.topic, partition)
        if epoch is None or part is None:
            raise AppendRefused(f"{self.topic}-{partition} is not loaded by node {self.node_id}")
        if self.too_few_in_sync is not None:
            refused = self.replication.too_few_in_sync(self.topic, partition)
            if refused is not None:
                raise AppendUnavailable(self.too_few_in_sync, refused)
        try:
            return part.append(batch, now_ms, leader_epoch=epoch).base_offset
        except ProduceRejected as e:
            raise AppendRefused(str(e)) from None

    def write_marker(self, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, now_ms: int) -> None:
        """Raises ProduceRejected when the partition refuses the marker (fenced)."""
        self.cluster.partition(self.topic, partition).write_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, now_ms)

    def batches(self, partition: int) -> Iterable[RecordBatch]:
        return self.cluster.partition(self.topic, partition).log.batches()

    def chunks(self, partition: int) -> Iterable[tuple[bytes, int, int]]:
        return self.cluster.partition(self.topic, partition).log.chunks()
