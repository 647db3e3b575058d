"""ShareGroupHeartbeat and ShareGroupDescribe at the wire, against Apache Kafka 4.4 and
eosbroker (4.4 profile): the same requests, among them every refusal a share member can
meet, get the same error codes, member epochs and group descriptions; then the member's
partitions come at the next epoch once the share coordinator initialized their state, and a
second member joining at once waits for the assignment interval."""

from __future__ import annotations

import asyncio
import uuid

from tests.reference.wire import Wire, err

HEARTBEAT, DESCRIBE = 76, 77


async def _answers(port: int, topic: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        assert await wire.create_topic(topic, 2) == "NONE"
        group = f"sg-{topic}"
        await wire.find_coordinator(group, 0)
        member = uuid.uuid4().hex[:22]
        out = []

        async def heartbeat(label: str, **body):
            fields = {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                      "subscribed_topic_names": [topic], **body}
            r = await wire.retry(lambda: wire.request("share_group_heartbeat", fields, version=1, key=HEARTBEAT))
            out.append((label, err(r.error_code), r.member_epoch if r.error_code == 0 else None))
            return r

        async def describe(label: str, group_id: str, epochs: bool = False):
            r = await wire.request("share_group_describe", {"group_ids": [group_id],
                                                            "include_authorized_operations": False},
                                   version=1, key=DESCRIBE)
            g = r.groups[0]
            out.append((label, err(g.error_code), g.group_state if g.error_code == 0 else None,
                        g.assignor_name if g.error_code == 0 else None,
                        sorted(m.member_id == member for m in g.members),
                        g.group_epoch - g.assignment_epoch if epochs else None))

        await heartbeat("empty member id", member_id="")
        await heartbeat("no topics at join", subscribed_topic_names=[])
        await heartbeat("unknown member of unknown group", member_epoch=3)
        await describe("unknown group", group)
        joined = await heartbeat("join")
        for _ in range(600):  # until the share coordinator initialized the partitions' state (a minute at most)
            assigned = await wire.request("share_group_heartbeat", {
                "group_id": group, "member_id": member, "member_epoch": joined.member_epoch, "rack_id": None,
                "subscribed_topic_names": None}, version=1, key=HEARTBEAT)
            if assigned.error_code or assigned.member_epoch != joined.member_epoch:
                break
            await asyncio.sleep(0.1)
        out.append(("assigned once initialized", err(assigned.error_code), assigned.member_epoch,
                    [sorted(t.partitions) for t in assigned.assignment.topic_partitions] if assigned.assignment else None))
        joined = assigned
        second = await wire.request("share_group_heartbeat", {
            "group_id": group, "member_id": member + "2", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": [topic]}, version=1, key=HEARTBEAT)
        out.append(("second member joins", err(second.error_code), second.member_epoch - joined.member_epoch,
                    bool(second.assignment and second.assignment.topic_partitions)))
        await wire.request("share_group_heartbeat", {"group_id": group, "member_id": member + "2", "member_epoch": -1,
                                                     "rack_id": None, "subscribed_topic_names": None},
                           version=1, key=HEARTBEAT)
        await heartbeat("epoch ahead", member_epoch=joined.member_epoch + 10)
        await heartbeat("unknown member", member_id=member + "x", member_epoch=joined.member_epoch)
        consumer = await wire.request("consumer_group_heartbeat", {
            "group_id": group, "member_id": member, "member_epoch": 0, "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [topic], "topic_partitions": []})
        out.append(("consumer heartbeat on a share group", err(consumer.error_code)))
        await describe("share group", group)
        await heartbeat("leave", member_epoch=-1)
        await describe("after leaving", group, epochs=True)  # the last one gone: the assignment epoch follows
        return out
    finally:
        await wire.close()


def test_share_group_answers_match_kafka(kafka_broker, broker_factory, topic_name):
    eos = broker_factory({"emulate.kafka.version": "4.4"})
    kafka_answers = asyncio.run(_answers(kafka_broker.port, topic_name))
    eos_answers = asyncio.run(_answers(eos.port, topic_name))
    # Both compute a share group's target assignment at most once per
    # group.share.assignment.interval.ms (1 s): a second member joining at once is answered
    # the last assignment's epoch and nothing.
    assert ("second member joins", "NONE", 0, False) in kafka_answers
    assert eos_answers == kafka_answers
