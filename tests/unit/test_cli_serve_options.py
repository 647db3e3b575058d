"""`serve`'s options (argparse, so a broker never imports click) and the click group that
lists `serve` beside the tools and hands its arguments over."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import cli
from broker.cli import quick_parse, serve_parser
from broker.commands import main
from broker.program import run
from broker.config import ConfigError, environment_overrides


def test_options_and_their_environment_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("EOSBROKER_HOST", "0.0.0.0")
    monkeypatch.setenv("EOSBROKER_PORT", "19092")
    monkeypatch.setenv("EOSBROKER_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("EOSBROKER_ADMIN_TOKEN", "secret")
    args = serve_parser().parse_args([])
    assert (args.host, args.port, args.data_dir, args.admin_token) == ("0.0.0.0", 19092, tmp_path / "d", "secret")
    assert (args.nodes, args.admin_port, args.scenario_name, args.overrides) == (None, None, None, [])
    args = serve_parser().parse_args(["--port", "0", "--nodes", "3", "--admin-port", "0", "--override", "a=1",
                                      "--override", "b=2", "--data-dir", "x"])
    assert (args.port, args.nodes, args.admin_port, args.overrides, args.data_dir) == (0, 3, 0, ["a=1", "b=2"], Path("x"))


def test_node_count_and_admin_port_from_the_environment(monkeypatch):
    monkeypatch.setenv("EOSBROKER_NODES", "3")
    monkeypatch.setenv("EOSBROKER_ADMIN_PORT", "0")
    for args in (serve_parser().parse_args([]), quick_parse([])):
        assert (args.nodes, args.admin_port) == (3, 0)


def test_a_mistyped_eosbroker_variable_is_refused_with_the_closest_name(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("EOSBROKER_LOG_RETENTION_MSS", "5")
    with pytest.raises(SystemExit) as exited:
        run(["--log-level", "WARNING", "serve", "--data-dir", str(tmp_path / "data")])
    assert exited.value.code == 2
    assert ("unknown environment variable EOSBROKER_LOG_RETENTION_MSS: it names no setting; "
            "did you mean EOSBROKER_LOG_RETENTION_MS?") in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_eosbroker_variables_that_are_options_or_settings_pass_and_kafka_ones_are_left_alone():
    assert environment_overrides({"EOSBROKER_DATA_DIR": "d", "EOSBROKER_ADMIN": "http://x", "EOSBROKER_NODES": "2",
                                  "EOSBROKER_NODE_COUNT": "2", "KAFKA_LOG_RETENTION_MSS": "5"}) == ["node.count=2"]
    with pytest.raises(ConfigError, match="did you mean EOSBROKER_DATA_DIR"):
        environment_overrides({"EOSBROKER_DATADIR": "d"})


def test_every_eosbroker_variable_the_project_names_is_accepted():
    """The test suite's own variables (EOSBROKER_CROSS_CHECK_LAYOUTS, ...) reach the brokers it
    starts, and the docs' examples must start one."""
    root = Path(__file__).parents[2]
    named = set()
    for path in [*root.glob("*.md"), *root.glob("docs/*.md"), root / "Makefile", root / "Dockerfile",
                 root / "docker-compose.yml", *root.glob("tests/compose/*.sh")]:
        named |= set(re.findall(r"EOSBROKER_[A-Z][A-Z0-9_]*", path.read_text()))
    for package in ("broker", "coordinator", "protocol", "spark_client", "tests", "bench", "tools", "examples"):
        for path in (root / package).rglob("*.py"):
            if path == Path(__file__):  # names typos on purpose
                continue
            named |= set(re.findall(r"[\"']([A-Z]*EOSBROKER_[A-Z][A-Z0-9_]*)[\"']", path.read_text()))
    named = {name for name in named if name.startswith("EOSBROKER_")}
    assert {"EOSBROKER_CROSS_CHECK_LAYOUTS", "EOSBROKER_FUZZ_SCALE", "EOSBROKER_PORT"} <= named
    environment_overrides(dict.fromkeys(named, "1"))  # refuses none of them


