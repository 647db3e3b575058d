"""Every scenario of scenarios.py against eosbroker and Apache Kafka: the same answers.

A difference fails the test unless it is listed in KNOWN below with the exact values
both brokers give (README "Differences from Apache Kafka" says why); a listed
difference that goes away fails too, so the table stays true.
"""

from __future__ import annotations

import uuid

import pytest

from tests.reference.scenarios import SCENARIOS, Run, Scenario
from tests.reference.wire import Wire

# scenario id -> {step label: (Kafka's value, eosbroker's value)}
KNOWN: dict[str, dict[str, tuple]] = {
    # Kafka verifies a transactional batch with the coordinator before it looks inside;
    # eosbroker validates the batch first. Only a batch that is both invalid and foreign shows it.
    "produce_unverifiable_marker": {"foreign marker": (("INVALID_PRODUCER_ID_MAPPING", -1), ("INVALID_RECORD", -1))},
}


async def run_scenario(port: int, scenario: Scenario, tag: str, eos_control=None) -> list[tuple[str, object]]:
    wire = await Wire.connect(port)
    try:
        run = Run(wire, f"d-{tag}", tag, eos_control=eos_control)
        assert await wire.create_topic(run.topic, scenario.partitions, scenario.topic_configs) == "NONE"
        out = []
        for label, action in scenario.steps:
            out.append((label, await action(run)))
        return out
    finally:
        await wire.close()


def differences(kafka: list, eos: list) -> dict[str, tuple]:
    assert [label for label, _ in kafka] == [label for label, _ in eos]
    return {label: (k, e) for (label, k), (_, e) in zip(kafka, eos) if k != e}


@pytest.mark.parametrize("scenario", [
    pytest.param(s, id=s.id, marks=() if s.ci else pytest.mark.reference_extended) for s in SCENARIOS])
async def test_same_answers_as_kafka(scenario, eos_reference, kafka_broker):
    tag = f"{scenario.id[:30]}-{uuid.uuid4().hex[:6]}"
    kafka = await run_scenario(kafka_broker.port, scenario, tag)
    eos = await run_scenario(eos_reference.port, scenario, tag, eos_reference.control())
    assert differences(kafka, eos) == KNOWN.get(scenario.id, {})


def test_enough_scenarios():
    assert len(SCENARIOS) >= 60
    assert len({s.id for s in SCENARIOS}) == len(SCENARIOS)
