"""Command line: alternate the brokers run by run, print medians side by side.

    python -m bench [--runs 3] [--records 200000] [--transactions 2000] [--only produce] [--brokers eosbroker,tansu,kafka] [--json PATH]

Each run is a fresh broker process in a fresh temp dir; within a run the workloads go
in registry order (start-up, produce, consume, idempotent-produce, transactions,
txn-state-startup, resources). Exit status: 0, or 1 if any
run failed (or, with --strict, if a target failed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import KafkaException

from bench.brokers import BROKERS, STARTUP_TIMEOUT_S, BrokerFailed, RunningBroker, tansu_binary
from bench.report import RunResult, as_json, judge, medians, table, verdict_lines
from bench.workloads import BY_NAME, WORKLOADS, RunContext, Settings, Workload, WorkloadFailed, execution_order


def _names(value: str, known: dict, what: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown or value!r}; choose from {', '.join(known)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs per broker (default 3); the table shows medians")
    p.add_argument("--records", type=int, default=200_000, help="records produced and consumed (default 200000)")
    p.add_argument("--record-size", type=int, default=100, help="value bytes per record (default 100)")
    p.add_argument(
        "--transactions", type=int, default=2_000, help="transactions in the transactions workload (default 2000)"
    )
    p.add_argument(
        "--txn-state-records",
        type=int,
        default=100_000,
        help="about how many records txn-state-startup writes to __transaction_state (default 100000)",
    )
    p.add_argument(
        "--txn-state-data-mb",
        type=int,
        default=1000,
        help="MB of partition data txn-state-startup writes before its kill -9 restart (default 1000)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiplies the scaling workloads' sizes (default 1: 100-20,000 partitions, 1,000-100,000 "
             "transactional ids, 1,000 producers); 0.05 for a quick run",
    )
    p.add_argument(
        "--scale-kafka-max",
        type=int,
        default=5_000,
        help="partition-scaling: the largest size Kafka runs (default 5000: above it a size takes the JVM "
             "minutes on two cores)",
    )
    p.add_argument(
        "--only",
        type=lambda v: _names(v, BY_NAME, "workload"),
        default=None,
        metavar="WORKLOAD[,...]",
        help=f"report only these ({', '.join(BY_NAME)}); what they require still runs",
    )
    p.add_argument(
        "--brokers",
        type=lambda v: _names(v, BROKERS, "broker"),
        default=list(BROKERS),
        metavar="NAME[,...]",
        help=f"brokers to compare, in alternation order (default {','.join(BROKERS)})",
    )
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write every run and the medians here")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per workload (default 120)")
    p.add_argument(
        "--startup-timeout", type=float, default=STARTUP_TIMEOUT_S, help=f"seconds for a broker to come up ({STARTUP_TIMEOUT_S:g})"
    )
    p.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = p.parse_args(argv)
    if args.txn_state_data_mb < 0:
        p.error("--txn-state-data-mb cannot be negative")
    if args.scale <= 0:
        p.error("--scale must be positive")
    if min(args.runs, args.records, args.record_size, args.transactions, args.txn_state_records) < 1:
        p.error("--runs, --records, --record-size, --transactions and --txn-state-records must be positive")
    return args


def run_once(broker_name: str, run: int, plan: list[Workload], settings: Settings, startup_timeout_s: float) -> RunResult:
    """One broker process through the plan; the broker dying, or not coming up, fails the
    whole run."""
    result = RunResult(broker_name, run)
    try:
        with RunningBroker(BROKERS[broker_name], startup_timeout_s) as broker:
            ctx = RunContext(broker, settings, notes=result.notes)
            if broker.kind.startup_note:
                ctx.note("start-up", broker.kind.startup_note)
            run_plan(ctx, plan, result)
    except (BrokerFailed, WorkloadFailed) as e:
        result.error = str(e)
    except Exception:
        result.error = traceback.format_exc()
    return result


def run_plan(ctx: RunContext, plan: list[Workload], result: RunResult) -> None:
    """The plan's workloads that apply to the broker, in order, into ``result``. A workload
    that fails while the broker lives loses its own figures (and those of workloads that
    need it) and says why; BrokerFailed from a dead broker ends the run."""
    broker = ctx.broker
    for workload in plan:
        if not workload.applies_to(broker.kind.name):
            continue
        missing = [r for r in workload.requires if r not in result.metrics]
        if missing:
            result.failed[workload.name] = f"not run: needs {', '.join(missing)}, which failed"
            continue
        try:
            result.metrics[workload.name] = workload.run(ctx)
            broker.check_alive()
        except (WorkloadFailed, KafkaException) as e:
            broker.check_alive()  # a dead broker is the better explanation
            result.failed[workload.name] = str(e)


def summary(result: RunResult) -> str:
    """One line per run: every figure with its metric's format, and what failed."""
    if result.error is not None:
        return "FAILED: " + result.error
    parts = []
    for workload, metrics in result.metrics.items():
        formats = {m.name: m.fmt for m in BY_NAME[workload].metrics}
        shown = ", ".join(f"{format(v, formats.get(m, ',.2f'))} {m}" for m, v in metrics.items())
        parts.append(f"{workload} {shown}")
    parts += [f"{workload} FAILED: {why}" for workload, why in result.failed.items()]
    return "; ".join(parts)


