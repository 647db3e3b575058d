"""A node removed from the cluster leaves no in-process connection behind: the other
nodes' connections to it, and its own, are dropped, so a node later added under the
same id connects afresh (as a new machine would) and the table stays bounded by the
nodes that exist."""

from __future__ import annotations

from broker.process import Broker
from broker.config import BrokerConfig
from protocol.answer_wire import request_type

API_VERSIONS = 18


async def _ask(broker: Broker, source: int, target: int) -> None:
    asked = request_type(API_VERSIONS)(client_software_name="test", client_software_version="0")
    answer = await broker.network.request(source, target, API_VERSIONS, 0, asked)
    assert answer.error_code == 0


async def test_removing_a_node_drops_its_connections_and_a_new_one_connects_afresh(tmp_path):
    broker = Broker(BrokerConfig({"node.count": 3}), tmp_path, "127.0.0.1", 0)
    await broker.start()
    try:
        for source, target in ((1, 3), (3, 1), (1, 2), (2, 3)):
            await _ask(broker, source, target)
        before = broker.network._connections[1, 3].id
        await broker.remove_node(3, broker.cluster.replicas.plan_removal(3, [1, 2]))
        assert set(broker.network._connections) == {(1, 2)}

        await broker.add_node(3)
        await _ask(broker, 1, 3)
        assert set(broker.network._connections) == {(1, 2), (1, 3)}
        assert broker.network._connections[1, 3].id != before
    finally:
        await broker.stop()
