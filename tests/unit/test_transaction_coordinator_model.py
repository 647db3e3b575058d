"""The transaction coordinator against a small reference model (hypothesis stateful).

Random interleavings of InitProducerId (new instances and KIP-360 bumps), AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, marker completion, transaction timeouts, transactional id
expiration and coordinator reloads (unload, replay from the log as a new coordinator,
with the in-memory last epoch lost as on disk). After every step the coordinator's
answer and every transactional id's state must equal what the model says.

A fence (InitProducerId on an Ongoing transaction, a timeout) keeps the fenced epoch as
the last epoch, as Kafka 4.x does with its transaction-version-2 aborts.

The model is written from Kafka's rules (TransactionCoordinator, TransactionMetadata),
not from the coordinator's code: a map from transactional id to (producer id, epoch,
last epoch, state, partitions, timestamps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kio.schema.errors import ErrorCode as E

from coordinator.partitioning import partition_for
from coordinator.runtime import CoordinatorRecord, CoordinatorRefused, CoordinatorRuntime, InMemoryLog
from coordinator.transaction import ProducerIdTaken, SendMarkers, TransactionConfig, TransactionCoordinator
from coordinator.transaction.coordinator import AddPartitionsResponse, EndTxnResponse, InitProducerIdResponse

IDS = ("tx-a", "tx-b", "tx-c")
PARTITIONS = 2
MAX_TIMEOUT = 60_000
EXPIRATION = 100_000
TOPIC_PARTITIONS = [("t", 0), ("t", 1), ("u", 0)]
GROUPS = ["g1", "g2"]
CONFIG = TransactionConfig(transaction_max_timeout_ms=MAX_TIMEOUT, transaction_state_log_num_partitions=PARTITIONS,
                           transactional_id_expiration_ms=EXPIRATION, offsets_topic_num_partitions=3)

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE = {True: "PrepareCommit", False: "PrepareAbort"}
COMPLETE = {True: "CompleteCommit", False: "CompleteAbort"}
IDLE = {EMPTY, COMPLETE[True], COMPLETE[False]}


def fenced(version: int, first: int):
    return E.producer_fenced if version >= first else E.invalid_producer_epoch


@dataclass(frozen=True)
class Txn:
    pid: int
    epoch: int
    last_epoch: int
    state: str
    partitions: frozenset = frozenset()
    timeout: int = 0
    start: int = -1
    updated: int = 0


@dataclass
class Model:
    txns: dict[str, Txn] = field(default_factory=dict)
    loading: set[int] = field(default_factory=set)
    coordinator_epoch: dict[int, int] = field(default_factory=lambda: {p: 0 for p in range(PARTITIONS)})
    next_pid: int = 1000
    markers: list = field(default_factory=list)  # expected SendMarkers, in order

    def expect_markers(self, tid: str, t: Txn, commit: bool) -> None:
        p = partition_for(tid, PARTITIONS)
        self.markers.append((tid, t.pid, t.epoch, self.coordinator_epoch[p], commit, tuple(sorted(t.partitions))))

    def init(self, tid, timeout, given, version, now):
        if given is not None and (given[0] == -1) != (given[1] == -1):
            return (E.invalid_request, -1, -1)
        if not 0 < timeout <= MAX_TIMEOUT:  # Kafka checks the timeout before the coordinator state
            return (E.invalid_transaction_timeout, -1, -1)
        if partition_for(tid, PARTITIONS) in self.loading:
            return (E.coordinator_load_in_progress, -1, -1)
        t = self.txns.get(tid)
        if t is None:
            t = Txn(self.next_pid, -1, -1, EMPTY, updated=now)
            self.next_pid += 1
        if given is not None and t.epoch != -1 and given[0] != t.pid:
            return (fenced(version, 4), -1, -1)  # Kafka fences before it looks at the state
        if t.state in PREPARE.values():
            return (E.concurrent_transactions, -1, -1)
        if t.state == ONGOING:
            t = replace(t, epoch=t.epoch + 1, last_epoch=t.epoch, state=PREPARE[False], updated=now)
            self.txns[tid] = t
            self.expect_markers(tid, t, False)
            return (E.concurrent_transactions, -1, -1)
        if given is not None and t.epoch != -1 and given[1] != t.epoch:
            if given[1] != t.last_epoch:
                return (fenced(version, 4), -1, -1)
            epoch, last = t.epoch, t.last_epoch  # a retry of a bump that succeeded
        elif given is None:
            epoch, last = t.epoch + 1, -1
        else:
            epoch, last = t.epoch + 1, t.epoch
        self.txns[tid] = replace(t, epoch=epoch, last_epoch=last, state=EMPTY, partitions=frozenset(),
                                 timeout=timeout, start=-1, updated=now)
        return (E.none, t.pid, epoch)

    def _check(self, tid, pid, epoch, version):
        if partition_for(tid, PARTITIONS) in self.loading:
            return E.coordinator_load_in_progress
        t = self.txns.get(tid)
        if t is None or t.pid != pid:
            return E.invalid_producer_id_mapping
        if t.epoch != epoch:
            return fenced(version, 2)
        return None

    def add(self, tid, pid, epoch, partitions, version, now):
        error = self._check(tid, pid, epoch, version)
        if error is not None:
            return error
        t = self.txns[tid]
        if t.state in PREPARE.values():
            return E.concurrent_transactions
        if t.state == ONGOING and partitions <= t.partitions:
            return E.none
        start = now if t.state in IDLE else t.start
        self.txns[tid] = replace(t, state=ONGOING, partitions=t.partitions | partitions, start=start, updated=now)
        return E.none

    def end(self, tid, pid, epoch, commit, version, now):
        error = self._check(tid, pid, epoch, version)
        if error is not None:
            return error
        t = self.txns[tid]
        if t.state == ONGOING:
            t = self.txns[tid] = replace(t, state=PREPARE[commit], updated=now)
            self.expect_markers(tid, t, commit)
            return E.none
        if t.state == COMPLETE[commit]:
            return E.none
        if t.state in PREPARE.values():  # the markers are being written
            return E.concurrent_transactions
        return E.invalid_txn_state

    def markers_written(self, tid, pid, epoch, commit, coordinator_epoch, now):
        p = partition_for(tid, PARTITIONS)
        t = self.txns.get(tid)
        if p in self.loading or t is None or coordinator_epoch != self.coordinator_epoch[p]:
            return
        if (t.pid, t.epoch, t.state) != (pid, epoch, PREPARE[commit]):
            return
        self.txns[tid] = replace(t, state=COMPLETE[commit], partitions=frozenset(), updated=now)

    def time_out(self, now):
        for tid, t in sorted(self.txns.items()):
            if partition_for(tid, PARTITIONS) in self.loading:
                continue
            if t.state == ONGOING and t.start + t.timeout < now:
                t = self.txns[tid] = replace(t, epoch=t.epoch + 1, last_epoch=t.epoch, state=PREPARE[False], updated=now)
                self.expect_markers(tid, t, False)

    def expire(self, now):
        for tid, t in sorted(self.txns.items()):
            if partition_for(tid, PARTITIONS) not in self.loading and t.state in IDLE \
                    and t.updated <= now - EXPIRATION:
                del self.txns[tid]

    def start_reload(self, p):
        self.loading.add(p)
        self.coordinator_epoch[p] += 1

    def finish_reload(self, p):
        self.loading.discard(p)
        for tid, t in sorted(self.txns.items()):
            if partition_for(tid, PARTITIONS) == p:
                t = self.txns[tid] = replace(t, last_epoch=-1)  # not on disk
                if t.state in PREPARE.values():
                    self.expect_markers(tid, t, t.state == PREPARE[True])


class CoordinatorVersusModel(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.model = Model()
        self.real = TransactionCoordinator(CONFIG)
        self.next_pid = self.model.next_pid  # the broker's allocator: an id is used once taken
        self.log = InMemoryLog()
        self.effects: list = []
        # Requests run through the runtime (which refuses them on a partition it does not
        # serve); loads and timers are played by hand.
        self.runtime = CoordinatorRuntime(self.real, self.log, self.effects.append)
        self.now = 1_000_000
        self.pending: list[SendMarkers] = []
        self.loads = self.real.loads  # kept by the runtime
        for p in range(PARTITIONS):
            self.loads.mark_loading(p)
            self.real.load_partition(p, 0)
            self.loads.mark_loaded(p)
            self.real.finish_loading(p)

    # -- driving the real coordinator as the runtime does ------------------------------

    def apply(self, result):
        """Commits a load's or a timer's result, as the runtime does."""
        self.effects.clear()
        partition = self.real.partition_of(result.records[0]) if result.records else 0
        return self._performed(self.runtime.apply(partition, result, self.now))

    def run(self, tid, handler, refused):
        """Runs a request's handler as the broker does, through the runtime on the id's
        partition; a refusal is answered ``refused(error)``, as the service maps it."""
        self.effects.clear()
        try:
            response = self.runtime.run(self.real.partition_for(tid), handler, self.now)
        except CoordinatorRefused as refusal:
            response = refused(refusal.error)
        return self._performed(response)

    def _performed(self, response):
        markers = [e for e in self.effects if isinstance(e, SendMarkers)]
        if any(isinstance(e, ProducerIdTaken) for e in self.effects):
            self.next_pid += 1
        self.pending += markers
        return response, markers

    def check_markers(self, markers, expected_before, ordered=True):
        expected = self.model.markers[expected_before:]
        got = [(m.transactional_id, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.commit,
                tuple(sorted(m.topic_partitions))) for m in markers]
        if not ordered:
            got, expected = sorted(got), sorted(expected)
        assert got == expected, (got, expected)

    def producer(self, data, tid):
        """The producer id/epoch a client sends: usually the current ones, sometimes stale."""
        t = self.model.txns.get(tid)
        pid, epoch = (t.pid, t.epoch) if t else (1000, 0)
        return (data.draw(st.sampled_from([pid, pid, pid, pid + 7])),
                data.draw(st.sampled_from([epoch, epoch, epoch, epoch - 1, epoch + 1])))

    # -- rules -------------------------------------------------------------------------

    @rule(tid=st.sampled_from(IDS), timeout=st.sampled_from([1000, 5000, MAX_TIMEOUT, 0, MAX_TIMEOUT + 1]),
          kip360=st.booleans(), version=st.integers(0, 5), data=st.data())
    def init_producer_id(self, tid, timeout, kip360, version, data):
        given = self.producer(data, tid) if kip360 and tid in self.model.txns else None
        before = len(self.model.markers)
        expected = self.model.init(tid, timeout, given, version, self.now)
        pid, epoch = given or (-1, -1)
        # what the service answers before the runtime can refuse the request
        invalid = self.real.init_producer_id_request_error(tid, timeout, pid, epoch)
        response, markers = (InitProducerIdResponse(invalid), []) if invalid is not None else self.run(
            tid, lambda: self.real.init_producer_id(tid, timeout, pid, epoch, version, self.now, self.next_pid),
            InitProducerIdResponse)
        assert self.next_pid == self.model.next_pid
        got = (response.error, response.producer_id, response.producer_epoch) if response.error == E.none \
            else (response.error, -1, -1)
        assert got == expected
        self.check_markers(markers, before)

    @rule(tid=st.sampled_from(IDS), partitions=st.sets(st.sampled_from(TOPIC_PARTITIONS), min_size=1),
          version=st.integers(0, 3), data=st.data())
    def add_partitions_to_txn(self, tid, partitions, version, data):
        pid, epoch = self.producer(data, tid)
        expected = self.model.add(tid, pid, epoch, frozenset(partitions), version, self.now)
        response, markers = self.run(tid, lambda: self.real.add_partitions_to_txn(
            tid, pid, epoch, partitions, version, self.now), AddPartitionsResponse)
        assert response.error == expected and not markers

    @rule(tid=st.sampled_from(IDS), group=st.sampled_from(GROUPS), version=st.integers(0, 4), data=st.data())
    def add_offsets_to_txn(self, tid, group, version, data):
        pid, epoch = self.producer(data, tid)
        offsets = frozenset({("__consumer_offsets", partition_for(group, CONFIG.offsets_topic_num_partitions))})
        expected = self.model.add(tid, pid, epoch, offsets, version, self.now)
        response, markers = self.run(tid, lambda: self.real.add_offsets_to_txn(
            tid, pid, epoch, group, version, self.now), AddPartitionsResponse)
        assert response.error == expected and not markers

    @rule(tid=st.sampled_from(IDS), commit=st.booleans(), version=st.integers(0, 4), data=st.data())
    def end_txn(self, tid, commit, version, data):
        pid, epoch = self.producer(data, tid)
        before = len(self.model.markers)
        expected = self.model.end(tid, pid, epoch, commit, version, self.now)
        response, markers = self.run(tid, lambda: self.real.end_txn(tid, pid, epoch, commit, version, self.now),
                                     EndTxnResponse)
        assert response.error == expected
        self.check_markers(markers, before)

    @rule(data=st.data())
    def markers_acknowledged(self, data):
        if not self.pending:
            return
        m = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        self.model.markers_written(m.transactional_id, m.producer_id, m.producer_epoch, m.commit,
                                   m.coordinator_epoch, self.now)
        response, markers = self.run(m.transactional_id, lambda: self.real.markers_written(
            m.transactional_id, m.producer_id, m.producer_epoch, m.commit, self.now, m.coordinator_epoch),
            lambda error: None)  # refused on a partition loading again: its load rolls forward
        assert not markers

    @rule(ms=st.sampled_from([1, 999, 1001, 5001, 60_001, 100_001]))
    def time_passes_and_timeouts_fire(self, ms):
        self.now += ms
        before = len(self.model.markers)
        self.model.time_out(self.now)
        markers = []
        for p in sorted(self.loads.loaded()):  # the runtime's timer round: the partitions served
            for result in self.real.abort_timed_out_transactions(self.now, p):
                markers += self.apply(result)[1]
        # Kafka aborts the timed-out transactions of one check in no defined order.
        self.check_markers(markers, before, ordered=False)

    @rule()
    def expiration(self):
        self.model.expire(self.now)
        for p in sorted(self.loads.loaded()):
            for result in self.real.expire_transactional_ids(self.now, p):
                self.apply(result)

    @rule(p=st.integers(0, PARTITIONS - 1))
    def coordinator_unloads_and_starts_loading(self, p):
        if p in self.model.loading:
            return
        self.model.start_reload(p)
        self.loads.drop(p)
        self.real.unload_partition(p)
        self.loads.mark_loading(p)
        self.real.load_partition(p, self.model.coordinator_epoch[p])

    @rule(p=st.integers(0, PARTITIONS - 1))
    def coordinator_finishes_loading(self, p):
        if p not in self.model.loading:
            return
        before = len(self.model.markers)
        self.model.finish_reload(p)
        for offset, record in enumerate(self.log.records(p)):  # as read back from disk
            self.real.replay(CoordinatorRecord(record.key, record.value), offset, self.now)
        markers = []
        self.loads.mark_loaded(p)
        for result in self.real.finish_loading(p):
            markers += self.apply(result)[1]
        # Kafka aborts the timed-out transactions of one check in no defined order.
        self.check_markers(markers, before, ordered=False)

    # -- the states must agree ---------------------------------------------------------

    @invariant()
    def states_agree(self):
        if not hasattr(self, "model"):
            return
        for tid in IDS:
            if partition_for(tid, PARTITIONS) in self.model.loading:
                continue
            md = self.real.transaction_metadata(tid)
            t = self.model.txns.get(tid)
            if t is None:
                assert md is None, md
                continue
            assert md is not None, tid
            got = (md.producer_id, md.producer_epoch, md.last_producer_epoch, str(md.state),
                   frozenset(md.topic_partitions), md.txn_timeout_ms, md.txn_start_timestamp_ms,
                   md.txn_last_update_timestamp_ms)
            want = (t.pid, t.epoch, t.last_epoch, t.state, t.partitions, t.timeout, t.start, t.updated)
            assert got == want, (tid, got, want)


    @invariant()
    def a_load_of_the_log_gives_the_live_state(self):
        """Replay installs the metadata a record was written from; a load decodes it from
        the bytes: both give the same state, but for the last epoch (never written)."""
        if not hasattr(self, "model"):
            return
        loaded = TransactionCoordinator(CONFIG)
        for p in sorted(self.loads.loaded()):
            loaded.load_partition(p, 0)
            for offset, record in enumerate(self.log.records(p)):
                loaded.replay(CoordinatorRecord(record.key, record.value), offset, self.now)
            live = {md.transactional_id: md._replace(last_producer_epoch=-1) for md in self.real.transactions(p)}
            assert {md.transactional_id: md for md in loaded.transactions(p)} == live, p

# CI explores the same examples every run; `make fuzz` (EOSBROKER_FUZZ_SCALE) explores new ones.
SCALE = int(os.environ.get("EOSBROKER_FUZZ_SCALE", "1"))
CoordinatorVersusModel.TestCase.settings = settings(
    max_examples=100 * SCALE, stateful_step_count=40, deadline=None, derandomize=SCALE == 1,
    suppress_health_check=list(HealthCheck))
test_transaction_coordinator_agrees_with_the_model = CoordinatorVersusModel.TestCase
