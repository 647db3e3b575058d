"""Medians, the side-by-side table, target verdicts and the JSON record of a session."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from bench.workloads import Workload
from bench.workloads.base import PEER, SUBJECT, Target


@dataclass
class RunResult:
    broker: str
    run: int
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # workload -> metric -> value
    error: str | None = None


Medians = dict[str, dict[tuple[str, str], float]]  # broker -> (workload, metric) -> median


def medians(results: list[RunResult]) -> Medians:
    samples: dict[str, dict[tuple[str, str], list[float]]] = {}
    for r in results:
        per_broker = samples.setdefault(r.broker, {})
        if r.error is not None:
            continue  # a failed run's partial figures would skew the median
        for workload, metrics in r.metrics.items():
            for metric, value in metrics.items():
                per_broker.setdefault((workload, metric), []).append(value)
    return {b: {k: statistics.median(v) for k, v in m.items()} for b, m in samples.items()}


@dataclass(frozen=True)
class Verdict:
    workload: str
    target: Target
    outcome: str  # PASS, FAIL, n/a
    detail: str


def judge(workloads: list[Workload], med: Medians) -> list[Verdict]:
    verdicts = []
    for w in workloads:
        for t in w.targets:
            subject = med.get(SUBJECT, {}).get((w.name, t.metric))
            if subject is None:
                verdicts.append(Verdict(w.name, t, "n/a", f"{SUBJECT} not measured"))
                continue
            if t.below is not None or t.above is not None:
                ok = (t.below is None or subject <= t.below) and (t.above is None or subject >= t.above)
                verdicts.append(Verdict(w.name, t, "PASS" if ok else "FAIL", f"{SUBJECT} {subject:,.2f}"))
            if t.min_ratio_to_peer is not None or t.max_ratio_to_peer is not None:
                peer = med.get(PEER, {}).get((w.name, t.metric))
                if not peer:
                    verdicts.append(Verdict(w.name, t, "n/a", f"{PEER} not measured"))
                    continue
                ratio = subject / peer
                ok = (t.min_ratio_to_peer is None or ratio >= t.min_ratio_to_peer) and (
                    t.max_ratio_to_peer is None or ratio <= t.max_ratio_to_peer
                )
                verdicts.append(Verdict(w.name, t, "PASS" if ok else "FAIL", f"{SUBJECT}/{PEER} = {ratio:.2f}"))
    return verdicts


def _cells(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        left = row[:2]
        right = row[2:]
        lines.append(
            "  ".join([c.ljust(w) for c, w in zip(left, widths)] + [c.rjust(w) for c, w in zip(right, widths[2:])])
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(workload: Workload, broker: str, value: float | None, fmt: str) -> str:
    if not workload.applies_to(broker):
        return "n/a"
    return "-" if value is None else format(value, fmt)


def table(workloads: list[Workload], brokers: list[str], med: Medians, runs_ok: dict[str, int],
          verdicts: list[Verdict] = ()) -> str:
    peers = [b for b in brokers if b != SUBJECT] if SUBJECT in brokers else []
    header = ["workload", "metric (better)", *(f"{b} (n={runs_ok.get(b, 0)})" for b in brokers)]
    header += [f"ratio {SUBJECT}/{p}" for p in peers]
    header += ["target", "verdict"]
    judged: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        judged.setdefault((v.workload, v.target.metric), []).append(v)
    rows = [header]
    for w in workloads:
        for m in w.metrics:
            key = (w.name, m.name)
            values = [med.get(b, {}).get(key) for b in brokers]
            row = [w.name, f"{m.name} ({m.better})", *(_cell(w, b, v, m.fmt) for b, v in zip(brokers, values))]
            for p in peers:
                s, v = med.get(SUBJECT, {}).get(key), med.get(p, {}).get(key)
                row.append(f"{s / v:.2f}x" if s is not None and v else "-")
            mine = judged.get(key, [])
            row += ["; ".join(_target_text(v.target) for v in mine), "/".join(v.outcome for v in mine)]
            rows.append(row)
    notes = "medians over successful runs; MB = 10^6 bytes of record values"
    if peers:
        notes += (
            f"\nratio = {SUBJECT} / peer: above 1.00 is better for (higher) metrics, below 1.00 for (lower) ones"
        )
    return _cells(rows) + "\n" + notes


def _target_text(t: Target) -> str:
    if t.min_ratio_to_peer is not None:
        return f">= {t.min_ratio_to_peer:g}x {PEER}"
    if t.max_ratio_to_peer is not None:
        return f"<= {t.max_ratio_to_peer:g}x {PEER}"
    if t.below is not None:
        return f"<= {t.below:g}"
    return f">= {t.above:g}"


def verdict_lines(verdicts: list[Verdict]) -> str:
    return "\n".join(f"  [{v.outcome:>4}] {v.target.description}  ({v.detail})" for v in verdicts)


def _nested(per: dict[tuple[str, str], float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (workload, metric), value in per.items():
        out.setdefault(workload, {})[metric] = value
    return out


def as_json(config: dict, environment: dict, results: list[RunResult], med: Medians, verdicts: list[Verdict]) -> dict:
    return {
        "config": config,
        "environment": environment,
        "runs": [asdict(r) for r in results],
        "medians": {broker: _nested(per) for broker, per in med.items()},
        "targets": [
            {"workload": v.workload, "target": v.target.description, "outcome": v.outcome, "detail": v.detail}
            for v in verdicts
        ],
    }
