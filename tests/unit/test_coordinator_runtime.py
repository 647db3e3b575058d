"""The coordinator runtime over an in-memory log: every event appends then replays the
same records, load replays the log into the same state, unload drops it, and the
coordinator epoch of a load reaches the effects."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from coordinator.group import GroupConfig, GroupCoordinator, JoinProtocol, OffsetFetchGroup, OffsetToCommit
from coordinator.runtime import AppendUnavailable, CoordinatorRefused, CoordinatorRuntime, InMemoryLog
from coordinator.transaction import SendMarkers, TransactionConfig, TransactionCoordinator

NOW = 1_000_000
CONFIG = TransactionConfig(transaction_state_log_num_partitions=1)


def _txn_runtime(log: InMemoryLog, epoch: int):
    coordinator = TransactionCoordinator(CONFIG)
    effects: list = []
    runtime = CoordinatorRuntime(coordinator, log, effects.append, timers=coordinator.timers())
    runtime.start_timers(NOW)
    runtime.begin_load(0, epoch)
    runtime.load(0, NOW)
    return coordinator, runtime, effects


def test_records_are_appended_then_replayed_and_a_reload_rebuilds_the_same_state():
    log = InMemoryLog()
    coordinator, runtime, effects = _txn_runtime(log, 3)
    init = runtime.run(0, lambda: coordinator.init_producer_id("t", 60_000, -1, -1, 4, NOW, 500), NOW)
    assert (init.error, init.producer_id, init.producer_epoch) == (E.none, 500, 0)
    runtime.run(0, lambda: coordinator.add_partitions_to_txn("t", 500, 0, [("a", 0)], 3, NOW), NOW)
    assert runtime.run(0, lambda: coordinator.end_txn("t", 500, 0, True, 3, NOW), NOW).error is E.none
    (sent,) = [e for e in effects if isinstance(e, SendMarkers)]
    assert sent.coordinator_epoch == 3
    assert [b.base_offset for b in log.batches(0)] == [0, 1, 2]  # one batch per event, in order
    before = coordinator.snapshot()[0][2]

    # A new coordinator (the partition moved) loads the log with a newer epoch and
    # rolls the prepared commit forward with that epoch.
    moved, moved_runtime, moved_effects = _txn_runtime(log, 4)
    loaded = moved.snapshot()[0][2]
    assert {t: (md.state, md.producer_id, md.producer_epoch, md.topic_partitions) for t, md in loaded.items()} == \
        {t: (md.state, md.producer_id, md.producer_epoch, md.topic_partitions) for t, md in before.items()}
    (resent,) = moved_effects
    assert resent.coordinator_epoch == 4 and resent.commit

    # The old coordinator's late completion is ignored: it no longer owns the partition.
    runtime.unload(0)
    with pytest.raises(CoordinatorRefused) as refused:
        runtime.run(0, lambda: coordinator.markers_written("t", 500, 0, True, NOW, 3), NOW)
    assert refused.value.error is E.not_coordinator
    assert len(log.batches(0)) == 3
    moved_runtime.run(0, lambda: moved.markers_written("t", 500, 0, True, NOW, 4), NOW)
    assert moved.transaction_metadata("t").state.state_name == "CompleteCommit"


def test_timers_run_on_every_loaded_partition_through_the_same_path():
    log = InMemoryLog()
    coordinator, runtime, effects = _txn_runtime(log, 0)
    runtime.run(0, lambda: coordinator.init_producer_id("t", 1_000, -1, -1, 4, NOW, 7), NOW)
    runtime.run(0, lambda: coordinator.add_partitions_to_txn("t", 7, 0, [("a", 0)], 3, NOW), NOW)
    assert runtime.next_timer_deadline() == NOW + CONFIG.abort_timed_out_transaction_cleanup_interval_ms
    later = NOW + 5_000
    assert runtime.fire_timers(later) == []  # not due yet: the timer runs at its interval
    later = runtime.next_timer_deadline()
    done = runtime.fire_timers(later)
    assert [(e.timer, e.partition, e.key, answer) for e, answer in done] == [("transaction timeouts", 0, "t", E.none)]
    assert coordinator.transaction_metadata("t").state.state_name == "PrepareAbort"
    assert runtime.next_timer_deadline() == later + CONFIG.abort_timed_out_transaction_cleanup_interval_ms
    assert len(log.batches(0)) == 3 and isinstance(effects[-1], SendMarkers) and not effects[-1].commit


def test_transactional_offsets_go_in_a_producer_batch_and_a_marker_completes_them_live_and_on_load():
    log = InMemoryLog()
    config = GroupConfig(offsets_topic_num_partitions=1)

    def load() -> tuple[GroupCoordinator, CoordinatorRuntime]:
        coordinator = GroupCoordinator(config)
        runtime = CoordinatorRuntime(coordinator, log, lambda effect: None)
        runtime.begin_load(0, 1)
        runtime.load(0, NOW)
        return coordinator, runtime

    def fetched(coordinator: GroupCoordinator):
        response = coordinator.offset_fetch([OffsetFetchGroup("g", (("t", (0,)),))], True)
        p = response.groups[0].topics[0].partitions[0]
        return p.committed_offset, p.error_code

    coordinator, runtime = load()
    runtime.run(0, lambda: coordinator.txn_offset_commit(
        transactional_id="tx", group_id="g", producer_id=9, producer_epoch=2, generation_id=-1, member_id="",
        group_instance_id=None, offsets=[OffsetToCommit("t", 0, 42)], api_version=3, now_ms=NOW), NOW)
    batch = log.batches(0)[-1]
    assert batch.is_transactional and (batch.producer_id, batch.producer_epoch) == (9, 2)
    assert fetched(coordinator) == (-1, E.unstable_offset_commit)
    assert fetched(load()[0]) == (-1, E.unstable_offset_commit)  # pending after a load too

    runtime.write_marker(0, 9, 2, True, 1, NOW)
    assert log.batches(0)[-1].is_control
    assert fetched(coordinator) == (42, E.none)
    assert fetched(load()[0]) == (42, E.none)  # and completed by the marker on load


def test_unload_answers_parked_requests_and_forgets_the_partition():
    replies = {}
    coordinator = GroupCoordinator(GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100))
    runtime = CoordinatorRuntime(coordinator, InMemoryLog(),
                                 lambda effect: replies.__setitem__(effect.reply_to, effect.response))
    runtime.begin_load(0, 5)
    assert coordinator.coordinator_epoch(0) == 5 and runtime.loads.loaded() == frozenset()
    runtime.load(0, NOW)
    join = dict(group_id="g", group_instance_id=None, protocol_type="consumer",
                protocols=(JoinProtocol("range", b""),),
                session_timeout_ms=10_000, rebalance_timeout_ms=10_000, client_id="c", client_host="h",
                api_version=3, now_ms=NOW)
    assert runtime.run(0, lambda: coordinator.join_group(member_id="", reply_to="first", **join), NOW) is None
    runtime.unload(0)
    assert replies["first"].error_code is E.not_coordinator
    assert runtime.loads.loaded() == frozenset() and coordinator.coordinator_epoch(0) is None


def test_a_refused_append_applies_nothing_and_the_request_is_answered_not_coordinator():
    log = InMemoryLog()
    coordinator, runtime, effects = _txn_runtime(log, 3)
    runtime.run(0, lambda: coordinator.init_producer_id("t", 60_000, -1, -1, 4, NOW, 500), NOW)
    runtime.run(0, lambda: coordinator.add_partitions_to_txn("t", 500, 0, [("a", 0)], 3, NOW), NOW)
    written = len(log.batches(0))
    before = coordinator.transaction_metadata("t")
    log.refused.add(0)  # the partition's leadership moved on; this coordinator has not heard yet

    with pytest.raises(CoordinatorRefused) as ended:
        runtime.run(0, lambda: coordinator.end_txn("t", 500, 0, True, 3, NOW), NOW)
    assert ended.value.error is E.not_coordinator
    assert not [e for e in effects if isinstance(e, SendMarkers)]  # no markers for a commit never written
    assert len(log.batches(0)) == written
    assert before.state.state_name == "Ongoing"
    assert 0 not in runtime.loads.loaded() and coordinator.transaction_metadata("t") is None

    # Every later request is refused before it writes: no epoch is handed out twice.
    with pytest.raises(CoordinatorRefused) as again:
        runtime.run(0, lambda: coordinator.init_producer_id("t", 60_000, 500, 0, 4, NOW, 501), NOW)
    assert again.value.error is E.not_coordinator and len(log.batches(0)) == written


def test_the_runtime_refuses_an_event_on_a_partition_it_does_not_serve_without_running_it():
    """As Kafka's withActiveContextOrThrow: NOT_COORDINATOR for a partition not held,
    COORDINATOR_LOAD_IN_PROGRESS while it loads; the handler never runs, nothing is written."""
    log = InMemoryLog()
    coordinator = TransactionCoordinator(CONFIG)
    runtime = CoordinatorRuntime(coordinator, log, lambda effect: None)
    ran = []

    def init():
        ran.append(1)
        return coordinator.init_producer_id("t", 60_000, -1, -1, 4, NOW, 500)

    def refusal():
        with pytest.raises(CoordinatorRefused) as refused:
            runtime.run(0, init, NOW)
        return refused.value.error

    assert refusal() is E.not_coordinator
    runtime.begin_load(0, 1)
    assert refusal() is E.coordinator_load_in_progress
    assert ran == [] and log.batches(0) == []
    runtime.load(0, NOW)
    assert runtime.run(0, init, NOW).error is E.none and ran == [1]
    runtime.unload(0)
    assert refusal() is E.not_coordinator and ran == [1]


def test_a_refused_timer_append_resigns_only_its_partition():
    log = InMemoryLog()
    coordinator = TransactionCoordinator(TransactionConfig(transaction_state_log_num_partitions=2))
    runtime = CoordinatorRuntime(coordinator, log, lambda effect: None, timers=coordinator.timers())
    runtime.start_timers(NOW)
    ids = {coordinator.partition_for(f"t{i}"): f"t{i}" for i in range(20)}
    for p in (0, 1):
        runtime.begin_load(p, 1)
        runtime.load(p, NOW)
        runtime.run(p, lambda t=ids[p]: coordinator.init_producer_id(t, 1_000, -1, -1, 4, NOW, 10 + p), NOW)
        runtime.run(p, lambda t=ids[p], pid=10 + p: coordinator.add_partitions_to_txn(t, pid, 0, [("a", 0)], 3, NOW),
                    NOW)
    log.refused.add(0)
    later = runtime.next_timer_deadline()
    done = runtime.fire_timers(later)
    assert [(e.partition, answer) for e, answer in done if e.timer == "transaction timeouts"] == \
        [(0, E.not_coordinator), (1, E.none)]
    assert runtime.loads.loaded() == {1}
    assert coordinator.transaction_metadata(ids[1]).state.state_name == "PrepareAbort"


def test_load_fences_and_aborts_a_transaction_whose_timeout_passed_before_serving_it():
    log = InMemoryLog()
    coordinator, runtime, _ = _txn_runtime(log, 1)
    runtime.run(0, lambda: coordinator.init_producer_id("t", 10_000, -1, -1, 4, NOW, 500), NOW)
    runtime.run(0, lambda: coordinator.add_partitions_to_txn("t", 500, 0, [("a", 0)], 3, NOW), NOW)
    written = len(log.batches(0))

    # The node was down 14 s; a coordinator loads the partition by the broker's clock.
    after_outage = NOW + 14_000
    loaded = TransactionCoordinator(CONFIG)
    effects: list = []
    reloaded = CoordinatorRuntime(loaded, log, effects.append)
    reloaded.begin_load(0, 2)
    reloaded.load(0, after_outage)
    md = loaded.transaction_metadata("t")
    assert (md.state.state_name, md.producer_id, md.producer_epoch) == ("PrepareAbort", 500, 1)
    assert len(log.batches(0)) == written + 1  # the fence is in the log, not only in memory
    (abort,) = effects
    assert isinstance(abort, SendMarkers) and not abort.commit and abort.coordinator_epoch == 2
    # The producer's commit, its first request after the outage, is fenced.
    commit = reloaded.run(0, lambda: loaded.end_txn("t", 500, 0, True, 3, after_outage), after_outage)
    assert commit.error in (E.producer_fenced, E.invalid_producer_epoch)

    # Within its timeout, a transaction loads as it was.
    fresh = TransactionCoordinator(CONFIG)
    within = CoordinatorRuntime(fresh, InMemoryLog(), lambda effect: None)
    within.log.partitions[0] = log.batches(0)[:written]
    within.begin_load(0, 2)
    within.load(0, NOW + 5_000)
    assert fresh.transaction_metadata("t").state.state_name == "Ongoing"


def test_an_append_the_log_cannot_take_now_applies_nothing_and_answers_its_retriable_error():
    class TooFewInSync(InMemoryLog):
        def append(self, partition, batch, now_ms):
            raise AppendUnavailable(E.coordinator_not_available, "1 in sync, min.insync.replicas 2")

    log = InMemoryLog()
    coordinator, runtime, effects = _txn_runtime(log, 1)
    runtime.run(0, lambda: coordinator.init_producer_id("t", 60_000, -1, -1, 4, NOW, 500), NOW)
    runtime.run(0, lambda: coordinator.add_partitions_to_txn("t", 500, 0, [("a", 0)], 3, NOW), NOW)
    shrunk = TooFewInSync()
    runtime.log = shrunk
    ended = runtime.run(0, lambda: coordinator.end_txn("t", 500, 0, True, 3, NOW), NOW)
    assert ended == type(ended)(E.coordinator_not_available)
    assert coordinator.transaction_metadata("t").state.state_name == "Ongoing"  # still coordinator, unchanged
    assert not [e for e in effects if isinstance(e, SendMarkers)]
    runtime.log = log  # the ISR grew back: the retry commits
    assert runtime.run(0, lambda: coordinator.end_txn("t", 500, 0, True, 3, NOW), NOW).error is E.none


def test_a_load_that_raises_leaves_the_partition_failed_and_refused_not_coordinator(caplog):
    """As Kafka's runtime: a partition whose load fails is not left loading forever
    (COORDINATOR_LOAD_IN_PROGRESS to every retry); it is failed, logged, and refused
    NOT_COORDINATOR until it moves again."""
    from coordinator.transaction.log_codec import encode_key
    from protocol.records import RecordBatch, build_batch

    log = InMemoryLog()
    log.append(0, RecordBatch(build_batch([(encode_key("t"), b"\xff\xff not a value", (), NOW)]), 0), NOW)
    coordinator = TransactionCoordinator(CONFIG)
    runtime = CoordinatorRuntime(coordinator, log, lambda effect: None)
    runtime.begin_load(0, 1)
    with caplog.at_level("ERROR", logger="coordinator.runtime"):
        assert runtime.load(0, NOW) is None
    assert "failed to load coordinator partition 0" in caplog.text
    assert runtime.loads.failed() == {0} and runtime.loads.held() == frozenset()
    assert coordinator.coordinator_epoch(0) is None  # the half-loaded state is dropped
    with pytest.raises(CoordinatorRefused) as refused:
        runtime.run(0, lambda: coordinator.init_producer_id("t", 60_000, -1, -1, 4, NOW, 500), NOW)
    assert refused.value.error is E.not_coordinator

    # Moving here again (a new leader epoch) loads it afresh.
    log.partitions[0].clear()
    runtime.begin_load(0, 2)
    assert runtime.load(0, NOW) == 0 and runtime.loads.failed() == frozenset() and runtime.loads.loaded() == {0}
