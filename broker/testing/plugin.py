"""pytest plugin: a real eosbroker for every test session, and brokers a test owns.

Fixtures
- ``eosbroker``: one broker per session (per worker under pytest-xdist) on a free port
  with a temporary data directory. ``eosbroker.bootstrap_servers`` is its address;
  ``create_topic``, ``read_committed`` and ``assert_topic_holds`` are at hand on it.
- ``eosbroker_cluster``: a factory for brokers a single test owns (own settings, own
  data directory, restart or kill -9 at will); they are gone when the test ends.
- ``eosbroker_secured``: the same for a broker whose listener is secured:
  ``eosbroker_secured("SASL_SSL", "SCRAM-SHA-512")`` (or PLAINTEXT, SSL, MTLS,
  SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER), with users alice, bob
  and admin and development certificates; the handle gives ready client settings:
  ``confluent_kafka("alice")``, ``kafka_python(..)``, ``aiokafka(..)``, ``java(..)``
  and the Spark data source's ``spark_options(..)`` (broker/testing/security.py).

Brokers run as subprocesses; ``--eosbroker-in-process`` (or the ini setting
``eosbroker_in_process = true``) runs them on a thread of the test process instead.
Settings for the session broker: ini ``eosbroker_settings`` (one key=value a line).

A test that ends with a confluent-kafka client still alive gets a ClientLeakWarning
naming it (broker/testing/client_leaks.py); ini ``eosbroker_client_leaks``: ``warn``
(the default), ``fail`` or ``ignore``.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import pytest

from broker.testing.client_leaks import ClientLeakWarning, clients_outliving, leak_message, librdkafka_clients
from broker.testing.in_process import InProcessBroker
from broker.testing.process import BrokerProcess


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eosbroker")
    group.addoption("--eosbroker-in-process", action="store_true", default=None,
                    help="run eosbroker fixtures on a thread of the test process instead of a subprocess")
    group.addoption("--eosbroker-timeline", metavar="DIR", default=None,
                    help="for a failed test, write the transaction timeline of each of its brokers with a control "
                         "API (admin=True or a scenario) to DIR as a self-contained HTML file")
    parser.addini("eosbroker_in_process", type="bool", default=False,
                  help="run eosbroker fixtures in-process (default: subprocess)")
    parser.addini("eosbroker_settings", type="linelist", default=[],
                  help="broker settings (Kafka names) for the session's eosbroker, one key=value a line")
    parser.addini("eosbroker_client_leaks", default="warn",
                  help="a test that leaves a confluent-kafka client alive: warn (default), fail or ignore")


_CALL_FAILED = pytest.StashKey[bool]()
# How long a leaked handle may take to finish being destroyed: failing a test is worth waiting for.
_LEAK_WAIT_S = {"warn": 2.0, "fail": 10.0}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True


@pytest.fixture(autouse=True)
def eosbroker_client_leaks(request: pytest.FixtureRequest):
    """Counts the live confluent-kafka clients around each test. Autouse and
    function-scoped, so set up before the test's own function fixtures and torn down
    after them. A test that failed already is left alone: its kept traceback holds its
    clients."""
    mode = request.config.getini("eosbroker_client_leaks")
    if mode not in ("warn", "fail", "ignore"):
        raise pytest.UsageError(f"eosbroker_client_leaks: warn, fail or ignore, not {mode!r}")
    if mode == "ignore":
        yield
        return
    before = librdkafka_clients()
    yield
    if request.node.stash.get(_CALL_FAILED, False):
        return
    leaked = clients_outliving(before, _LEAK_WAIT_S[mode])
    if not leaked:
        return
    if mode == "fail":
        pytest.fail(leak_message(request.node.nodeid, leaked), pytrace=False)
    warnings.warn(ClientLeakWarning(leak_message(request.node.nodeid, leaked)))


def _in_process_default(config: pytest.Config) -> bool:
    flag = config.getoption("--eosbroker-in-process")
    return bool(flag) if flag is not None else bool(config.getini("eosbroker_in_process"))


def _ini_settings(config: pytest.Config) -> dict[str, str]:
    settings = {}
    for line in config.getini("eosbroker_settings"):
        key, sep, value = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"eosbroker_settings: expected key=value, got {line!r}")
        settings[key.strip()] = value.strip()
    return settings


def new_broker(data_dir: Path, settings: dict[str, object] | None = None, *, in_process: bool = False,
               nodes: int = 1, admin: bool = False, log_level: str | None = None):
    """A broker handle, not yet started; ``admin`` serves the control API (``.control()``);
    ``log_level`` (a subprocess's only) its --log-level."""
    if not in_process:
        return BrokerProcess(data_dir, settings, nodes=nodes, admin=admin, log_level=log_level)
    if log_level is not None:
        raise ValueError("log_level is a subprocess broker's (in_process=False)")
    return InProcessBroker(data_dir, settings, nodes=nodes, admin=admin)


@pytest.fixture(scope="session")
def eosbroker(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config):
    """A broker for the whole session: use it for tests that only need topics of their own."""
    broker = new_broker(tmp_path_factory.mktemp("eosbroker") / "data", _ini_settings(pytestconfig),
                        in_process=_in_process_default(pytestconfig)).start()
    yield broker
    broker.stop()


def _write_timelines(request: pytest.FixtureRequest, brokers: list) -> None:
    """The failed test's brokers' timelines, for --eosbroker-timeline."""
    import json
    import re
    import urllib.request

    from broker.control.console import timeline_html

    directory = request.config.getoption("--eosbroker-timeline")
    if not directory or not request.node.stash.get(_CALL_FAILED, False):
        return
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
    for i, broker in enumerate(brokers):
        if not getattr(broker, "admin_port", None) or not broker.alive:
            continue
        try:
            with urllib.request.urlopen(broker.admin_url + "/events", timeout=30) as answer:
                history = json.load(answer)
        except OSError as e:
            print(f"eosbroker: no timeline for {request.node.nodeid}: {e}")
            continue
        path = Path(directory) / f"{name}{f'-{i}' if i else ''}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(timeline_html(history["events"], history["now_ms"], f"{request.node.nodeid}: its timeline"),
                        encoding="utf-8")
        print(f"eosbroker: the timeline of {request.node.nodeid} is in {path}")


