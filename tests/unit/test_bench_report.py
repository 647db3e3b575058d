"""The bench's reporting: per-run summary lines, medians, target verdicts, the side-by-side
table and its notes (no broker, no clock: figures are made up here)."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from bench.report import RunResult, as_json, footnotes, judge, medians, table
from bench.brokers import BROKERS as BROKER_KINDS
from bench.brokers import BrokerFailed
from bench.run import _names, parse_args, run_plan, summary
from bench.sampler import thread_cpu_seconds
from bench.workloads import BY_NAME, execution_order
from bench.workloads.base import Metric, RunContext, Settings, Target, Workload, WorkloadFailed
from bench.workloads.concurrent_transactions import refusal_note
from bench.workloads.transactions import percentile


def _nothing(ctx):  # a workload body the report never calls
    raise AssertionError("not run in these tests")


TXN = Workload(
    "txn", "transactions", _nothing,
    metrics=(Metric("txn/s", "transactions/s", "higher", ",.0f"), Metric("CPU ms/txn", "ms", "lower", ",.2f")),
    targets=(Target("txn/s", "txn/s >= 1.2x tansu", min_ratio_to_peer=1.2),
             Target("CPU ms/txn", "CPU <= 1.2x tansu's", max_ratio_to_peer=1.2)),
)
START = Workload("start", "start-up", _nothing, metrics=(Metric("ms", "ms", "lower"),),
                 targets=(Target("ms", "start-up <= 150 ms", below=150.0),))
ONLY = Workload("only", "eosbroker only", _nothing, metrics=(Metric("ms", "ms", "lower"),),
                brokers=("eosbroker",), why_only="nothing to compare")
BROKERS = ["eosbroker", "tansu", "kafka"]


def _run(broker, run, txn=None, start=None, **fields) -> RunResult:
    r = RunResult(broker, run, **fields)
    if txn is not None:
        r.metrics["txn"] = {"txn/s": txn[0], "CPU ms/txn": txn[1]}
    if start is not None:
        r.metrics["start"] = {"ms": start}
    return r


def _row(text: str, workload: str, metric: str) -> list[str]:
    """A table row's cells (columns are two or more spaces apart), from the figures on."""
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == workload and cells[1].startswith(metric + " ("):
            return cells[2:]
    raise AssertionError(f"no row {workload} {metric} in\n{text}")


def test_summary_formats_each_metric_by_its_own_format_whatever_the_order():
    # concurrent-transactions returns its metrics in another order than it declares them
    r = RunResult("tansu", 1, metrics={"concurrent-transactions": {
        "confluent txn/s": 226.4, "confluent CPU ms/txn": 3.904, "records missing": 0.0, "aiokafka txn/s": 340.2}})
    line = summary(r)
    assert "226 confluent txn/s" in line
    assert "3.90 confluent CPU ms/txn" in line
    assert "0 records missing" in line
    assert "340 aiokafka txn/s" in line


def test_summary_says_which_workloads_failed_and_why():
    r = RunResult("kafka", 2, metrics={"start-up": {"ms": 8060.3}}, failed={"produce": "produce: 3 records undelivered"})
    assert summary(r) == "start-up 8,060.3 ms; produce FAILED: produce: 3 records undelivered"
    assert summary(RunResult("kafka", 1, error="kafka did not come up")) == "FAILED: kafka did not come up"


def test_medians_skip_whole_run_failures_but_keep_the_other_workloads_of_a_partial_one():
    results = [
        _run("eosbroker", 1, txn=(400, 1.0), start=170),
        _run("eosbroker", 2, txn=(410, 1.2), start=999, error="died"),
        _run("eosbroker", 3, start=150, failed={"txn": "timed out"}),
        _run("tansu", 1, txn=(300, 0.8)),
    ]
    med = medians(results)
    assert med["eosbroker"][("txn", "txn/s")] == 400  # run 2 died, run 3's txn failed
    assert med["eosbroker"][("start", "ms")] == 160  # runs 1 and 3
    assert med["tansu"][("txn", "CPU ms/txn")] == 0.8


