"""The Dockerfile and docker-compose.yml, read as data: what `make compose-test` runs
for real, checked here for structure (the compose network with INTERNAL and EXTERNAL listeners, the healthcheck, the
three-node cluster, the one-shot topics container, the Spark pipeline) and checked
against the command line they call."""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import click
import pytest
import yaml

from broker.commands import main
from broker.config import SETTINGS, BrokerConfig, env_name, environment_overrides

ROOT = Path(__file__).resolve().parents[2]
_VARIABLE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def _defaults(value):
    """Compose's ${NAME:-default} with the defaults filled in."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: m.group(2), value)
    if isinstance(value, list):
        return [_defaults(v) for v in value]
    if isinstance(value, dict):
        return {k: _defaults(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def compose():
    return _defaults(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


@pytest.fixture(scope="module")
def dockerfile():
    return (ROOT / "Dockerfile").read_text()


def _parses(argv: list[str]) -> None:
    """Resolves ``eosbroker ARGS`` down to its command and parses its options (runs nothing)."""
    assert argv[0] == "eosbroker", argv
    with warnings.catch_warnings():  # Click 8.2 renamed where a group keeps the rest of the line
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx = main.make_context("eosbroker", argv[1:])
        command, args = main, ctx.protected_args + ctx.args
        while isinstance(command, click.Group) and args:
            name, command, args = command.resolve_command(ctx, args)
            ctx = command.make_context(name, list(args), parent=ctx)
            args = ctx.protected_args + ctx.args if isinstance(command, click.Group) else []


def test_every_service_is_on_the_default_compose_network(compose):
    assert set(compose["services"]) == {"eosbroker", "topics", "spark", "certs", "eosbroker-sasl-ssl"}
    for name, service in compose["services"].items():
        assert "network_mode" not in service and "networks" not in service, name
    assert "networks" not in compose
    # only the broker is reached from the host, on loopback: EXTERNAL's three ports and the console
    assert compose["services"]["eosbroker"]["ports"] == ["127.0.0.1:9092-9094:9092-9094", "127.0.0.1:9644:9644"]
    assert not any("ports" in s for n, s in compose["services"].items() if n not in ("eosbroker", "eosbroker-sasl-ssl"))


def test_containers_use_internal_and_the_host_external(compose):
    """The broker's KAFKA_ variables, read as serve reads them: INTERNAL advertised under
    the service's name on the compose network, EXTERNAL as localhost on the published ports."""
    environment = compose["services"]["eosbroker"]["environment"]
    config = BrokerConfig.load(None, environment_overrides(environment))
    plan = config.listener_plan()
    assert plan.inter_broker == "INTERNAL"
    assert [(b.name, b.host, b.port) for b in plan.binds(2)] == [("INTERNAL", "0.0.0.0", 29094),
                                                                ("EXTERNAL", "0.0.0.0", 9094)]
    assert plan.advertised_for(2, {}) == {"INTERNAL": ("eosbroker", 29094), "EXTERNAL": ("localhost", 9094)}
    assert config.without_effect() == []


def test_the_cluster_service(compose, dockerfile):
    broker = compose["services"]["eosbroker"]
    assert broker["build"]["target"] == "broker" and "BASE_IMAGE" in broker["build"]["args"]
    command = broker["command"]
    assert command[:3] == ["serve", "--nodes", "3"] and "--admin-port" in command
    _parses(["eosbroker", *command])
    assert broker["healthcheck"]["test"] == ["CMD", "eosbroker", "healthcheck", "--bootstrap-server",
                                             "127.0.0.1:29092"]
    assert any(v.endswith(":/data") for v in broker["volumes"])
    # every variable names a setting
    for name, value in broker["environment"].items():
        assert environment_overrides({name: value}), name


def test_the_topics_container_runs_once_after_the_cluster_is_healthy(compose):
    topics = compose["services"]["topics"]
    assert topics["depends_on"] == {"eosbroker": {"condition": "service_healthy"}}
    assert topics["restart"] == "no" and topics["image"] == compose["services"]["eosbroker"]["image"]
    assert topics["entrypoint"] == ["sh", "-c"]
    steps = [shlex.split(step) for step in topics["command"][0].split("&&")]
    assert [s[4:6] for s in steps] == [["create", "--topic"], ["create", "--topic"], ["describe", "--exclude-internal"]]
    for step in steps:
        _parses(step)


