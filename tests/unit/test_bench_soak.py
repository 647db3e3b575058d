"""The soak's arithmetic and options: windows, slopes, the flat verdict, the table, the
task gauge's parsing (no broker, no clock: samples are made up here)."""

from __future__ import annotations

import pytest

from bench.soak import Sample, parse_args, rows, slope_per_hour, table, tasks_from_metrics


def _samples(rss_mb, fds, tasks, every_s=10.0):
    return [Sample(i * every_s, int(r * 1e6), f, t) for i, (r, f, t) in enumerate(zip(rss_mb, fds, tasks))]


def test_slope_is_per_hour_and_zero_without_two_times():
    assert slope_per_hour([(0, 10), (60, 11), (120, 12)]) == pytest.approx(60)
    assert slope_per_hour([(5, 1), (5, 3)]) == 0
    assert slope_per_hour([]) == 0


def test_first_and_last_windows_and_the_flat_verdict():
    # 0..120 s, windows of 40 s: first 0-40 (5 samples), last 80-120 (5 samples)
    rss = [50, 60, 61, 60, 61, 61, 60, 61, 61, 60, 61, 61, 63]
    fds = [40, 41, 41, 41, 41, 42, 43, 44, 45, 46, 47, 48, 49]  # climbs past the first window's max
    tasks = [20, 24, 22, 23, 21, 22, 23, 22, 21, 22, 23, 22, 21]
    rss_row, fds_row, tasks_row = rows(_samples(rss, fds, tasks), 120, 40)
    assert rss_row.first == pytest.approx((58.4, 50, 61))
    assert rss_row.last == pytest.approx((61.2, 60, 63))
    assert rss_row.flat  # 61.2 <= 61 x 1.05
    assert fds_row.last[0] == pytest.approx(47) and not fds_row.flat
    assert fds_row.slope_per_hour == pytest.approx(360)  # one a sample of 10 s after the first window
    assert tasks_row.flat and tasks_row.first[2] == 24


def test_rows_need_samples_in_both_windows():
    with pytest.raises(ValueError):
        rows(_samples([50], [40], [20]), 120, 40)


def test_table_names_each_figure_and_says_what_is_not_flat():
    text = table(rows(_samples([50] * 13, list(range(40, 53)), [20] * 13), 120, 40), 40)
    lines = text.splitlines()
    assert "first 40 s: mean" in lines[0] and "slope/h after the first" in lines[0]
    assert lines[2].startswith("open fds") and lines[2].rstrip().endswith("NO")
    assert lines[1].rstrip().endswith("yes") and lines[3].rstrip().endswith("yes")


def test_window_defaults_to_a_sixth_and_must_not_overlap():
    assert parse_args([]).window == 600
    assert parse_args(["--duration", "360"]).window == 60
    assert parse_args(["--duration", "300", "--window", "100"]).window == 100
    for bad in (["--duration", "100", "--window", "60"], ["--producers", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_task_count_is_read_from_the_metrics_text():
    text = "# HELP eosbroker_asyncio_tasks x\n# TYPE eosbroker_asyncio_tasks gauge\neosbroker_asyncio_tasks 17.0\n"
    assert tasks_from_metrics(text) == 17
    with pytest.raises(ValueError):
        tasks_from_metrics("eosbroker_asyncio_tasks_total 3.0\n")


def test_descriptors_are_grouped_by_topic_and_file_kind():
    from bench.soak import descriptor_changes, descriptor_kind

    data = "/tmp/bench-x/data"
    assert descriptor_kind("socket:[5668068]", data) == "socket"
    assert descriptor_kind("pipe:[1]", data) == "pipe"
    assert descriptor_kind(f"{data}/soak-retained-3/00000000000000000120.timeindex", data) == "soak-retained/*.timeindex"
    assert descriptor_kind(f"{data}/__transaction_state-12/00000000000000000000.log", data) == "__transaction_state/*.log"
    assert descriptor_kind(f"{data}/t-0.4f2a-delete/00000000000000000000.index (deleted)", data) == "deleted *.index"
    assert descriptor_kind("/tmp/bench-x/broker.log", data) == "/tmp/bench-x/broker.log"
    assert descriptor_changes({"socket": 40, "t/*.log": 4, "pipe": 2}, {"socket": 41, "t/*.log": 9, "pipe": 2}) == [
        "t/*.log: 4 -> 9", "socket: 40 -> 41"]