def test_judge_ratios_to_tansu_and_absolute_bounds():
    med = {"eosbroker": {("txn", "txn/s"): 360.0, ("txn", "CPU ms/txn"): 1.0, ("start", "ms"): 170.0},
           "tansu": {("txn", "txn/s"): 300.0, ("txn", "CPU ms/txn"): 0.8}}
    outcomes = {(v.workload, v.target.metric): (v.outcome, v.detail) for v in judge([TXN, START], med)}
    assert outcomes[("txn", "txn/s")] == ("PASS", "eosbroker/tansu = 1.20")
    assert outcomes[("txn", "CPU ms/txn")] == ("FAIL", "eosbroker/tansu = 1.25")
    assert outcomes[("start", "ms")] == ("FAIL", "eosbroker 170.00")


def test_judge_without_a_peer_figure_is_not_a_verdict():
    med = {"eosbroker": {("txn", "txn/s"): 360.0, ("txn", "CPU ms/txn"): 1.0}}
    assert {v.outcome for v in judge([TXN], med)} == {"n/a"}


def test_table_puts_brokers_side_by_side_with_a_ratio_column_per_peer():
    results = [_run("eosbroker", 1, txn=(360, 1.0)), _run("tansu", 1, txn=(300, 0.8)), _run("kafka", 1, txn=(72, 10.0))]
    med = medians(results)
    text = table([TXN], BROKERS, med, {"eosbroker": 1, "tansu": 1, "kafka": 1}, judge([TXN], med), results)
    header = text.splitlines()[0]
    assert header.index("eosbroker (n=1)") < header.index("tansu (n=1)") < header.index("kafka (n=1)")
    assert "ratio eosbroker/tansu" in header and "ratio eosbroker/kafka" in header
    assert _row(text, "txn", "txn/s") == ["360", "300", "72", "1.20x", "5.00x", ">= 1.2x tansu", "PASS"]
    assert _row(text, "txn", "CPU ms/txn") == ["1.00", "0.80", "10.00", "1.25x", "0.10x", "<= 1.2x tansu", "FAIL"]
    assert "notes:" not in text  # every figure is there


def test_a_missing_figure_points_to_the_note_that_says_why():
    results = [_run("eosbroker", 1, txn=(360, 1.0)), _run("tansu", 1, txn=(300, 0.8))]
    results[1].metrics["txn"].pop("CPU ms/txn")
    results[1].notes["txn"] = ["no CPU figure: the process left"]
    text = table([TXN], ["eosbroker", "tansu"], medians(results), {"eosbroker": 1, "tansu": 1}, (), results)
    assert _row(text, "txn", "CPU ms/txn") == ["1.00", "- [1]", "-"]
    assert "  [1] tansu txn (1 of 1 runs): no CPU figure: the process left" in text


def test_a_note_beside_complete_figures_marks_the_workload_once():
    results = [_run("eosbroker", 1, txn=(360, 1.0)), _run("tansu", 1, txn=(300, 0.8)), _run("tansu", 2, txn=(310, 0.9))]
    results[2].notes["txn"] = ["2 records missing"]
    text = table([TXN], ["eosbroker", "tansu"], medians(results), {"eosbroker": 1, "tansu": 2}, (), results)
    assert text.count("[1]") == 2  # the mark on the workload's last row, and the note
    assert _row(text, "txn", "txn/s") == ["360", "305", "1.18x"]
    assert _row(text, "txn", "CPU ms/txn") == ["1.00", "0.85 [1]", "1.18x"]
    assert "tansu txn (1 of 2 runs): 2 records missing" in text


