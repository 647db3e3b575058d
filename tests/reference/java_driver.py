"""The Java client driver (tests/reference/java-driver): built once by Maven, run per scenario."""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path

from tests.reference import maven

PROJECT = Path(__file__).parent / "java-driver"


@cache
def classpath() -> str:
    jar = maven.built_jar(PROJECT, "java-driver")
    return os.pathsep.join([str(jar), maven.classpath(PROJECT / "pom.xml", "java-driver-deps")])


def run(scenario: str, bootstrap: str, name: str, *extra: str, timeout: float = 240,
        client_properties: Path | None = None) -> dict:
    """Runs one scenario of eosbroker.driver.Main (``extra``: its further arguments);
    its last stdout line is a JSON object. ``client_properties``: a file of client
    settings every client of the scenario adds (a secured listener's)."""
    result = subprocess.run(
        [maven.require("java"), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(), "eosbroker.driver.Main",
         scenario, bootstrap, name, *extra],
        capture_output=True, text=True, timeout=timeout,
        env=None if client_properties is None else {**os.environ, "DRIVER_CLIENT_PROPERTIES": str(client_properties)},
    )
    if result.returncode != 0:
        raise AssertionError(f"java driver {scenario} failed ({result.returncode}):\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
