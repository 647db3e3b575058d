"""What a broker process imports on its way to serving clients.

Start-up time is the bench's business; this guards its cause without a clock: a
``serve`` process without ``--admin-port``, started in a fresh working directory (as the
bench and containers start it), answers a real client and is stopped, and Python's own
import log (``-X importtime``) must name none of the packages that path never needs.
Hypothesis (pulled in by kio when installed) once cost ~2 s there.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient

# packages the serve path must not load: test-only, the tools' (click), the control API's, the Spark client's
NOT_ON_THE_SERVE_PATH = ("hypothesis", "click", "aiohttp", "prometheus_client", "pyspark", "pandas", "pyarrow",
                         # loaded by the metadata files and the fault rules on first use: a fresh broker has none
                         "json", "random",
                         # kio.index's name resolver (the broker finds kio's schemas itself)
                         "pkgutil")
# the broker's own modules a fresh broker answering Metadata does not need yet: partition
# storage (loads with the first partition), coordinators, the control API, scenarios, tools,
# fault rules and what a request names for them (load with the first rule or trigger), ACL
# bindings (with the first ACL request or stored ACL file)
NOT_BEFORE_FIRST_USE = ("broker.log.partition", "broker.log.partition_log", "broker.log.producer_state",
                        "protocol.records", "broker.coordinators.transaction_service", "broker.coordinators.group_service",
                        "broker.control", "broker.control.service", "broker.faults.scenarios", "broker.tools", "coordinator.transaction",
                        "coordinator.group", "broker.faults.rules", "broker.faults.fields",
                        "broker.security.acl_bindings",
                        # the certificate principal mapping: with the first TLS connection
                        "broker.security.principal_mapping",
                        # Kafka's settings table: with the first broker config change
                        "broker.kafka_settings",
                        # kio's schema loader (and pkgutil's name resolver): the schemas are
                        # found in kio's schema index (protocol.request_wire.kio_schema)
                        "kio.index")


def _logged(import_log: str) -> set[str]:
    """Every module name in a ``-X importtime`` log."""
    return {line.rsplit("|", 1)[1].strip() for line in import_log.splitlines()
            if line.startswith("import time:") and "|" in line} - {"imported package"}


def _imported(import_log: str) -> set[str]:
    """Top-level packages loaded. A submodule's line alone does not count: an import
    refused before loading (the broker keeps Hypothesis out that way) is logged under the
    submodule's name only."""
    return {name for name in _logged(import_log) if "." not in name}


def test_serve_path_imports_nothing_it_does_not_need(tmp_path):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "broker.program", "serve", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--override", "num.partitions=1"],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})  # this checkout's broker
    try:
        line = proc.stdout.readline()
        assert line.startswith("eosbroker listening on "), line
        admin = AdminClient({"bootstrap.servers": line.split()[-1]})
        assert admin.list_topics(timeout=30).brokers  # ApiVersions + Metadata from a real client
        del admin  # destroyed before its broker stops, so it does not retry a closed port
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    imported = _imported(stderr)
    assert {"broker", "kio", "asyncio"} <= imported  # the log is the real one
    assert not imported & set(NOT_ON_THE_SERVE_PATH), sorted(imported & set(NOT_ON_THE_SERVE_PATH))
    assert not (workdir / ".hypothesis").exists()
    early = {name for name in _logged(stderr) if name.startswith(NOT_BEFORE_FIRST_USE)}
    assert "broker.cluster.cluster" in _logged(stderr) and not early, sorted(early)
    # the answer types come from the specs ``make compile`` stored: only the Metadata
    # versions the client used are imported, not the 14 the broker serves
    metadata_versions = {name.split(".")[3] for name in _logged(stderr) if name.startswith("kio.schema.metadata.v")}
    assert metadata_versions and len(metadata_versions) <= 2, sorted(metadata_versions)


_LISTENING_BEFORE_THE_BROKER_LOADS = """
import socket, sys

class Probe:  # looks at the port when the broker's process module is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "broker.process":
            with socket.socket() as client:
                client.settimeout(30)
                print("accepting before broker.process loads:", client.connect_ex(("127.0.0.1", {port})) == 0,
                      flush=True)
        return None

sys.meta_path.insert(0, Probe())
sys.argv = ["eosbroker", "serve", "--port", "{port}", "--data-dir", sys.argv[1]]
from broker.program import run
run()
"""


def test_serve_listens_before_the_broker_loads(tmp_path):
    """A client connecting while the broker's modules load waits for its answer instead
    of being refused (broker.wire.listeners.listen_early)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", _LISTENING_BEFORE_THE_BROKER_LOADS.format(port=port), str(tmp_path / "data")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert proc.stdout.readline().strip() == "accepting before broker.process loads: True"
        assert proc.stdout.readline().startswith(f"eosbroker listening on 127.0.0.1:{port}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