@pytest.fixture
def eosbroker_cluster(tmp_path: Path, pytestconfig: pytest.Config, request: pytest.FixtureRequest):
    """``eosbroker_cluster(settings={...}, in_process=False, data_dir=None, nodes=1,
    admin=False, scenario=None, log_level=None)`` starts a broker the test owns and returns its handle
    (``stop``, ``restart``, ``kill``; with ``nodes=3`` a cluster of three nodes in one
    process, with ``admin=True`` its control API: ``.control().node_stop(node_id=2)``;
    with ``scenario="zombie-fencing"`` (or a TOML file) the scenario's settings and nodes,
    the control API, and the scenario loaded)."""
    started = []
    counter = itertools.count()
    default_in_process = _in_process_default(pytestconfig)

    def make(settings: dict[str, object] | None = None, *, in_process: bool | None = None,
             data_dir: Path | None = None, nodes: int = 1, admin: bool = False, scenario: str | None = None,
             log_level: str | None = None):
        if scenario is not None:  # the scenario's settings and node count, its control API
            from broker.faults.scenarios import read_scenario

            loaded = read_scenario(scenario)
            settings = {**(settings or {}), **loaded.settings}
            nodes, admin = loaded.nodes, True
        broker = new_broker(data_dir or tmp_path / f"eosbroker{next(counter)}",
                            settings, in_process=default_in_process if in_process is None else in_process,
                            nodes=nodes, admin=admin, log_level=log_level)
        started.append(broker)
        broker.start()
        if scenario is not None:
            broker.load_scenario(scenario)
        return broker

    yield make
    _write_timelines(request, started)
    for broker in started:
        if broker.alive:
            # a subprocess is killed (its data is thrown away anyway); a thread must stop
            broker.stop() if isinstance(broker, InProcessBroker) else broker.kill()


@pytest.fixture
def eosbroker_secured(tmp_path: Path):
    """``eosbroker_secured(protocol, mechanism=None, settings=None, nodes=1, admin=False)``
    starts a broker (a subprocess) serving ``protocol`` (PLAINTEXT, SSL, MTLS,
    SASL_PLAINTEXT or SASL_SSL; the SASL ones with ``mechanism``) and returns its handle
    (broker.testing.security.SecuredBroker); gone when the test ends."""
    from broker.testing.security import SecuredBroker, Security

    started = []
    counter = itertools.count()

    def make(protocol: str, mechanism: str | None = None, settings: dict[str, object] | None = None,
             nodes: int = 1, admin: bool = False):
        n = next(counter)
        security = Security.of(protocol, mechanism, certs_dir=tmp_path / f"certs{n}")
        broker = SecuredBroker(tmp_path / f"eosbroker-secured{n}", security, settings, nodes=nodes, admin=admin)
        started.append(broker)
        return broker.start()

    yield make
    for broker in started:
        if broker.alive:
            broker.kill()
