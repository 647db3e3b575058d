"""The event history hears of high watermark and LSO moves from the partition itself
(no timer, no task per partition), and keeps groups' offsets and rebalances."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from broker.cluster.event_history import EventHistory
from broker.config import BrokerConfig
from broker.log.partition import Partition
from broker.log.partition_log import LogConfig
from broker.process import Broker
from tests.unit.test_producer_state import NOW, PID, data_batch


def _moves(history: EventHistory) -> list[tuple]:
    return [(e["time_ms"], e["high_watermark"], e["last_stable_offset"], e["held_by"])
            for e in history.since() if e["kind"] == "partition"]


def test_a_partition_tells_its_moves_with_no_event_loop_and_no_timer(tmp_path):
    clock = [NOW]
    history = EventHistory(100, lambda: clock[0])
    part = Partition.open("t", 0, tmp_path / "t-0", LogConfig(), NOW)
    try:
        part.on_offsets_moved = history.offsets_moved
        part.append_from_client(data_batch(pid=PID + 1, seq=0), NOW)  # plain: noted, told at the next read
        clock[0] += 5
        part.append_from_client(data_batch(pid=PID + 1, seq=1), NOW)
        assert len(history.events) == 0
        clock[0] += 10
        assert _moves(history) == [(NOW + 5, 2, 2, None)]  # stamped with its last move, not the read

        history.transaction("txn-a", "Ongoing", PID, 0, ["t-0"])
        clock[0] += 10
        part.append_from_client(data_batch(seq=0, transactional=True), NOW)  # a transaction's first write: at once
        assert _moves(history)[-1] == (NOW + 25, 3, 2, "txn-a")
        clock[0] += 10
        part.append_from_client(data_batch(seq=1, transactional=True), NOW)  # within it: noted
        clock[0] += 10
        part.write_marker(PID, 0, commit=True, coordinator_epoch=0, now_ms=NOW)  # the LSO moves: at once
        assert _moves(history)[-2:] == [(NOW + 25, 3, 2, "txn-a"), (NOW + 45, 5, 5, None)]
        assert [e["seq"] for e in history.since()] == list(range(len(history.events)))  # in order
        assert [e["time_ms"] for e in history.since()] == sorted(e["time_ms"] for e in history.since())
    finally:
        part.close()


def test_no_task_or_timer_per_partition(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig({}), tmp_path / "data", "127.0.0.1", 0, history=True)
        await broker.start()
        try:
            await asyncio.sleep(0)
            tasks = len(asyncio.all_tasks())
            handles = len(asyncio.get_running_loop()._scheduled)
            broker.cluster.create_topic("many", 64, 1)
            parts = [broker.cluster.partition("many", i) for i in range(64)]
            await asyncio.sleep(0)
            assert all(p.on_offsets_moved == broker.cluster.history.offsets_moved for p in parts)
            assert len(asyncio.all_tasks()) == tasks and len(asyncio.get_running_loop()._scheduled) <= handles
        finally:
            await broker.stop()

    asyncio.run(scenario())  # the standard loop: its timers can be counted


@pytest.mark.parametrize("settings, kept", [({"emulate.event.history.size": "0"}, True), ({}, False)],
                         ids=["size-zero", "no-control-api"])
def test_a_history_of_size_zero_or_not_kept_listens_to_no_partition_and_no_marker(tmp_path, settings, kept):
    async def scenario():
        broker = Broker(BrokerConfig(settings), tmp_path / "data", "127.0.0.1", 0, history=kept)
        await broker.start()
        try:
            broker.cluster.create_topic("quiet", 1, 1)
            assert broker.cluster.partition("quiet", 0).on_offsets_moved is None
            assert broker.nodes[0].transactions.markers.on_acked is None  # markers taken: not told either
            assert not broker.cluster.history.enabled and broker.cluster.history.next_seq == 0
        finally:
            await broker.stop()

    uvloop.run(scenario())


def test_group_offsets_and_rebalances():
    history = EventHistory(100, lambda: NOW)
    history.transaction("app", "Ongoing", PID, 0, ["t-0"])
    assert history.group("g", "classic", 1, frozenset({"m1"}), "Stable")["joined"] == ["m1"]
    assert history.group("g", "classic", 1, frozenset({"m1"}), "Stable") is None  # nothing changed
    moved = history.group("g", "classic", 2, frozenset({"m2"}), "Stable")
    assert (moved["generation"], moved["members"], moved["joined"], moved["left"]) == (2, 1, ["m2"], ["m1"])
    pending = history.offsets("g", {"t-0": 7}, "pending", PID)
    assert (pending["transactional_id"], pending["offsets"]) == ("app", {"t-0": 7})
    assert history.offsets("g", {"t-0": 7}, "committed", PID)["state"] == "committed"


def test_an_lso_held_before_the_partition_opened_is_told_once_and_named_when_known(tmp_path):
    history = EventHistory(100, lambda: NOW)
    part = Partition.open("t", 0, tmp_path / "t-0", LogConfig(), NOW)
    part.append_from_client(data_batch(seq=0, transactional=True), NOW)  # no one listens: the last run
    part.close()
    part = Partition.open("t", 0, tmp_path / "t-0", LogConfig(), NOW)
    try:
        history.opened(part)  # its open transaction holds the LSO: told, by its producer id
        history.opened(part)
        assert _moves(history) == [(NOW, 1, 0, f"producer {PID}")]
        history.producers_named({PID + 1: "other"})
        history.producers_named({PID: "hanging-app"})  # a coordinator's load names it
        assert _moves(history) == [(NOW, 1, 0, f"producer {PID}"), (NOW, 1, 0, "hanging-app")]
        history.producers_named({PID: "hanging-app"})
        assert len(_moves(history)) == 2
    finally:
        part.close()
    plain = Partition.open("p", 0, tmp_path / "p-0", LogConfig(), NOW)
    try:
        history.opened(plain)  # nothing held: no event
        assert len(_moves(history)) == 2
    finally:
        plain.close()


def test_a_rebalance_start_and_end_and_deletions():
    history = EventHistory(100, lambda: NOW)
    started = history.group("g", "classic", 0, frozenset({"m1"}), "PreparingRebalance", rebalancing=True)
    assert (started["rebalance"], started["joined"]) == ("started", ["m1"])
    assert history.group_unchanged("g", 0, True) and not history.group_unchanged("g", 1, True)
    assert "rebalance" not in history.group("g", "classic", 1, frozenset({"m1"}), "CompletingRebalance", True)
    assert history.group("g", "classic", 1, frozenset({"m1"}), "Stable")["rebalance"] == "ended"
    assert history.offsets("g", {"t-0": None}, "deleted")["offsets"] == {"t-0": None}
    deleted = history.group_deleted("g", "classic", ["t-1"])
    assert (deleted["deleted"], deleted["generation"], deleted["left"], deleted["offsets_deleted"]) == (
        True, 1, ["m1"], ["t-1"])
    assert history.group_deleted("g", "classic", []) is None  # told once; a group never told with no offsets: none
    assert history.groups_told() == []


def test_a_rebalance_a_timer_starts_unwritten_is_heard_and_deletions_by_their_tombstones():
    from broker.coordinators.group_history import GroupHistory
    from coordinator.group import MemberIdentity, OffsetToCommit
    from tests.unit.test_group_harness import Runtime
    from tests.unit.test_group_offsets import commit

    rt = Runtime()
    history = EventHistory(100, lambda: rt.now)
    groups = GroupHistory(history, rt.coordinator)
    rt.runtime.written = groups.written
    a, b, generation = rt.stable_pair()  # the leader's SyncGroup writes the group: Stable, told
    told = [e for e in history.since() if e["kind"] == "group"]
    assert (told[-1]["state"], told[-1]["generation"], told[-1]["members"]) == ("Stable", generation, 2)
    written = len(rt.appended)
    rt.advance(6_000)
    assert rt.heartbeat(a, generation) == 0
    rt.advance(6_000)  # b's session ends: the group prepares a rebalance, in memory only
    assert len(rt.appended) == written and rt.coordinator.group("g").state.value == "PreparingRebalance"
    groups.timers_fired({0})
    started = history.since()[-1]
    assert (started["state"], started["rebalance"], started["left"], started["members"]) == (
        "PreparingRebalance", "started", [b], 1)
    rt.join("a2", member_id=a)
    groups.ran("g")
    joined = rt.replies["a2"]
    rt.sync("as2", a, joined.generation_id, {a: b"A"})
    ended = history.since()[-1]
    assert (ended["state"], ended["rebalance"], ended["generation"]) == ("Stable", "ended", joined.generation_id)
    # emptied, then deleted (DeleteGroups): its tombstones say so, with its offsets'
    rt.call("leave_group", group_id="g", members=[MemberIdentity(a)], api_version=3)
    groups.ran("g")
    assert (history.since()[-1]["state"], history.since()[-1]["left"]) == ("Empty", [a])
    commit(rt, [OffsetToCommit("t", 0, 3), OffsetToCommit("t", 1, 4)])
    assert history.since()[-1]["offsets"] == {"t-0": 3, "t-1": 4}
    rt.call("offset_delete", group_id="g", topics=[("t", [1])])
    assert (history.since()[-1]["state"], history.since()[-1]["offsets"]) == ("deleted", {"t-1": None})
    rt.call("delete_groups", group_ids=["g"])
    deleted = history.since()[-1]
    assert (deleted["deleted"], deleted["protocol"], deleted["offsets_deleted"]) == (True, "classic", ["t-0"])
    assert not history.groups_told()
