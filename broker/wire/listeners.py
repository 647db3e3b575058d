"""Kafka's listeners: which sockets each node binds, the addresses it advertises, and
which listener the network between nodes uses. Read from ``listeners``,
``advertised.listeners``, ``listener.security.protocol.map``,
``inter.broker.listener.name`` / ``security.inter.broker.protocol``,
``controller.listener.names`` and ``process.roles``, and checked as KafkaConfig checks
them, with its messages.

Every node of the process serves every client listener: node i (0-based) binds each
listener's port + i (port 0: a free one), and advertises the advertised port + i.
The controller listeners of a combined node are accepted but not served: eosbroker has
no separate controller quorum, and Kafka clients never use them.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, replace

PLAINTEXT = "PLAINTEXT"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default listener.security.protocol.map: each protocol names a listener of itself
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}
# Kafka's endpoint syntax: NAME://host:port, the host possibly in [] (IPv6) or empty
_ENDPOINT = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
LISTEN_BACKLOG = 1024  # each listener's accept queue


class ListenerConfigError(ValueError):
    """Listener settings Kafka would refuse (its message), or eosbroker cannot serve yet."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the listener name, upper case as Kafka normalises it
    host: str  # "" binds every interface
    port: int
    protocol: str = PLAINTEXT

    def text(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListenerPlan:
    """What the settings say: the listeners served to clients (bound), where each is
    advertised, the inter-broker listener and the controller listeners (not served)."""

    served: tuple[Endpoint, ...]
    advertised: tuple[Endpoint, ...]  # the broker listeners of advertised.listeners
    inter_broker: str
    controller: tuple[Endpoint, ...] = ()
    short_form: bool = False  # from --host/--port: advertised as given, a wildcard too

    def binds(self, index: int) -> list[Endpoint]:
        """Node ``index``'s sockets: each listener's port + index (0 stays 0)."""
        return [replace(e, port=e.port + index if e.port else 0) for e in self.served]

    def advertised_for(self, index: int | None, bound: dict[str, int]) -> dict[str, tuple[str, int]]:
        """Node ``index``'s addresses by listener name, given the ports it bound:
        the advertised port + index, or the bound port where the advertised one is 0
        or the node has no index (added after start);
        a wildcard host becomes this machine's name, as Kafka's broker registers it."""
        out = {}
        for e in self.advertised:
            port = e.port + index if e.port and index is not None else bound.get(e.name, e.port)
            out[e.name] = (local_host_name() if e.host in WILDCARD_HOSTS and not self.short_form else e.host, port)
        return out


def local_host_name() -> str:
    """What Kafka's InetAddress.getLocalHost().getCanonicalHostName() gives."""
    return socket.getfqdn()


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = item.rpartition(":")
        if not sep or not name.strip():
            raise ListenerConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"Map entry '{item}' is improperly formatted.")
        protocol = protocol.strip()
        if protocol not in PROTOCOLS:
            raise ListenerConfigError(
                f"Invalid security protocol `{protocol}` defined in listener.security.protocol.map")
        out[name.strip().upper()] = protocol
    return out


