"""The KIP-1331 versions against Apache Kafka 4.4 and eosbroker (4.4 profile), at the wire:
the advertised ranges of StreamsGroupHeartbeat, StreamsGroupDescribe and
StreamsGroupTopologyDescriptionUpdate; StreamsGroupTopologyDescriptionUpdate without a
topology description plugin (Kafka's default); a v1 heartbeat's AcceptableRecoveryLag,
TopologyDescriptionRequired and MISSING_CLIENT_TAGS status under the
streams.rack.aware.assignment.tags group config (v0 never gets it); StreamsGroupDescribe
v1's topology description status and assignor name."""

from __future__ import annotations

import asyncio
import uuid

from tests.integration.test_streams_group_wire import _beat, _topology
from tests.reference.test_streams_group_member_answers import set_group_configs
from tests.reference.wire import Wire, err

API_VERSIONS, HEARTBEAT, DESCRIBE, TOPOLOGY_DESCRIPTION_UPDATE = 18, 88, 89, 93


def _description(app: str) -> dict:
    source = {"name": "KSTREAM-SOURCE-0000000000", "node_type": 1, "source_topics": [f"{app}-input"],
              "sink_topic": None, "stores": [], "successors": ["KSTREAM-SINK-0000000001"]}
    sink = {"name": "KSTREAM-SINK-0000000001", "node_type": 3, "source_topics": [], "sink_topic": f"{app}-out",
            "stores": [], "successors": []}
    return {"subtopologies": [{"subtopology_id": "0", "nodes": [source, sink]}], "global_stores": []}


async def _answers(port: int, app: str) -> list[tuple]:
    wire = await Wire.connect(port)
    try:
        versions = await wire.request("api_versions", {"client_software_name": "t", "client_software_version": "1"},
                                      version=3, key=API_VERSIONS)
        out: list[tuple] = [("versions", sorted((k.api_key, k.min_version, k.max_version) for k in versions.api_keys
                                                if k.api_key in (HEARTBEAT, DESCRIBE, TOPOLOGY_DESCRIPTION_UPDATE)))]
        assert await wire.create_topic(f"{app}-input", 2) == "NONE"
        out.append(("group configs", await set_group_configs(wire, app, {
            "streams.rack.aware.assignment.tags": "zone, cluster"})))
        await wire.find_coordinator(app, 0)

        async def update(label: str, member: str):
            r = await wire.request("x", {"group_id": app, "member_id": member, "topology_epoch": 0,
                                         "topology_description": _description(app)},
                                   version=0, key=TOPOLOGY_DESCRIPTION_UPDATE)
            out.append((label, err(r.error_code), r.error_message))

        async def heartbeat(label: str, member: str, version: int, tags: dict[str, str]):
            r = await wire.retry(lambda: wire.request("x", _beat(
                app, member, 0, topology=_topology(app), client_tags=[{"key": k, "value": v} for k, v in tags.items()]),
                version=version, key=HEARTBEAT))
            out.append((label, err(r.error_code), r.acceptable_recovery_lag,
                        getattr(r, "topology_description_required", None),
                        sorted((s.status_code, s.status_detail) for s in r.status or () if s.status_code == 6)))

        await update("update, unknown group", "m1")
        await heartbeat("v1 join, no tags", "m1", 1, {})
        await heartbeat("v1 join, one tag", "m2", 1, {"zone": "a"})
        await heartbeat("v1 join, both tags", "m3", 1, {"zone": "a", "cluster": "c"})
        await heartbeat("v0 join, no tags", "m4", 0, {})
        await update("update, a member", "m1")
        await update("update, unknown member", "nobody")
        for include in (False, True):
            r = await wire.request("x", {"group_ids": [app, f"{app}-none"], "include_authorized_operations": False,
                                         "include_topology_description": include}, version=1, key=DESCRIBE)
            out.append((f"describe v1, include={include}", sorted(
                (g.group_id == app, err(g.error_code), g.topology_description_status, g.assignor_name,
                 g.topology_description) for g in r.groups)))
        return out
    finally:
        await wire.close()


def test_streams_group_v1_answers_match_kafka(kafka_broker, broker_factory):
    eos = broker_factory({"emulate.kafka.version": "4.4"})
    app = f"sg1-{uuid.uuid4().hex[:8]}"
    kafka_answers = asyncio.run(_answers(kafka_broker.port, app))
    eos_answers = asyncio.run(_answers(eos.port, app))
    assert eos_answers == kafka_answers
