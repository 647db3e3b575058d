"""Contradictory or incomplete listener settings, against Apache Kafka 4.4: each is
refused by eosbroker with the message Kafka's own configuration check gives (Kafka's
StorageTool reads the same KafkaConfig as the broker, without starting one)."""

from __future__ import annotations

import subprocess

import pytest

from broker.config import BrokerConfig, ConfigError
from tests.reference import maven
from tests.reference.kafka_broker import kafka_classpath

BASE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093",
    "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
}

CASES = [
    {"inter.broker.listener.name": "SSL"},
    {"listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19094"},
    {"listeners": "INTERNAL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"},
    {"listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://localhost:19092"},
    {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:TLS"},
    {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
    {"advertised.listeners": "PLAINTEXT://0.0.0.0:19092"},
    {"advertised.listeners": "PLAINTEXT://localhost:19092,SSL://localhost:19095"},
    {"controller.listener.names": "CTRL"},
    {"listeners": "CONTROLLER://127.0.0.1:19093"},
    {"process.roles": "broker", "controller.quorum.voters": "2@127.0.0.1:19093"},
]


def kafkas_message(settings: dict[str, str], workdir) -> str:
    config = workdir / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**settings, "log.dirs": str(workdir / "logs")}.items()))
    run = subprocess.run([maven.require("java"), "-cp", kafka_classpath(), "kafka.tools.StorageTool", "format",
                          "--cluster-id=4L6g3nShT-eMCtK--X86sw", "-c", str(config), "--ignore-formatted"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0, run.stdout
    line = next(line for line in (run.stderr + run.stdout).splitlines() if "Exception" in line)
    return line.split("Exception: ", 1)[1].removeprefix("requirement failed: ")


def eosbrokers_message(settings: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig.load(None, [f"{k}={v}" for k, v in settings.items()]).listener_plan()
    return str(refused.value)


CI = 3  # each case starts a JVM: the first few in make test, every one in make test-reference


@pytest.mark.parametrize("case", [pytest.param(case, id=",".join(case),
                                               marks=() if i < CI else pytest.mark.reference_extended)
                                  for i, case in enumerate(CASES)])
def test_refused_with_kafkas_message(case, tmp_path):
    settings = {**BASE, **case}
    assert eosbrokers_message(settings) == kafkas_message(settings, tmp_path)
