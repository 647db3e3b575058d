"""``eosbroker healthcheck``: exit 0 when a broker answers a Kafka ApiVersions request.

A container healthcheck: an open port is not enough (the listener accepts before the
coordinators load), a protocol round trip is. The address defaults to the one
``serve`` reads from the environment (EOSBROKER_HOST, EOSBROKER_PORT).
"""

from __future__ import annotations

import asyncio
import os

import click
from kio.schema.errors import ErrorCode

from broker.wire.client import KafkaConnection
from protocol.answer_wire import request_type

API_VERSIONS = 18


async def api_versions(host: str, port: int, timeout: float, tls=None) -> int:
    """The number of APIs the broker offers; raises on any failure. ``tls``: an
    ssl.SSLContext for an SSL or SASL_SSL listener (ApiVersions needs no SASL login)."""
    conn = await asyncio.wait_for(KafkaConnection.connect(host, port, "eosbroker-healthcheck", tls=tls), timeout)
    try:
        response = await conn.request(API_VERSIONS, 3, request_type(API_VERSIONS)(
            client_software_name="eosbroker-healthcheck", client_software_version="1"), timeout)
    finally:
        await conn.close()
    if response.error_code != ErrorCode.none:
        raise RuntimeError(f"ApiVersions answered {ErrorCode(response.error_code).name.upper()}")
    return len(response.api_keys)


def _default_address() -> str:
    host = os.environ.get("EOSBROKER_HOST", "127.0.0.1")
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{os.environ.get('EOSBROKER_PORT', '9092')}"


@click.command("healthcheck")
@click.option("--bootstrap-server", "address", default=_default_address, metavar="HOST:PORT",
              help="the broker to ask (default: from EOSBROKER_HOST and EOSBROKER_PORT, else 127.0.0.1:9092)")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="seconds to wait for the answer")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), default=None,
              help="speak TLS (an SSL or SASL_SSL listener), checking the broker's certificate against this CA "
                   "(PEM, e.g. eosbroker certs' ca.crt)")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="a client certificate (PEM) for a listener that requires one, with --tls-key")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="its private key (PEM)")
def healthcheck(address: str, timeout: float, tls_ca: str | None, tls_cert: str | None, tls_key: str | None) -> None:
    """Exit 0 if the broker answers ApiVersions, 1 if not (for container healthchecks)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise click.BadParameter(f"expected HOST:PORT, got {address!r}", param_hint="--bootstrap-server")
    if (tls_cert is None) != (tls_key is None) or (tls_cert is not None and tls_ca is None):
        raise click.UsageError("--tls-cert and --tls-key go together, with --tls-ca")
    tls = None
    if tls_ca is not None:
        import ssl

        tls = ssl.create_default_context(cafile=tls_ca)
        if tls_cert is not None:
            tls.load_cert_chain(tls_cert, tls_key)
    try:
        count = asyncio.run(api_versions(host, int(port), timeout, tls))
    except (OSError, asyncio.TimeoutError, RuntimeError, ConnectionError) as e:
        click.echo(f"unhealthy: {address}: {e or type(e).__name__}", err=True)
        raise SystemExit(1) from None
    click.echo(f"healthy: {address} offers {count} APIs")
