"""A node's listener on a numeric address is bound without the resolver (broker.wire.server
._bound_socket) and must behave as the loop's own create_server(host, port) would."""

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