def test_failed_workloads_and_failed_runs_are_explained_under_the_table():
    results = [
        _run("eosbroker", 1, txn=(360, 1.0), start=170),
        _run("kafka", 1, start=8000, failed={"txn": "transactions: 3 delivery reports failed\ntraceback..."}),
        _run("kafka", 2, error="kafka did not come up on 127.0.0.1:1: no Metadata answer\nlog tail"),
    ]
    text = table([START, TXN], ["eosbroker", "kafka"], medians(results), {"eosbroker": 1, "kafka": 1}, (), results)
    assert "kafka (n=1) [1]" in text.splitlines()[0]
    assert "[1] kafka: 1 of 2 runs failed as a whole, first: kafka did not come up on 127.0.0.1:1: no Metadata answer" in text
    assert "[2] kafka txn: no figures from 1 of 1 runs: transactions: 3 delivery reports failed" in text
    assert "traceback" not in text and "log tail" not in text
    assert _row(text, "txn", "txn/s") == ["360", "- [2]", "-"]
    assert _row(text, "start", "ms") == ["170.0", "8,000.0", "0.02x"]


def test_a_workload_for_some_brokers_only_says_why_the_others_have_none():
    results = [RunResult("eosbroker", 1, metrics={"only": {"ms": 5.0}}), RunResult("tansu", 1)]
    text = table([ONLY], ["eosbroker", "tansu"], medians(results), {"eosbroker": 1, "tansu": 1}, (), results)
    assert _row(text, "only", "ms") == ["5.0", "n/a [1]", "-"]
    assert "[1] only: n/a except on eosbroker: nothing to compare" in text


def test_every_registered_workload_limited_to_some_brokers_says_why():
    for w in BY_NAME.values():
        if w.brokers is not None:
            assert w.why_only, w.name


def test_footnotes_count_the_runs_a_note_came_from():
    results = [RunResult("tansu", n, notes={"txn": ["refused"]}) for n in (1, 2)] + [RunResult("tansu", 3)]
    notes = footnotes([TXN], ["tansu"], results)
    assert notes.texts == ["tansu txn (2 of 3 runs): refused"]


def test_json_record_keeps_failures_and_notes():
    r = _run("kafka", 1, start=8000, failed={"txn": "x"}, notes={"start": ["JVM"]})
    record = as_json({}, {}, [r], medians([r]), [])
    assert record["runs"][0]["failed"] == {"txn": "x"} and record["runs"][0]["notes"] == {"start": ["JVM"]}
    assert record["medians"]["kafka"] == {"start": {"ms": 8000}}


def test_refusal_note_names_the_versions_the_broker_refuses():
    note = refusal_note(ValueError("UnknownError"), {0: "UNKNOWN_SERVER_ERROR", 3: "NONE"})
    assert note == ("no aiokafka figure: its transactional producer failed with ValueError('UnknownError'); "
                    "InitProducerId for a new transactional id answers v0 UNKNOWN_SERVER_ERROR, v3 NONE "
                    "(aiokafka only sends v0, which has no producer id and epoch fields)")
    assert refusal_note(ValueError("x"), None) == "no aiokafka figure: its transactional producer failed with ValueError('x')"
    assert "aiokafka only sends" not in refusal_note(ValueError("x"), {0: "NONE", 3: "NONE"})


def test_execution_order_adds_what_a_workload_needs_in_registry_order():
    assert [w.name for w in execution_order(["consume"])] == ["produce", "consume"]
    assert [w.name for w in execution_order(["resources", "start-up"])] == ["start-up", "resources"]


