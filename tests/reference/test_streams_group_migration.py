"""Moving a Kafka Streams application between the classic protocol and the streams protocol
(KIP-1071), against Apache Kafka 4.4 and eosbroker (4.4 profile), at the wire. Kafka 4.4's
group coordinator converts only empty groups (offline migration): an empty classic group
(committed offsets, no members) becomes a streams group at the first StreamsGroupHeartbeat,
an empty streams group becomes a classic group at the first JoinGroup, and the committed
offsets stay both ways. A group with members is not converted: the other protocol's
request is refused. Answers are compared as the client sees them."""

from __future__ import annotations

import asyncio
import uuid

from tests.integration.test_streams_group_wire import _beat, _topology
from tests.reference.wire import Wire, err

HEARTBEAT, LIST_GROUPS = 88, 16


async def _commit(wire: Wire, group: str, topic: str, offset: int) -> str:
    """A commit without membership (generation -1), as an admin's or a simple consumer's."""
    await wire.find_coordinator(group, 0)
    r = await wire.retry(lambda: wire.request("offset_commit", {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        version=9), error_of=lambda r: r.topics[0].partitions[0].error_code)
    return err(r.topics[0].partitions[0].error_code)


async def _listed(wire: Wire, group: str) -> tuple | None:
    r = await wire.request("list_groups", {"states_filter": [], "types_filter": []}, version=5, key=LIST_GROUPS)
    return next(((g.group_type, g.group_state) for g in r.groups if g.group_id == group), None)


async def _committed(wire: Wire, group: str, topic: str):
    return (await wire.offset_fetch(group, topic, [0], require_stable=False))["partitions"][0]


async def _answers(port: int, app: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        topic = f"{app}-input"
        assert await wire.create_topic(topic, 2) == "NONE"

        async def beat(member: str, epoch: int, **fields):
            await wire.find_coordinator(app, 0)
            r = await wire.retry(lambda: wire.request("streams_group_heartbeat", _beat(app, member, epoch, **fields),
                                                      version=0, key=HEARTBEAT))
            return err(r.error_code), (r.error_message or "").replace(app, "<app>")

        out: list[tuple] = [("offsets committed", await _commit(wire, app, topic, 7)),
                            ("listed", await _listed(wire, app))]
        # an empty classic group: the streams member's join converts it
        out.append(("streams member joins", *await beat("s1", 0, topology=_topology(app))))
        out.append(("listed", (await _listed(wire, app))[0]))
        out.append(("offset kept", await _committed(wire, app, topic)))
        # a streams group with a member: a classic member is refused
        join = {"group_id": app, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range",
                                                                                      "metadata": b""}]}
        refused = await wire.request("join_group", join)
        out.append(("classic member joins a streams group with members", err(refused.error_code),
                    refused.member_id))
        # the streams member leaves: the group is empty, a classic member's join converts it
        out.append(("streams member leaves", *await beat("s1", -1, active_tasks=None, standby_tasks=None,
                                                         warmup_tasks=None)))
        out.append(("classic member joins", (await wire.join_group(app))[0]))
        out.append(("listed", await _listed(wire, app)))
        out.append(("offset kept", await _committed(wire, app, topic)))
        # a classic group with a member: a streams member is refused
        out.append(("streams member joins a classic group with members",
                    *await beat("s2", 0, topology=_topology(app))))
        out.append(("listed", await _listed(wire, app)))
        return out
    finally:
        await wire.close()


def test_migration_between_classic_and_streams_groups_matches_kafka(kafka_broker, broker_factory):
    eos_broker = broker_factory({"emulate.kafka.version": "4.4"})
    app = f"mig-{uuid.uuid4().hex[:8]}"
    kafka = asyncio.run(_answers(kafka_broker.port, app))
    eos = asyncio.run(_answers(eos_broker.port, app))
    assert eos == kafka