def test_defaults_without_environment(monkeypatch):
    for name in ("EOSBROKER_HOST", "EOSBROKER_PORT", "EOSBROKER_DATA_DIR", "EOSBROKER_ADMIN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    args = serve_parser().parse_args([])
    assert (args.host, args.port, args.data_dir, args.admin_token) == ("127.0.0.1", 9092, Path("data"), None)


@pytest.mark.parametrize("argv, words", [
    (["--port", "x"], "argument --port: invalid integer value"),
    (["--port", "70000"], "not in the range 0<=x<=65535"),
    (["--nodes", "0"], "not in the range 1<=x<=64"),
    (["--config", "/no/such/file"], "does not exist"),
    (["--no-such-option"], "unrecognized arguments"),
    (["--po", "1"], "unrecognized arguments"),  # no abbreviations, as before
    (["--override", "no.such.setting=1"], "unknown setting 'no.such.setting'"),
    (["--override", "log.retention.msec=1000"], "unknown setting 'log.retention.msec'; did you mean 'log.retention.ms'?"),
])
def test_bad_options_exit_2_with_a_message(capsys, tmp_path, argv, words):
    with pytest.raises(SystemExit) as exited:
        run(["--log-level", "WARNING", "serve", "--data-dir", str(tmp_path / "data"), *argv])
    assert exited.value.code == 2
    assert words in capsys.readouterr().err


def test_data_dir_that_is_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as exited:
        run(["serve", "--data-dir", str(tmp_path / "f")])
    assert exited.value.code == 2 and "is a file" in capsys.readouterr().err


def test_the_click_group_lists_serve_and_hands_it_its_arguments(tmp_path):
    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0 and "serve" in listed.output and "settings" in listed.output
    helped = CliRunner().invoke(main, ["serve", "--help"])
    assert helped.exit_code == 0 and "--data-dir" in helped.output and "--admin-port" in helped.output
    refused = CliRunner().invoke(main, ["serve", "--port", "x", "--data-dir", str(tmp_path / "data")])
    assert refused.exit_code == 2 and not (tmp_path / "data").exists()


def test_version():
    from importlib.metadata import version

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"eosbroker {version('eosbroker')}\n"


_FLAGS = ["--host", "--port", "--data-dir", "--config", "--override", "--nodes", "--admin-port", "--admin-host",
          "--admin-token", "--scenario", "--help", "-h", "--po", "--", "--no-such"]
_VALUES = ["0", "9092", "70000", "-1", "x", "", "a=1", "--port", "-", "data", "0.0.0.0", "3", "65"]


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A file, a directory and a missing path for --config and --data-dir to meet."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "server.properties").write_text("")
    (tmp_path / "a_dir").mkdir()
    return ["server.properties", "a_dir", "missing"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(st.one_of(st.sampled_from(_FLAGS), st.sampled_from(_VALUES + ["@file"]),
                               st.builds(lambda f, v: f"{f}={v}", st.sampled_from(_FLAGS), st.sampled_from(_VALUES))),
                     max_size=8),
       env=st.fixed_dictionaries({}, optional={"EOSBROKER_PORT": st.sampled_from(["19092", "x", "70000"]),
                                               "EOSBROKER_DATA_DIR": st.sampled_from(["d", "server.properties"])}))
def test_quick_parse_reads_a_command_line_as_argparse_does(files, monkeypatch, capsys, argv, env):
    """quick_parse (serve's way round argparse at start-up) gives argparse's namespace
    whenever it answers, and leaves every command line argparse refuses (or answers with
    help) to argparse."""
    argv = [files[len(a) % 3] if a == "@file" else a for a in argv]
    for name in ("EOSBROKER_PORT", "EOSBROKER_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    quick = quick_parse(argv)
    try:
        expected = vars(serve_parser().parse_args(argv))
    except SystemExit:
        expected = None
    capsys.readouterr()
    if quick is not None:
        assert vars(quick) == expected
    else:
        assert expected is None or not {"--help", "-h"}.isdisjoint(argv) or _needs_argparse(argv)


def _needs_argparse(argv: list[str]) -> bool:
    """Command lines argparse accepts but quick_parse leaves to it: a value starting with
    '-' (argparse takes a negative number as a value)."""
    return any(a.startswith("-") and a not in _FLAGS and "=" not in a for a in argv)


def test_quick_parse_reads_the_bench_and_test_command_lines(tmp_path):
    args = quick_parse(["--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "d"), "--nodes", "3",
                        "--override=a=1", "--override", "b=2", "--admin-port", "0"])
    assert vars(args) == vars(serve_parser().parse_args(
        ["--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "d"), "--nodes", "3",
         "--override=a=1", "--override", "b=2", "--admin-port", "0"]))
    assert (args.port, args.nodes, args.overrides) == (0, 3, ["a=1", "b=2"])


def test_serve_leaves_the_collector_on_after_refusing_its_options(tmp_path):
    import gc

    with pytest.raises(SystemExit):
        run(["serve", "--port", "x", "--data-dir", str(tmp_path / "data")])
    assert gc.isenabled()


def test_the_log_lines_time_text_is_the_standard_formatters():
    """The broker's line formatter makes its time text once per second: every line
    still reads as logging's own formatter would write it, within a second and
    across one."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    ours, standard = cli._LineFormatter(fmt), logging.Formatter(fmt)
    for created in (1_700_000_000.001, 1_700_000_000.999, 1_700_000_001.0, 1_700_000_001.5, 1_700_003_600.25,
                    1_700_000_000.5):
        record = logging.LogRecord("broker.x", logging.INFO, __file__, 1, "transaction %s", ("t",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert ours.format(record) == standard.format(record)
