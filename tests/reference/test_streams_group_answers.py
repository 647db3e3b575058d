"""StreamsGroupHeartbeat and StreamsGroupDescribe at the wire, against Apache Kafka 4.4 and
eosbroker (4.4 profile): the same requests, among them the refusals a streams member can
meet, get the same error codes, member epochs, statuses, tasks and group descriptions."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.integration.test_streams_group_wire import _beat, _topology
from tests.reference.wire import Wire, err

HEARTBEAT, DESCRIBE = 88, 89


async def _answers(port: int, app: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        assert await wire.create_topic(f"{app}-input", 2) == "NONE"
        await wire.find_coordinator(app, 0)
        out = []
        tasks_from = None  # the epoch the tasks came at: later epochs are compared from it

        async def heartbeat(label: str, member: str = "m1", epoch: int = 0, **body):
            r = await wire.retry(lambda: wire.request("streams_group_heartbeat", _beat(app, member, epoch, **body),
                                                      version=0, key=HEARTBEAT))
            tasks = None if r.active_tasks is None else sorted((t.subtopology_id, t.partitions) for t in r.active_tasks)
            member_epoch = r.member_epoch if r.error_code == 0 else None
            if member_epoch is not None and tasks_from is not None and member_epoch > 0:
                member_epoch -= tasks_from
            out.append((label, err(r.error_code), member_epoch,
                        sorted(s.status_code for s in r.status or ()), tasks))
            return r

        async def describe(label: str, group_id: str):
            r = await wire.request("streams_group_describe", {"group_ids": [group_id],
                                                              "include_authorized_operations": False},
                                   version=0, key=DESCRIBE)
            g = r.groups[0]
            if g.error_code:
                out.append((label, err(g.error_code)))
                return
            subtopologies = g.topology.subtopologies
            base = tasks_from or 0
            out.append((label, g.group_state, g.group_epoch - base, g.assignment_epoch - base, g.topology.epoch,
                        None if subtopologies is None else [(s.subtopology_id, s.source_topics) for s in subtopologies],
                        sorted((m.member_id, m.process_id, m.member_epoch - base) for m in g.members)))

        await heartbeat("empty member id", member="", topology=_topology(app))
        await heartbeat("no topology at join")
        await heartbeat("unknown member of unknown group", epoch=3)
        await describe("unknown group", app)
        joined = await heartbeat("join", topology=_topology(app))
        epoch = joined.member_epoch
        # Kafka creates the internal topics after answering, and holds a new group's first
        # assignment group.streams.initial.rebalance.delay.ms: beat until the tasks come.
        deadline = time.monotonic() + 30
        while True:
            r = await wire.request("streams_group_heartbeat", _beat(app, "m1", epoch, active_tasks=[]), version=0,
                                   key=HEARTBEAT)
            assert r.error_code == 0, err(r.error_code)
            epoch = r.member_epoch
            if r.active_tasks:
                tasks_from = epoch
                break
            assert time.monotonic() < deadline, "no tasks within 30 s"
            await asyncio.sleep(0.2)
        out.append(("tasks", sorted((t.subtopology_id, t.partitions) for t in r.active_tasks)))
        await heartbeat("steady", epoch=epoch, active_tasks=[{"subtopology_id": t.subtopology_id,
                                                             "partitions": t.partitions} for t in r.active_tasks])
        await heartbeat("rejoin with epoch 0", topology=_topology(app))
        # A second member: its tasks come after the assignment interval, once the first
        # gave up what it is to give (each keeps one task of each subtopology).
        m2 = await heartbeat("second member", member="m2", topology=_topology(app))
        await asyncio.sleep(1.5)
        first = await heartbeat("first, told to give tasks up", epoch=epoch, active_tasks=[
            {"subtopology_id": t.subtopology_id, "partitions": t.partitions} for t in r.active_tasks])
        kept = [{"subtopology_id": t.subtopology_id, "partitions": t.partitions} for t in first.active_tasks]
        first = await heartbeat("first, tasks given up", epoch=first.member_epoch, active_tasks=kept)
        await heartbeat("second, given the tasks", member="m2", epoch=m2.member_epoch, active_tasks=[])
        epoch = first.member_epoch
        await heartbeat("epoch ahead", epoch=epoch + 10, active_tasks=[])
        await heartbeat("unknown member", member="m9", epoch=epoch, active_tasks=[])
        other = _topology(app)
        other["subtopologies"] = other["subtopologies"][:1]
        await heartbeat("another topology", member="m2", topology=other)
        consumer = await wire.request("consumer_group_heartbeat", {
            "group_id": app, "member_id": "c1", "member_epoch": 0, "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [f"{app}-input"], "topic_partitions": []})
        out.append(("consumer heartbeat on a streams group", err(consumer.error_code)))
        await describe("streams group", app)
        await heartbeat("leave", epoch=-1, active_tasks=None, standby_tasks=None, warmup_tasks=None)
        await asyncio.sleep(1.5)  # past the assignment interval: the other's new assignment is made
        await describe("after leaving", app)
        return out
    finally:
        await wire.close()


@pytest.mark.reference_extended  # about 15 s: the initial delay and assignment interval, waited on both
def test_streams_group_answers_match_kafka(kafka_broker, broker_factory):
    eos = broker_factory({"emulate.kafka.version": "4.4"})
    app = f"sg-{uuid.uuid4().hex[:8]}"
    kafka_answers = asyncio.run(_answers(kafka_broker.port, app))
    eos_answers = asyncio.run(_answers(eos.port, app))
    assert eos_answers == kafka_answers
