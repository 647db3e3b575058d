"""A node's listener on a numeric address is bound without the resolver (broker.wire.server
._bound_socket) and must behave as the loop's own create_server(host, port) would; ``serve``
listens before the broker has loaded (broker.wire.listeners.listen_early), and a client
connecting meanwhile is answered once the broker serves."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest
import uvloop

from broker.wire.server import _bound_socket


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_numeric_address_is_bound_like_create_server_binds_it(host):
    sock = _bound_socket(host, 0)
    try:
        assert sock.family == (socket.AF_INET if ":" not in host else socket.AF_INET6)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        assert sock.getsockname()[0] == host
    finally:
        sock.close()


def test_a_host_name_is_left_to_the_loop():
    assert _bound_socket("localhost", 0) is None
    assert _bound_socket("", 0) is None


def test_a_taken_port_fails_with_the_loops_own_error():
    async def loop_error(port: int) -> OSError:
        with pytest.raises(OSError) as raised:
            await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", port)
        return raised.value

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as ours:
            _bound_socket("127.0.0.1", port)
        theirs = uvloop.run(loop_error(port))
        assert ours.value.errno == theirs.errno == errno.EADDRINUSE
        assert str(ours.value) == str(theirs)
    finally:
        taken.close()


def test_the_loop_serves_and_closes_a_bound_socket():
    async def serve_once() -> int:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=_bound_socket("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        server.close()
        await server.wait_closed()
        return port

    port = uvloop.run(serve_once())
    _bound_socket("127.0.0.1", port).close()  # the closed server left the port free


def _metadata_v1_frame() -> bytes:
    from protocol.answer_wire import build_request, encode
    from protocol.request_wire import encode_request_frame

    return encode_request_frame(3, 1, 7, "early", False, encode(build_request(3, 1, {"topics": []})))


def test_a_client_connecting_before_the_broker_is_made_is_answered_once_it_serves(tmp_path):
    from broker.config import BrokerConfig
    from broker.process import Broker
    from broker.wire.listeners import listen_early

    config = BrokerConfig.load(None, [])
    listening = listen_early(config.listener_plan("127.0.0.1", 0), 1)
    (early,) = [sock for sockets in listening.values() for sock in sockets]
    port = early.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port), timeout=30)  # in the backlog: nothing serves it yet
    client.sendall(_metadata_v1_frame())

    async def serve() -> bytes:
        broker = Broker(config, tmp_path / "data", "127.0.0.1", 0, listening=listening)
        await broker.start()
        try:
            assert broker.port == port  # the node serves the socket made before it
            loop = asyncio.get_running_loop()
            size = int.from_bytes(await loop.run_in_executor(None, client.recv, 4), "big")
            return await loop.run_in_executor(None, client.recv, size)
        finally:
            await broker.stop()

    try:
        answer = uvloop.run(serve())
    finally:
        client.close()
    assert answer[:4] == (7).to_bytes(4, "big")  # the correlation id of the request sent before


def test_sockets_made_early_that_no_node_takes_are_closed_at_start(tmp_path):
    from broker.config import BrokerConfig
    from broker.process import Broker
    from broker.wire.listeners import listen_early

    config = BrokerConfig.load(None, [])
    listening = listen_early(config.listener_plan("127.0.0.1", 0), 2)  # two nodes' worth; the broker has one
    made = [sock for sockets in listening.values() for sock in sockets]
    assert len(made) == 2

    async def start_and_stop() -> tuple[int, list[int]]:
        broker = Broker(config, tmp_path / "data", "127.0.0.1", 0, listening=listening)
        await broker.start()
        try:
            return broker.port, [sock.getsockname()[1] for sock in made if sock.fileno() != -1]
        finally:
            await broker.stop()

    port, open_after_start = uvloop.run(start_and_stop())
    assert open_after_start == [port]  # the one the node serves; the other closed at start
    assert all(sock.fileno() == -1 for sock in made)  # and the node's at its stop


def test_a_taken_port_is_left_to_the_nodes_start_which_reports_it_as_before():
    from broker.config import BrokerConfig
    from broker.wire.listeners import listen_early

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        assert listen_early(BrokerConfig.load(None, []).listener_plan("127.0.0.1", port), 1) == {}
    finally:
        taken.close()
