"""What a workload is: a named function of a running broker that returns metrics.

A workload may require others to run before it in the same broker run (consume reads
the topic produce filled); ``RunContext.state`` carries such hand-overs. Targets are
the issue's acceptance figures for eosbroker, judged against the medians.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.brokers import RunningBroker

SUBJECT = "eosbroker"
PEER = "tansu"


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    better: Literal["higher", "lower"]
    fmt: str = ",.1f"


@dataclass(frozen=True)
class Target:
    """One acceptance figure for eosbroker on one metric.

    ``min_ratio_to_peer``: eosbroker >= ratio x ``peer`` (default tansu).  ``max_ratio_to_peer``: eosbroker
    <= ratio x peer (for lower-is-better metrics).  ``below``: eosbroker <= value.
    ``above``: eosbroker >= value.
    """

    metric: str
    description: str
    min_ratio_to_peer: float | None = None
    max_ratio_to_peer: float | None = None
    below: float | None = None
    above: float | None = None
    peer: str = PEER


@dataclass(frozen=True)
class Settings:
    records: int
    record_size: int
    timeout_s: float
    transactions: int = 2_000
    txn_state_records: int = 100_000
    txn_state_data_mb: int = 1000
    scale: float = 1.0  # multiplies the scaling workloads' sizes
    scale_kafka_max: int = 5_000  # partitions above which Kafka skips a size


@dataclass
class RunContext:
    broker: RunningBroker
    settings: Settings
    state: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)  # workload -> why a figure is missing or odd

    def note(self, workload: str, text: str) -> None:
        """Says, in the table's notes, why a figure of this run is missing or how to read it."""
        self.notes.setdefault(workload, []).append(text)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def deadline(self) -> float:
        """A perf_counter() deadline for one workload."""
        return time.perf_counter() + self.settings.timeout_s


class WorkloadFailed(Exception):
    pass


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    run: Callable[[RunContext], dict[str, float]]
    metrics: tuple[Metric, ...]
    requires: tuple[str, ...] = ()
    targets: tuple[Target, ...] = ()
    brokers: tuple[str, ...] | None = None  # the brokers it applies to; None: every broker
    why_only: str = ""  # with ``brokers``: why the others get n/a, printed under the table

    def applies_to(self, broker: str) -> bool:
        return self.brokers is None or broker in self.brokers
