"""A connection's StreamWriter can wait for the connection to close, as any asyncio
stream's can (the broker's own reader protocol answers wait_closed)."""

from __future__ import annotations

import asyncio

import uvloop

from broker.process import Broker
from broker.config import BrokerConfig


def test_a_connections_writer_waits_until_the_peer_has_gone(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig({}), tmp_path / "data", "127.0.0.1", 0)
        await broker.start()
        server = broker.nodes[0].server
        try:
            _, client = await asyncio.open_connection("127.0.0.1", server.port)
            for _ in range(500):
                if server.connections:
                    break
                await asyncio.sleep(0.01)
            [conn] = server.connections.values()
            closed = asyncio.ensure_future(conn.writer.wait_closed())
            await asyncio.sleep(0.05)
            assert not closed.done()  # the peer is still there
            client.close()
            await asyncio.wait_for(closed, 10)
            await conn.writer.wait_closed()  # asked again once closed: at once
        finally:
            await broker.stop()

    uvloop.run(scenario())
