"""Medians, the side-by-side table, target verdicts and the JSON record of a session."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from bench.workloads import Workload
from bench.workloads.base import SUBJECT, Metric, Target


@dataclass
class RunResult:
    broker: str
    run: int
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # workload -> metric -> value
    error: str | None = None  # the run as a whole failed (the broker did not come up, or died)
    failed: dict[str, str] = field(default_factory=dict)  # workload -> why it has no figures in this run
    notes: dict[str, list[str]] = field(default_factory=dict)  # workload -> what the workload said about a figure


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
                peer = med.get(t.peer, {}).get((w.name, t.metric))
                if not peer:
                    verdicts.append(Verdict(w.name, t, "n/a", f"{t.peer} not measured"))
                    continue
                ratio = subject / peer
                ok = (t.min_ratio_to_peer is None or ratio >= t.min_ratio_to_peer) and (
                    t.max_ratio_to_peer is None or ratio <= t.max_ratio_to_peer
                )
                verdicts.append(Verdict(w.name, t, "PASS" if ok else "FAIL", f"{SUBJECT}/{t.peer} = {ratio:.2f}"))
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


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


class Footnotes:
    """Why a cell has no figure (or how to read one): numbered notes under the table,
    each keyed by (workload, broker); workload None means the broker as a whole."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.by_key: dict[tuple[str | None, str], list[int]] = {}

    def add(self, key: tuple[str | None, str], text: str) -> None:
        if text not in self.texts:
            self.texts.append(text)
        number = self.texts.index(text) + 1
        numbers = self.by_key.setdefault(key, [])
        if number not in numbers:
            numbers.append(number)

    def mark(self, key: tuple[str | None, str]) -> str:
        numbers = self.by_key.get(key)
        return " [" + ",".join(map(str, numbers)) + "]" if numbers else ""

    def render(self) -> str:
        return "\n".join(f"  [{n}] {text}" for n, text in enumerate(self.texts, 1))


def footnotes(workloads: list[Workload], brokers: list[str], results: list[RunResult]) -> Footnotes:
    notes = Footnotes()
    for b in brokers:
        runs = [r for r in results if r.broker == b]
        broken = [r for r in runs if r.error is not None]
        if broken:
            notes.add((None, b), f"{b}: {len(broken)} of {len(runs)} runs failed as a whole, first: "
                                 f"{_first_line(broken[0].error)}")
    for w in workloads:
        for b in brokers:
            if not w.applies_to(b):
                only = ", ".join(w.brokers or ())
                notes.add((w.name, b), f"{w.name}: n/a except on {only}" + (f": {w.why_only}" if w.why_only else ""))
                continue
            runs = [r for r in results if r.broker == b and r.error is None]
            failed = [r.failed[w.name] for r in runs if w.name in r.failed]
            if failed:
                notes.add((w.name, b), f"{b} {w.name}: no figures from {len(failed)} of {len(runs)} runs: "
                                       f"{_first_line(failed[0])}")
            said: dict[str, int] = {}
            for r in runs:
                for text in dict.fromkeys(r.notes.get(w.name, ())):
                    said[text] = said.get(text, 0) + 1
            for text, count in said.items():
                notes.add((w.name, b), f"{b} {w.name} ({count} of {len(runs)} runs): {text}")
    return notes


def _cell(workload: Workload, broker: str, value: float | None, fmt: str) -> str:
    if not workload.applies_to(broker):
        return "n/a"
    return "-" if value is None else format(value, fmt)


def table(workloads: list[Workload], brokers: list[str], med: Medians, runs_ok: dict[str, int],
          verdicts: list[Verdict] = (), results: list[RunResult] = ()) -> str:
    """The side-by-side table; a cell without a figure points to a note under it that says why."""
    peers = [b for b in brokers if b != SUBJECT] if SUBJECT in brokers else []
    notes = footnotes(workloads, brokers, list(results))
    header = ["workload", "metric (better)", *(f"{b} (n={runs_ok.get(b, 0)}){notes.mark((None, b))}" for b in brokers)]
    header += [f"ratio {SUBJECT}/{p}" for p in peers]
    header += ["target", "verdict"]
    judged: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        judged.setdefault((v.workload, v.target.metric), []).append(v)
    rows = [header]
    for w in workloads:
        marked: set[str] = set()  # brokers whose note mark this workload's rows already show
        shown = _metrics_of(w, med, brokers)
        for n, m in enumerate(shown):
            key = (w.name, m.name)
            values = [med.get(b, {}).get(key) for b in brokers]
            cells = []
            for b, v in zip(brokers, values):
                cell = _cell(w, b, v, m.fmt)
                last_row = n == len(shown) - 1
                if b not in marked and (v is None or last_row) and notes.mark((w.name, b)):
                    cell += notes.mark((w.name, b))
                    marked.add(b)
                cells.append(cell)
            row = [w.name, f"{m.name} ({m.better})", *cells]
            for p in peers:
                s, v = med.get(SUBJECT, {}).get(key), med.get(p, {}).get(key)
                row.append(f"{s / v:.2f}x" if s is not None and v else "-")
            mine = judged.get(key, [])
            row += ["; ".join(_target_text(v.target) for v in mine), "/".join(v.outcome for v in mine)]
            rows.append(row)
    legend = "medians over successful runs; MB = 10^6 bytes of record values"
    if peers:
        legend += (
            f"\nratio = {SUBJECT} / peer: above 1.00 is better for (higher) metrics, below 1.00 for (lower) ones"
        )
    if notes.texts:
        legend += "\nnotes:\n" + notes.render()
    return _cells(rows) + "\n" + legend


def _metrics_of(workload: Workload, med: Medians, brokers: list[str]) -> list[Metric]:
    """The workload's declared metrics, then those it named at run time (the scaling
    workloads' "<size>: <figure>"), in the order the runs reported them."""
    out = list(workload.metrics)
    declared = {m.name for m in out}
    for b in brokers:
        for (name, metric) in med.get(b, {}):
            if name == workload.name and metric not in declared:
                declared.add(metric)
                out.append(Metric(metric, "", "lower" if _lower_is_better(metric) else "higher", ",.2f"))
    return out


def _lower_is_better(metric: str) -> bool:
    return not metric.endswith(("/s", "records", "ids", "producers"))


def _target_text(t: Target) -> str:
    if t.min_ratio_to_peer is not None:
        return f">= {t.min_ratio_to_peer:g}x {t.peer}"
    if t.max_ratio_to_peer is not None:
        return f"<= {t.max_ratio_to_peer:g}x {t.peer}"
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