def parse_endpoints(text: str, protocols: dict[str, str], distinct_ports: bool = True) -> list[Endpoint]:
    """A ``listeners``-style list, checked as Kafka's listenerListToEndPoints does; its
    messages show the list as Kafka 4.4 renders a LIST setting ("[A, B]")."""
    entries = [part.strip() for part in text.strip().split(",") if part.strip()]

    def refuse(reason: str) -> ListenerConfigError:
        return ListenerConfigError(f"Error creating broker listeners from '[{', '.join(entries)}]': {reason}")

    endpoints = []
    for entry in entries:
        match = _ENDPOINT.match(entry)
        if match is None or not 0 <= int(match.group(3)) <= 65535:
            raise refuse(f"Unable to parse {entry} to a broker endpoint")
        name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
        if name not in protocols:
            raise refuse(f"No security protocol defined for listener {name}")
        endpoints.append(Endpoint(name, host, port, protocols[name]))
    if len({e.name for e in endpoints}) != len(endpoints):
        raise refuse(f"Each listener must have a different name, listeners: [{', '.join(entries)}]")
    if distinct_ports:
        by_port: dict[int, list[Endpoint]] = {}
        for e in endpoints:
            if e.port:
                by_port.setdefault(e.port, []).append(e)
        for port, same in by_port.items():
            versions = sorted(v for e in same if (v := _ip_version(e.host)) is not None)
            if len(same) > 1 and versions != [4, 6]:  # one IPv4 and one IPv6 address may share a port
                raise refuse("Each listener must have a different port unless exactly one listener has an "
                             f"IPv4 address and the other IPv6 address, listeners: [{', '.join(entries)}], "
                             f"port: {port}")
    return endpoints


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def listener_plan(values: dict[str, str], explicit: set[str], host: str = "127.0.0.1",
                  port: int = 9092) -> ListenerPlan:
    """The listeners the settings ``values`` (raw text, by Kafka name) describe; ``host``
    and ``port`` (serve's --host/--port) are the one PLAINTEXT listener used when
    ``listeners`` is not set. ListenerConfigError with Kafka's message otherwise."""
    roles = {r.strip() for r in values.get("process.roles", "").split(",") if r.strip()}
    controller_names = [n.strip().upper() for n in values.get("controller.listener.names", "").split(",") if n.strip()]
    listeners_text = values.get("listeners") or Endpoint(PLAINTEXT, host, port).text()
    if "listener.security.protocol.map" in explicit:
        protocols = parse_protocol_map(values["listener.security.protocol.map"])
    else:
        protocols = dict(DEFAULT_PROTOCOL_MAP)
        # KafkaConfig: with KRaft and no SSL/SASL in sight, controller listeners default to PLAINTEXT
        names = controller_names + [e.split("://", 1)[0].strip().upper() for e in listeners_text.split(",")]
        if roles and not any(n in PROTOCOLS[1:] for n in names):
            protocols.update({n: PLAINTEXT for n in controller_names})
    listeners = parse_endpoints(listeners_text, protocols)
    listener_names = [e.name for e in listeners]
    if "advertised.listeners" in values and values["advertised.listeners"] is not None:
        advertised_all = parse_endpoints(values["advertised.listeners"], protocols, distinct_ports=False)
    else:
        advertised_all = listeners
    advertised = [e for e in advertised_all if e.name not in controller_names]

    if "controller" in roles and "broker" not in roles:
        raise ListenerConfigError("process.roles=controller: eosbroker runs brokers; a controller-only node "
                                  "is not supported (use process.roles=broker,controller or leave it unset)")
    if "controller" in roles:
        if not all(n in listener_names for n in controller_names):
            raise ListenerConfigError("controller.listener.names must only contain values appearing in the "
                                      "'listeners' configuration when running the KRaft controller role")
        if not controller_names:
            raise ListenerConfigError("controller.listener.names must contain at least one value appearing in the "
                                      "'listeners' configuration when running the KRaft controller role")
    elif roles == {"broker"}:
        if not controller_names:
            raise ListenerConfigError("controller.listener.names must contain at least one value when running "
                                      "KRaft with just the broker role")
        if any(n in listener_names for n in controller_names):
            raise ListenerConfigError("controller.listener.names must not contain a value appearing in the "
                                      "'listeners' configuration when running KRaft with just the broker role")

    if "inter.broker.listener.name" in explicit and "security.inter.broker.protocol" in explicit:
        raise ListenerConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                                  "should be set.")
    if values.get("inter.broker.listener.name"):
        inter_broker = values["inter.broker.listener.name"].strip().upper()
        if inter_broker not in protocols:
            raise ListenerConfigError(f"Listener with name {inter_broker} defined in inter.broker.listener.name "
                                      "not found in listener.security.protocol.map.")
    else:
        inter_broker = values.get("security.inter.broker.protocol", PLAINTEXT).strip()
        if inter_broker not in PROTOCOLS:
            raise ListenerConfigError(f"Invalid security protocol `{inter_broker}` defined in "
                                      "security.inter.broker.protocol")

    advertised_names = [e.name for e in advertised]
    if not advertised:
        raise ListenerConfigError("There must be at least one broker advertised listener."
                                  + (" Perhaps all listeners appear in controller.listener.names?" if roles else ""))
    if inter_broker not in advertised_names:
        raise ListenerConfigError(
            "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
            f"options based on currently configured listeners are {','.join(advertised_names)}")
    if not set(advertised_names) <= set(listener_names):
        raise ListenerConfigError(
            "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
            f"Found {','.join(advertised_names)}. The valid options based on the current configuration are "
            f"{','.join(listener_names)}")
    # (the --host/--port short form keeps advertising its host as given, 0.0.0.0 too)
    short_form = not values.get("listeners") and not values.get("advertised.listeners")
    if not short_form and any(e.host == "0.0.0.0" for e in advertised_all):
        raise ListenerConfigError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                                  "Use a routable IP address.")

    # Clients reach only the advertised broker listeners; a listener bound but not
    # advertised is served too (Kafka serves it; its Metadata answers omit it).
    served = [e for e in listeners if e.name not in controller_names]
    ordered = sorted(served, key=lambda e: (e.name != inter_broker, listener_names.index(e.name)))
    # A listener bound but not advertised is served as Kafka serves it: its clients are
    # told of no broker on it (Metadata: LISTENER_NOT_FOUND).
    return ListenerPlan(tuple(ordered), tuple(advertised), inter_broker,
                        tuple(e for e in listeners if e.name in controller_names), short_form)


def bound_socket(host: str, port: int) -> socket.socket | None:
    """A socket bound to a numeric address as ``create_server`` binds it (SO_REUSEADDR,
    IPv6 only on an IPv6 address, the same error), or None for a host name. A numeric
    address needs no resolver: uvloop would otherwise start its 4-thread pool for one
    getaddrinfo and load the idna codec at start-up."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((host, port))
            except OSError as e:
                raise OSError(e.errno, f"error while attempting to bind on address {(host, port)!r}: "
                                       f"{(e.strerror or str(e)).lower()}") from None
        except BaseException:
            sock.close()
            raise
        return sock
    return None


def listen_early(plan: ListenerPlan, nodes: int) -> dict[tuple[str, str, int], list[socket.socket]]:
    """Sockets bound and listening for the first ``nodes`` nodes' numeric listeners,
    made while the rest of the broker is still loading, by (listener name, host, port)
    as ``binds`` gives them: a client connecting during start-up waits in the backlog
    for its answer instead of being refused and backing off. A listener that cannot be
    bound here is left to its node's start, which binds it and reports the error as
    without this."""
    ready: dict[tuple[str, str, int], list[socket.socket]] = {}
    for index in range(nodes):
        for bind in plan.binds(index):
            try:
                sock = bound_socket(bind.host, bind.port)
                if sock is None:
                    continue
            except OSError:
                continue
            try:
                sock.listen(LISTEN_BACKLOG)
            except OSError:
                sock.close()
                continue
            ready.setdefault((bind.name, bind.host, bind.port), []).append(sock)
    return ready


def close_sockets(listening: dict[tuple[str, str, int], list[socket.socket]]) -> None:
    """Closes the sockets of ``listen_early`` left in ``listening``."""
    for sockets in listening.values():
        for sock in sockets:
            sock.close()
        sockets.clear()
