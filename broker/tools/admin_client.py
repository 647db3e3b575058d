"""The command-line tools' admin client: connections to any Kafka-compatible cluster
over the wire (broker/wire/client.py), the highest API version both sides speak, Metadata
for leaders and FindCoordinator for coordinators. ``eosbroker transactions`` and
``eosbroker topics`` build on it."""

from __future__ import annotations

import asyncio
from typing import Any

import click
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from broker.wire.client import KafkaConnection
from protocol import client
from protocol.answer_wire import is_request, request_type
from protocol.client import (
    API_VERSIONS,
    FIND_COORDINATOR,
    METADATA,
    NodeAddress,
    find_coordinator_request,
    metadata_request,
    parse_find_coordinator,
    parse_metadata,
)

REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0


class ToolError(Exception):
    """Ends the command with exit code 1 and this message."""


def error_name(error: ErrorCode | int) -> str:
    return ErrorCode(error).name.upper()


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    try:
        return client.parse_bootstrap(bootstrap)
    except client.InvalidBootstrap as e:
        raise ToolError(f"invalid --bootstrap-server entry {e.entry!r}: expected HOST:PORT") from None


class Admin:
    """Connections to a cluster and the few admin requests the commands need."""

    def __init__(self, bootstrap: str, spoken: dict[int, tuple[int, int]], client_id: str) -> None:
        """``spoken``: the version range of each API the tool can speak."""
        self.servers = parse_bootstrap(bootstrap)
        self.spoken = spoken
        self.client_id = client_id
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._versions: dict[int, tuple[int, int]] = {}
        self.nodes: dict[int, NodeAddress] = {}

    async def __aenter__(self) -> Admin:
        problems = []
        for host, port in self.servers:
            try:
                conn = await self._connect(host, port)
                response = await conn.request(API_VERSIONS, 0, request_type(API_VERSIONS)(
                    client_software_name=self.client_id, client_software_version="0"), REQUEST_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as e:
                problems.append(f"{host}:{port}: {e or type(e).__name__}")
                continue
            if response.error_code != ErrorCode.none:
                problems.append(f"{host}:{port}: ApiVersions failed with {error_name(response.error_code)}")
                continue
            self._versions = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}
            self._bootstrap = conn
            return self
        await self.close()
        raise ToolError("cannot reach any bootstrap server: " + "; ".join(problems))

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()

    async def _connect(self, host: str, port: int) -> KafkaConnection:
        conn = self._connections.get((host, port))
        if conn is None:
            conn = await asyncio.wait_for(
                KafkaConnection.connect(host, port, client_id=self.client_id), CONNECT_TIMEOUT_S)
            self._connections[(host, port)] = conn
        return conn

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` both this tool and the broker speak."""
        low, high = self.spoken[api_key]
        high = min(high, max(schema_name_map[api_key_map[api_key]]))
        broker = self._versions.get(api_key)
        if broker is not None and max(low, broker[0]) <= min(high, broker[1]):
            return min(high, broker[1])
        name = api_key_map[api_key].removesuffix("Request")
        offered = "not at all" if broker is None else f"v{broker[0]}-v{broker[1]}"
        raise ToolError(f"the broker does not support {name} v{low}-v{high} (it offers {offered})")

    async def request(self, node_id: int | None, api_key: int, body) -> tuple[int, Any]:
        """Sends ``body``, a request of the API's ``request_type``, to a node (None: the
        bootstrap server); returns (version, response)."""
        if not is_request(body):
            raise TypeError(f"the tools' {api_key_map[api_key]} request is a {type(body).__name__}; requests are "
                            f"of request_type({api_key})")
        version = self.version(api_key)
        if node_id is None:
            conn = self._bootstrap
        else:
            node = self.nodes.get(node_id)
            if node is None:
                raise ToolError(f"node {node_id} is not in the cluster metadata")
            try:
                conn = await self._connect(node.host, node.port)
            except (OSError, asyncio.TimeoutError) as e:
                raise ToolError(f"cannot connect to node {node_id} at {node.host}:{node.port}: {e}") from None
        try:
            return version, await conn.request(api_key, version, body, REQUEST_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ToolError(f"no answer to {api_key_map[api_key]} within {REQUEST_TIMEOUT_S:.0f} s") from None
        except ConnectionError as e:
            raise ToolError(f"{api_key_map[api_key]} failed: {e}") from None

    # -- requests --------------------------------------------------------------------

    async def leaders(self, topics: list[str] | None) -> dict[tuple[str, int], int]:
        """Leader of every partition of ``topics`` (None: every non-internal topic).
        Also records the cluster's nodes."""
        _, response = await self.request(None, METADATA, metadata_request(topics))
        metadata = parse_metadata(response)
        self.nodes = metadata.nodes
        leaders = {}
        for t in metadata.topics.values():
            if t.error != ErrorCode.none:
                raise ToolError(f"cannot describe topic {t.name}: {error_name(t.error)}")
            if topics is None and (t.is_internal or t.name.startswith("__")):
                continue
            for p, leader in t.leaders.items():
                leaders[(t.name, p)] = leader
        return leaders

    async def coordinator(self, transactional_id: str) -> int:
        version, response = await self.request(
            None, FIND_COORDINATOR, find_coordinator_request(self.version(FIND_COORDINATOR), [transactional_id]))
        answer = parse_find_coordinator(version, [transactional_id], response)[0]
        if answer.error != ErrorCode.none:
            raise ToolError(f"cannot find the coordinator of transactional-id `{transactional_id}`: "
                            f"{error_name(answer.error)}")
        self.nodes.setdefault(answer.node.node_id, answer.node)
        return answer.node.node_id


def run_admin(bootstrap: str, command, admin_class: type[Admin] = Admin, **admin_args) -> None:
    """Runs ``await command(admin)``; a ToolError ends the program with its message and exit code 1."""
    async def main():
        async with admin_class(bootstrap, **admin_args) as admin:
            await command(admin)

    try:
        asyncio.run(main())
    except ToolError as e:
        click.echo(f"Error: {e}", err=True)
        raise SystemExit(1) from None
