"""Streams groups against Apache Kafka 4.4 and eosbroker (4.4 profile), at the wire: the
standby tasks the sticky assignor gives with the streams.num.standby.replicas group
config (in the heartbeat answers and StreamsGroupDescribe; a task given up while revoking is
a standby at once), static members (leaving
with -2, coming back, and the refusals), and ConsumerGroupDescribe of the id of a
streams group and of a share group. Which member gets which task may differ (ties break by hash order
in Kafka); the answers' shapes may not."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.integration.test_streams_group_wire import _beat, _topology
from tests.reference.wire import Wire, err

HEARTBEAT, DESCRIBE, SHARE_HEARTBEAT, INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE = 88, 89, 76, 44, 32


def _tasks(task_ids) -> dict[str, frozenset[int]] | None:
    return None if task_ids is None else {t.subtopology_id: frozenset(t.partitions) for t in task_ids}


def _listed(tasks: dict) -> list[dict]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items())]


def _count(tasks: dict | None) -> dict[str, int] | None:
    return None if tasks is None else {s: len(ps) for s, ps in sorted(tasks.items()) if ps}


async def set_group_configs(wire: Wire, group: str, configs: dict[str, str]) -> str:
    r = await wire.request("incremental_alter_configs", {"resources": [{
        "resource_type": GROUP_RESOURCE, "resource_name": group,
        "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}],
        "validate_only": False}, version=1, key=INCREMENTAL_ALTER_CONFIGS)
    return err(r.responses[0].error_code)


async def _two_members_answers(port: int, app: str, standby_replicas: int) -> list[tuple]:
    """A member alone, then a second (another process) it gives half its tasks to: their
    active and standby tasks, the describe, and (no standbys) offset commits at older
    member epochs."""
    wire = await Wire.connect(port)
    try:
        assert await wire.create_topic(f"{app}-input", 2) == "NONE"
        out: list[tuple] = [("group configs", await set_group_configs(wire, app, {
            "streams.num.standby.replicas": str(standby_replicas), "streams.initial.rebalance.delay.ms": "0"}))]
        await wire.find_coordinator(app, 0)

        async def beat(member: str, epoch: int, process: str, **body):
            return await wire.retry(lambda: wire.request("streams_group_heartbeat", _beat(
                app, member, epoch, process_id=process, **body), version=0, key=HEARTBEAT))

        # m1 joins alone: every task active, no standby (no other process to put one on).
        joined = await beat("m1", 0, "process-1", topology=_topology(app))
        epoch, deadline = joined.member_epoch, time.monotonic() + 30
        while True:
            r = await beat("m1", epoch, "process-1", active_tasks=[])
            assert r.error_code == 0, err(r.error_code)
            epoch = r.member_epoch
            if r.active_tasks:
                break
            assert time.monotonic() < deadline, "no tasks within 30 s"
            await asyncio.sleep(0.2)
        m1_active, m1_standby = _tasks(r.active_tasks), _tasks(r.standby_tasks)
        tasks_epoch = epoch
        out.append(("alone", _count(m1_active), _count(m1_standby), r.warmup_tasks))

        # m2, another process: its standby tasks come at once, its active tasks once m1 revoked them.
        m2 = await beat("m2", 0, "process-2", topology=_topology(app))
        out.append(("second joins", err(m2.error_code), _count(_tasks(m2.active_tasks)),
                    _count(_tasks(m2.standby_tasks))))
        m2_epoch, m2_standby = m2.member_epoch, _tasks(m2.standby_tasks)
        await asyncio.sleep(1.2)  # the default assignment interval, on both
        for _ in range(50):
            r = await beat("m1", epoch, "process-1", active_tasks=_listed(m1_active),
                           standby_tasks=_listed(m1_standby))
            epoch = r.member_epoch
            if r.active_tasks is not None:
                if not out[-1][0].startswith("m1 told"):
                    # Revoking: the stateful task it gives up is its standby at once (demotion).
                    out.append(("m1 told to move", _count(_tasks(r.active_tasks)), _count(_tasks(r.standby_tasks))))
                m1_active, m1_standby = _tasks(r.active_tasks), _tasks(r.standby_tasks)
            r2 = await beat("m2", m2_epoch, "process-2", active_tasks=_listed(_tasks(m2.active_tasks) or {}),
                            standby_tasks=_listed(m2_standby))
            m2_epoch = r2.member_epoch
            if r2.active_tasks is not None:
                m2, m2_standby = r2, _tasks(r2.standby_tasks)
            if m1_active and _tasks(m2.active_tasks) and sum(len(p) for p in m1_active.values()) == 2:
                break
            await asyncio.sleep(0.1)
        m2_active = _tasks(m2.active_tasks)
        out.append(("settled", _count(m1_active), _count(m1_standby), _count(m2_active), _count(m2_standby)))
        # Each stands by for the stateful tasks (subtopology 1, with a changelog) the other runs.
        out.append(("standby is the other's active", m1_standby.get("1") == m2_active.get("1"),
                    m2_standby.get("1") == m1_active.get("1")))

        # Offset commits of an older epoch, checked per task by Kafka 4.4: m1 revoked tasks to
        # move on, so the tasks it kept are at its new epoch too.
        commits = (() if standby_replicas else (("commit at the tasks' epoch", tasks_epoch),
                                                ("commit before it", tasks_epoch - 1),
                                                ("commit at the member's epoch", epoch)))
        for label, at in commits:
            r = await wire.request("offset_commit", {
                "group_id": app, "generation_id_or_member_epoch": at, "member_id": "m1", "group_instance_id": None,
                "topics": [{"name": f"{app}-input", "partitions": [
                    {"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1,
                     "committed_metadata": ""} for p in (0, 1)]}]}, version=9)
            out.append((label, sorted(err(p.error_code) for t in r.topics for p in t.partitions)))

        described = (await wire.request("streams_group_describe", {"group_ids": [app],
                                                                   "include_authorized_operations": False},
                                        version=0, key=DESCRIBE)).groups[0]
        for m in sorted(described.members, key=lambda m: m.process_id):
            out.append(("described", m.process_id, _count(_tasks(m.assignment.active_tasks)),
                        _count(_tasks(m.assignment.standby_tasks)), _count(_tasks(m.target_assignment.standby_tasks)),
                        _tasks(m.assignment.standby_tasks) == _tasks(m.target_assignment.standby_tasks),
                        len(m.assignment.warmup_tasks)))

        return out
    finally:
        await wire.close()


async def _join_with_tasks(wire: Wire, app: str, member: str, **body):
    """A member joins a new group (no initial delay) and heartbeats until it has tasks."""
    joined = await wire.retry(lambda: wire.request("streams_group_heartbeat", _beat(
        app, member, 0, topology=_topology(app), **body), version=0, key=HEARTBEAT))
    epoch, deadline = joined.member_epoch, time.monotonic() + 30
    while True:
        r = await wire.request("streams_group_heartbeat", _beat(app, member, epoch, **body), version=0,
                               key=HEARTBEAT)
        assert r.error_code == 0, err(r.error_code)
        epoch = r.member_epoch
        if r.active_tasks:
            return r
        assert time.monotonic() < deadline, "no tasks within 30 s"
        await asyncio.sleep(0.2)


async def _static_answers(port: int, app: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        assert await wire.create_topic(f"{app}-input", 2) == "NONE"
        out: list[tuple] = [("group configs", await set_group_configs(wire, app, {
            "streams.initial.rebalance.delay.ms": "0"}))]
        await wire.find_coordinator(app, 0)
        first = await _join_with_tasks(wire, app, "a1", instance_id="i-a")
        tasks, base = _tasks(first.active_tasks), first.member_epoch

        async def beat(label: str, member: str, epoch: int, **body):
            r = await wire.request("streams_group_heartbeat", _beat(app, member, epoch, **body), version=0,
                                   key=HEARTBEAT)
            message = r.error_message.replace(app, "<app>") if r.error_message else None
            epoch = None if r.error_code else r.member_epoch if r.member_epoch < 0 else r.member_epoch - base
            out.append((label, err(r.error_code), message, epoch,
                        None if r.active_tasks is None else _tasks(r.active_tasks) == tasks))
            return r

        async def describe(label: str):
            g = (await wire.request("streams_group_describe", {"group_ids": [app],
                                                               "include_authorized_operations": False},
                                    version=0, key=DESCRIBE)).groups[0]
            out.append((label, g.group_state, g.group_epoch - base, sorted(
                (m.member_id, m.instance_id, m.member_epoch if m.member_epoch < 0 else m.member_epoch - base,
                 _tasks(m.assignment.active_tasks) == tasks,
                 sorted((t.subtopology_id, t.partition, t.offset) for t in m.task_offsets),
                 sorted((t.subtopology_id, t.partition, t.offset) for t in m.task_end_offsets)) for m in g.members)))

        await beat("another member id with the instance id", "a2", 0, instance_id="i-a", topology=_topology(app))
        await beat("the instance's member id joining again", "a1", 0, instance_id="i-a", topology=_topology(app))
        await beat("a heartbeat of another member id", "x", base, instance_id="i-a")
        await beat("an unknown instance id", "x", base, instance_id="i-z")
        await beat("-2 of another member id", "x", -2, instance_id="i-a", active_tasks=None, standby_tasks=None,
                   warmup_tasks=None)
        await beat("leaves with -2", "a1", -2, instance_id="i-a", active_tasks=None, standby_tasks=None,
                   warmup_tasks=None)
        await describe("away")
        back = await beat("back under a new member id", "a2", 0, instance_id="i-a", topology=_topology(app))
        await describe("back")
        # Tasks are sent when they change, not because the member reports others.
        await beat("reports no tasks", "a2", back.member_epoch, instance_id="i-a")
        # Task offsets reported are shown by the describe (memory only, as Kafka keeps them).
        await beat("reports task offsets", "a2", back.member_epoch, instance_id="i-a",
                   task_offsets=[{"subtopology_id": "1", "partition": 0, "offset": 42}],
                   task_end_offsets=[{"subtopology_id": "1", "partition": 0, "offset": 50},
                                     {"subtopology_id": "1", "partition": 1, "offset": 7}])
        await describe("task offsets")
        # A member's process (or rack, client tags, topology epoch) moving bumps the group epoch.
        await beat("same metadata", "a2", back.member_epoch, instance_id="i-a")
        await describe("unmoved")
        await beat("another process id", "a2", back.member_epoch, instance_id="i-a", process_id="process-9")
        await describe("moved")
        await beat("the old member id", "a1", base, instance_id="i-a")
        await beat("-1 leaves", "a2", -1, instance_id="i-a", active_tasks=None, standby_tasks=None,
                   warmup_tasks=None)
        await describe("left")
        return out
    finally:
        await wire.close()


async def _consumer_describe_answers(port: int, app: str) -> list[tuple]:
    """ConsumerGroupDescribe of the id of a streams group and of a share group."""
    wire = await Wire.connect(port)
    try:
        assert await wire.create_topic(f"{app}-input", 2) == "NONE"
        streams, shared = app, f"{app}-share"
        await wire.find_coordinator(streams, 0)
        joined = await wire.retry(lambda: wire.request("streams_group_heartbeat", _beat(
            streams, "m1", 0, topology=_topology(app)), version=0, key=HEARTBEAT))
        out: list[tuple] = [("streams member joins", err(joined.error_code))]
        await wire.find_coordinator(shared, 0)
        joined = await wire.retry(lambda: wire.request("share_group_heartbeat", {
            "group_id": shared, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": [f"{app}-input"]}, version=1, key=SHARE_HEARTBEAT))
        out.append(("share member joins", err(joined.error_code)))
        for group in (streams, shared):
            described = (await wire.request("consumer_group_describe", {
                "group_ids": [group], "include_authorized_operations": False})).groups[0]
            out.append(("consumer describe", group.replace(app, "<app>"), err(described.error_code),
                        described.error_message.replace(group, "<group>")))
        return out
    finally:
        await wire.close()


def _both(kafka_broker, broker_factory, answers) -> tuple[list, list]:
    eos = broker_factory({"emulate.kafka.version": "4.4"})
    app = f"sg-{uuid.uuid4().hex[:8]}"
    return asyncio.run(answers(kafka_broker.port, app)), asyncio.run(answers(eos.port, app))


def test_consumer_group_describe_of_streams_and_share_groups_matches_kafka(kafka_broker, broker_factory):
    kafka_answers, eos_answers = _both(kafka_broker, broker_factory, _consumer_describe_answers)
    assert eos_answers == kafka_answers


@pytest.mark.reference_extended  # about 5 s: internal topics and tasks, on both
def test_static_members_match_kafka(kafka_broker, broker_factory):
    kafka_answers, eos_answers = _both(kafka_broker, broker_factory, _static_answers)
    assert eos_answers == kafka_answers


@pytest.mark.reference_extended  # about 8 s: internal topics, the assignment interval, on both
def test_standby_tasks_match_kafka(kafka_broker, broker_factory):
    kafka_answers, eos_answers = _both(kafka_broker, broker_factory, lambda port, app: _two_members_answers(
        port, app, standby_replicas=1))
    assert eos_answers == kafka_answers


@pytest.mark.reference_extended  # about 8 s: internal topics, the assignment interval, on both
def test_task_assignment_epochs_match_kafka(kafka_broker, broker_factory):
    kafka_answers, eos_answers = _both(kafka_broker, broker_factory, lambda port, app: _two_members_answers(
        port, app, standby_replicas=0))
    assert eos_answers == kafka_answers