def prepare_kafka() -> str:
    """Resolves Kafka's jars with Maven before any run (minutes on a fresh machine, so never
    inside a timed start-up); returns the Java runtime's version line."""
    from tests.reference.kafka_broker import kafka_classpath

    print("       kafka: resolving its jars with Maven (downloads them into ~/.m2 on first use)", flush=True)
    kafka_classpath()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    return (java.stderr or java.stdout).strip().splitlines()[0]


def environment() -> dict:
    import confluent_kafka

    try:
        version = subprocess.run([str(tansu_binary()), "--version"], capture_output=True, text=True, timeout=10)
        tansu = version.stdout.strip().removeprefix("tansu ")
    except (OSError, subprocess.TimeoutExpired, ImportError) as e:
        tansu = f"unavailable ({e})"
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "confluent-kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "tansu": tansu,
        "kafka": "4.4.0 (tests/reference/kafka/pom.xml)",
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    selected = args.only or [w.name for w in WORKLOADS]
    plan = execution_order(selected)
    reported = [w for w in plan if w.name in selected]
    settings = Settings(
        records=args.records,
        record_size=args.record_size,
        timeout_s=args.timeout,
        transactions=args.transactions,
        txn_state_records=args.txn_state_records,
        txn_state_data_mb=args.txn_state_data_mb,
        scale=args.scale,
        scale_kafka_max=args.scale_kafka_max,
    )
    print(
        f"bench: {', '.join(args.brokers)} x {args.runs} runs, {args.records:,} records of {args.record_size} B; "
        f"workloads {', '.join(w.name for w in plan)}"
    )
    env = environment()
    if "kafka" in args.brokers:
        env["java"] = prepare_kafka()
    print("       " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)

    results: list[RunResult] = []
    began = time.perf_counter()
    for run in range(1, args.runs + 1):
        for name in args.brokers:
            began_run = time.perf_counter()
            result = run_once(name, run, plan, settings, args.startup_timeout)
            results.append(result)
            took = time.perf_counter() - began_run
            print(f"  {name} run {run}/{args.runs} ({took:.0f} s): {summary(result)}", flush=True)

    med = medians(results)
    runs_ok = {b: sum(1 for r in results if r.broker == b and r.error is None) for b in args.brokers}
    verdicts = judge(reported, med)
    print()
    print(table(reported, args.brokers, med, runs_ok, verdicts, results))
    if verdicts:
        print("\ntargets (eosbroker):")
        print(verdict_lines(verdicts))
    failures = [r for r in results if r.error is not None or r.failed]
    if failures:
        print(f"\n{len(failures)} of {len(results)} runs failed in whole or in part (see above)")
    print(f"\ntotal {time.perf_counter() - began:.1f} s")

    if args.json is not None:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        config["workloads"] = [w.name for w in plan]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(as_json(config, env, results, med, verdicts), indent=2) + "\n")
        print(f"results written to {args.json}")

    if failures or (args.strict and any(v.outcome == "FAIL" for v in verdicts)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