def test_arguments():
    assert _names("eosbroker, kafka", {"eosbroker": 1, "kafka": 2}, "broker") == ["eosbroker", "kafka"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown broker"):
        _names("eosbroker,redpanda", {"eosbroker": 1}, "broker")
    args = parse_args(["--brokers", "kafka,eosbroker", "--only", "transactions", "--runs", "1"])
    assert args.brokers == ["kafka", "eosbroker"] and args.only == ["transactions"] and args.runs == 1
    with pytest.raises(SystemExit):
        parse_args(["--runs", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--brokers", "nope"])


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.50) == 50.0
    assert percentile([7.0], 0.99) == 7.0


def test_thread_cpu_seconds_counts_only_the_named_threads_of_a_live_process():
    me = os.getpid()
    with open(f"/proc/{me}/comm") as f:
        main_thread = f.read().rstrip("\n")
    burned = 0.0
    for _ in range(10_000):  # until the kernel has charged this thread a clock tick
        burned = thread_cpu_seconds(me, (main_thread,))
        if burned > 0:
            break
        sum(range(100_000))
    assert burned > 0
    assert thread_cpu_seconds(me, ("C2 CompilerThre",)) == 0.0  # CPython has no JIT threads
    assert thread_cpu_seconds(2**22 + 1, (main_thread,)) == 0.0  # no such process


class _Broker:
    """What run_plan needs of a RunningBroker: its kind's name, and check_alive()."""

    def __init__(self, name: str) -> None:
        self.kind = BROKER_KINDS[name]
        self.dead = False

    def check_alive(self) -> None:
        if self.dead:
            raise BrokerFailed(f"{self.kind.name} exited with code -9")


def _workload(name, figures=None, error=None, requires=(), brokers=None, kills=False):
    def run(ctx):
        if kills:
            ctx.broker.dead = True
        if error is not None:
            raise error
        return figures
    return Workload(name, name, run, metrics=(Metric("x", "x", "higher"),), requires=requires, brokers=brokers,
                    why_only="test" if brokers else "")


def _plan_result(plan, broker="kafka") -> RunResult:
    result = RunResult(broker, 1)
    run_plan(RunContext(_Broker(broker), Settings(1, 1, 1.0), notes=result.notes), plan, result)
    return result


def test_a_failed_workload_costs_its_own_figures_and_its_dependents_only():
    result = _plan_result([
        _workload("produce", error=WorkloadFailed("produce: 3 records undelivered")),
        _workload("consume", {"x": 1.0}, requires=("produce",)),
        _workload("transactions", {"x": 2.0}),
        _workload("txn-state", {"x": 3.0}, brokers=("eosbroker",)),
    ])
    assert result.error is None
    assert result.metrics == {"transactions": {"x": 2.0}}
    assert result.failed == {"produce": "produce: 3 records undelivered",
                             "consume": "not run: needs produce, which failed"}


def test_a_broker_that_dies_ends_the_run_whatever_the_workload_said():
    with pytest.raises(BrokerFailed, match="exited with code -9"):
        _plan_result([_workload("produce", error=WorkloadFailed("timed out"), kills=True),
                      _workload("transactions", {"x": 2.0})])
    with pytest.raises(BrokerFailed):
        _plan_result([_workload("produce", {"x": 1.0}, kills=True)])


def test_metrics_named_at_run_time_get_rows_after_the_declared_ones_in_reported_order():
    curve = Workload("curve", "a curve", _nothing, metrics=())
    runs = [RunResult("eosbroker", 1), RunResult("kafka", 1)]
    runs[0].metrics["curve"] = {"100 partitions: restart ms": 190.0, "20,000 partitions: restart ms": 330.0,
                                "20,000 partitions: produce rec/s": 1200.0}
    runs[1].metrics["curve"] = {"100 partitions: restart ms": 5000.0}
    text = table([curve], ["eosbroker", "kafka"], medians(runs), {"eosbroker": 1, "kafka": 1}, results=runs)
    assert _row(text, "curve", "100 partitions: restart ms")[:3] == ["190.00", "5,000.00", "0.04x"]
    assert _row(text, "curve", "20,000 partitions: restart ms")[:2] == ["330.00", "-"]
    assert "20,000 partitions: produce rec/s (higher)" in text
    rows = [line for line in text.splitlines() if line.startswith("curve")]
    assert [re.split(r"\s{2,}", r)[1] for r in rows] == [
        "100 partitions: restart ms (lower)", "20,000 partitions: restart ms (lower)",
        "20,000 partitions: produce rec/s (higher)"]


def test_scale_multiplies_the_sizes_without_repeats_or_zero():
    from bench.workloads.scaling import scaled

    assert scaled([100, 1_000, 5_000, 20_000], 1.0) == [100, 1_000, 5_000, 20_000]
    assert scaled([100, 1_000, 5_000, 20_000], 0.05) == [5, 50, 250, 1_000]
    assert scaled([1, 2, 1_000], 0.001) == [1]
    assert parse_args(["--scale", "0.05"]).scale == 0.05
    with pytest.raises(SystemExit):
        parse_args(["--scale", "0"])


def test_a_target_against_another_peer_is_judged_against_that_peer():
    over_kafka = Workload("txn", "transactions", _nothing, metrics=TXN.metrics,
                          targets=(Target("txn/s", "txn/s >= 1.0x kafka's", min_ratio_to_peer=1.0, peer="kafka"),))
    med = medians([_run("eosbroker", 1, txn=(300, 2.0)), _run("tansu", 1, txn=(600, 1.0)),
                   _run("kafka", 1, txn=(100, 10.0))])
    (verdict,) = judge([over_kafka], med)
    assert (verdict.outcome, verdict.detail) == ("PASS", "eosbroker/kafka = 3.00")
    assert "| >= 1x kafka |" in "| " + " | ".join(_row(table([over_kafka], BROKERS, med, {b: 1 for b in BROKERS},
                                                             [verdict]), "txn", "txn/s")) + " |"


def test_a_peer_that_cannot_take_a_partition_count_keeps_the_smaller_ones_and_says_why(monkeypatch, capsys):
    from bench.workloads import partition_scaling

    def one_size(ctx, n):
        if n > 50:
            raise BrokerFailed(f"kafka did not come up with {n} partitions\nbroker log (tail): ...")
        return dict.fromkeys(["create s", "produce rec/s", "metadata ms", "RSS MB", "stop s", "restart ms",
                              "idle RSS MB", "kill -9 ms", "idle KB/partition"], 1.0)

    monkeypatch.setattr(partition_scaling, "one_size", one_size)
    ctx = RunContext(_Broker("kafka"), Settings(1, 1, 1.0, scale=0.05, scale_kafka_max=500))
    metrics = partition_scaling.run(ctx)
    assert {m.partition(":")[0] for m in metrics} == {"5 partitions", "50 partitions"}
    assert ctx.notes["partition-scaling"] == [
        "250 partitions: kafka could not: kafka did not come up with 250 partitions",
        "1,000 partitions: not run on kafka, above --scale-kafka-max 500"]
    assert "250 partitions: kafka could not" in capsys.readouterr().out
    # eosbroker's failure is the workload's
    with pytest.raises(BrokerFailed):
        partition_scaling.run(RunContext(_Broker("eosbroker"), Settings(1, 1, 1.0, scale=0.05)))


def test_a_restarted_kafka_keeps_its_cluster_id_and_controller_port_and_is_not_formatted_again(tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_kafka", Path("bench/kafka.py"))
    kafka = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kafka)
    fresh, formatted = kafka.broker_for(tmp_path)
    assert not formatted and fresh.controller_port == 0 and not fresh.cluster_id.startswith("-")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "meta.properties").write_text("#\nnode.id=1\ncluster.id=zocouqG2SVahMn8K5H3tMw\n")
    (tmp_path / "server.properties").write_text("node.id=1\ncontroller.quorum.voters=1@127.0.0.1:44129\n")
    again, formatted = kafka.broker_for(tmp_path)
    assert formatted and (again.cluster_id, again.controller_port) == ("zocouqG2SVahMn8K5H3tMw", 44129)