def test_the_spark_container_runs_the_pipeline(compose, dockerfile):
    spark = compose["services"]["spark"]
    assert spark["depends_on"] == {"topics": {"condition": "service_completed_successfully"}}
    assert spark["build"]["target"] == "spark"
    assert spark["command"][:2] == ["python", "examples/pipeline.py"]
    assert spark["command"][2:] == ["--bootstrap", "eosbroker:29092"]
    assert (ROOT / spark["command"][1]).exists()


def test_the_dockerfile(dockerfile):
    assert re.search(r"^ARG BASE_IMAGE=python:3\.\d+-slim$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\} AS broker$", dockerfile, re.M)
    assert re.search(r"^FROM broker AS spark$", dockerfile, re.M)
    users = re.findall(r"^USER (\S+)$", dockerfile, re.M)
    assert users and users[-1] != "root" and users[0] != "root"  # each stage ends non-root
    assert "VOLUME /data" in dockerfile and "EOSBROKER_DATA_DIR=/data" in dockerfile
    assert 'HEALTHCHECK' in dockerfile and 'CMD ["eosbroker", "healthcheck"]' in dockerfile
    for copied in re.findall(r"^COPY (\S+) ", dockerfile, re.M):
        assert (ROOT / copied).exists(), copied


def test_settings_from_environment_variables():
    assert env_name("log.retention.ms") == "EOSBROKER_LOG_RETENTION_MS"
    env = {"EOSBROKER_LOG_RETENTION_MS": "60000", "KAFKA_NUM_PARTITIONS": "3", "KAFKA_HEAP_OPTS": "-Xmx1g",
           "KAFKA_LOG_SEGMENT_BYTES": "1000", "EOSBROKER_LOG_SEGMENT_BYTES": "2000", "HOME": "/data"}
    items = environment_overrides(env)
    assert sorted(items) == sorted(
        ["num.partitions=3", "log.segment.bytes=1000", "log.retention.ms=60000", "log.segment.bytes=2000"])
    # EOSBROKER_ comes after KAFKA_, so it wins when both set one setting
    assert items.index("log.segment.bytes=2000") > items.index("log.segment.bytes=1000")
    assert all(name in SETTINGS for name in (i.split("=")[0] for i in items))


def test_the_sasl_ssl_profile(compose):
    """certs makes the certificates (naming the host containers reach the broker by) before
    the secured cluster starts; its settings file serves SASL_SSL on INTERNAL and EXTERNAL
    with every mechanism, the nodes among themselves on a plaintext listener inside the
    container, which the healthcheck asks."""
    certs, broker = compose["services"]["certs"], compose["services"]["eosbroker-sasl-ssl"]
    assert certs["profiles"] == broker["profiles"] == ["sasl-ssl"]
    assert broker["depends_on"] == {"certs": {"condition": "service_completed_successfully"}}
    assert certs["restart"] == "no" and certs["entrypoint"] == ["sh", "-c"]
    make = shlex.split(certs["command"][0].split("||")[1].split("&&")[0].strip(" ()"))
    _parses(make)
    assert make[:2] == ["eosbroker", "certs"] and make[make.index("--dir") + 1] == "/certs"
    assert "./certs:/certs" in certs["volumes"] and "./certs:/certs:ro" in broker["volumes"]
    command = broker["command"]
    _parses(["eosbroker", *command])
    mounted = dict(v.split(":")[:2][::-1] for v in broker["volumes"] if v.startswith("./"))
    config_file = ROOT / mounted[command[command.index("--config") + 1]]
    config = BrokerConfig.load(str(config_file), [])
    plan = config.listener_plan()
    assert plan.inter_broker == "REPLICATION"
    assert plan.advertised_for(1, {}) == {"INTERNAL": ("eosbroker-sasl-ssl", 29193), "EXTERNAL": ("localhost", 9193),
                                          "REPLICATION": ("127.0.0.1", 29393)}
    assert make[make.index("--host") + 1] == "eosbroker-sasl-ssl"  # in the broker's certificate
    assert broker["ports"] == ["127.0.0.1:9192-9194:9192-9194"]
    assert broker["healthcheck"]["test"][-1] == "127.0.0.1:29392"
    sasl = config.sasl_listeners(plan, None)
    assert set(sasl) == {"INTERNAL", "EXTERNAL"}
    assert config.without_effect() == []
    users = {entry for i, entry in enumerate(command) if command[i - 1] == "--scram"}
    assert users == {f"SCRAM-SHA-{bits}=[name={u},password={u}-secret]" for bits in (256, 512)
                     for u in ("admin", "alice", "bob")}
