"""The Kafka Streams application (tests/reference/streams-app): built once by Maven, run
as a process a test may kill and start again."""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

from tests.reference import maven
from tests.reference.kafka_broker import die_with_parent

PROJECT = Path(__file__).parent / "streams-app"


@cache
def classpath() -> str:
    jar = maven.built_jar(PROJECT, "streams-app")
    return os.pathsep.join([str(jar), maven.classpath(PROJECT / "pom.xml", "streams-app-deps")])


def start(bootstrap: str, app_id: str, topics: tuple[str, str, str], state_dir: Path, log: Path,
          protocol: str = "streams", delay_ms: int = 0) -> subprocess.Popen:
    """The application reading ``topics`` (input, copy, counts) under ``app_id``, its
    output (state changes, FAILED and the stack of a fatal error) appended to ``log``."""
    out = open(log, "a")
    try:
        return subprocess.Popen(
            [maven.require("java"), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(), "eosbroker.streams.Main",
             bootstrap, app_id, *topics, str(state_dir), protocol, str(delay_ms)],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    finally:
        out.close()
