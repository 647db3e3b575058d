"""The ``eosbroker`` command line.

``serve`` reads its options itself, or with argparse when they need an error message or
help, and never imports click; the other commands are click commands (broker.commands),
loaded only when one of them runs. The program (broker.program) dispatches between them.
"""

from __future__ import annotations

import gc

# Start-up creates tens of thousands of objects that live as long as the process
# (modules, classes, kio's message types); the cyclic collector would scan them again
# and again while they are made and free nothing. It is off while
# this module loads, and `serve` keeps it off until the broker listens. Turned on in
# between, the next allocation would scan everything the imports made: the program (broker.program, which turns it off before importing this
# module) leaves it to `run`; other importers get it back at the end.
_COLLECTING = gc.isenabled()
gc.disable()

from broker import dataclass_code

dataclass_code.install()  # before the first @dataclass: the broker's and kio's

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from broker.clock import SYSTEM_CLOCK
from broker.config import BrokerConfig, ConfigError, environment_overrides

SERVE_HELP = "Start the broker and serve until SIGINT or SIGTERM."


class CommandError(Exception):
    """A failure after the options were accepted: ``Error: ...`` and exit status 1."""


class _LineFormatter(logging.Formatter):
    """The log line's format; its time text is made once per second, not once per line
    (the transaction coordinator writes a few lines per transaction)."""

    _second = None
    _second_text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:
            self._second_text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return self.default_msec_format % (self._second_text, record.msecs)


def configure_logging(level: str) -> None:
    # The format names no caller, thread or process: the records need not look them up.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def _int_in(low: int, high: int):
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            import argparse  # only to report the failure (see quick_parse)

            raise argparse.ArgumentTypeError(f"{value} is not in the range {low}<=x<={high}")
        return value
    parse.__name__ = "integer"  # argparse names the type in its error message
    return parse


def _existing_file(text: str) -> Path:
    path = Path(text)
    if not path.exists() or path.is_dir():
        import argparse  # only to report the failure (see quick_parse)

        raise argparse.ArgumentTypeError(f"file {text!r} " + ("is a directory" if path.exists() else "does not exist"))
    return path


def _directory(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        import argparse  # only to report the failure (see quick_parse)

        raise argparse.ArgumentTypeError(f"directory {text!r} is a file")
    return path


def _serve_options(env) -> list[tuple[str, dict]]:
    """``serve``'s options as (flag, argparse keywords): argparse builds its parser from
    them and ``quick_parse`` reads well-formed command lines with them."""
    return [
        ("--host", dict(default=env.get("EOSBROKER_HOST", "127.0.0.1"),
                        help="the short form of listeners=PLAINTEXT://HOST:PORT (env EOSBROKER_HOST; default 127.0.0.1)")),
        ("--port", dict(type=_int_in(0, 65535), default=env.get("EOSBROKER_PORT", "9092"),
                        help="(env EOSBROKER_PORT; default 9092); with --nodes N, nodes listen on N consecutive ports")),
        ("--data-dir", dict(type=_directory, default=env.get("EOSBROKER_DATA_DIR", "./data"),
                            help="(env EOSBROKER_DATA_DIR; default ./data)")),
        ("--config", dict(dest="config_file", type=_existing_file, default=None,
                          help="a server.properties file (Kafka setting names)")),
        ("--override", dict(dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                            help="set one setting; repeatable")),
        ("--nodes", dict(type=_int_in(1, 64), default=env.get("EOSBROKER_NODES"),
                         help="nodes in this process (ids 1..N, ports from --port on); the setting node.count "
                              "(env EOSBROKER_NODES)")),
        ("--admin-port", dict(type=_int_in(0, 65535), default=env.get("EOSBROKER_ADMIN_PORT"),
                              help="serve the control API (HTTP, /openapi.json) on this port; 0 picks a free one "
                                   "(env EOSBROKER_ADMIN_PORT)")),
        ("--admin-host", dict(default="127.0.0.1", help="(default 127.0.0.1)")),
        ("--admin-token", dict(default=env.get("EOSBROKER_ADMIN_TOKEN"),
                               help="require 'Authorization: Bearer TOKEN' on the control API (env EOSBROKER_ADMIN_TOKEN)")),
        ("--admin-tls-cert", dict(type=_existing_file, default=env.get("EOSBROKER_ADMIN_TLS_CERT"),
                                  help="serve the control API and console over HTTPS with this PEM certificate "
                                       "chain (e.g. eosbroker certs' broker.crt; env EOSBROKER_ADMIN_TLS_CERT)")),
        ("--admin-tls-key", dict(type=_existing_file, default=env.get("EOSBROKER_ADMIN_TLS_KEY"),
                                 help="its PEM private key (broker.key; env EOSBROKER_ADMIN_TLS_KEY)")),
        ("--scram", dict(dest="scram_users", action="append", default=[], metavar="MECHANISM=[name=..,password=..]",
                         help="create or replace a SCRAM user at start, as kafka-storage format --add-scram writes "
                              "it, e.g. SCRAM-SHA-512=[name=alice,password=alice-secret]; repeatable")),
        ("--scenario", dict(dest="scenario_name", metavar="NAME|FILE", default=None,
                            help="run a scenario: a catalogue name (eosbroker scenarios) or a TOML file; its settings and "
                                 "node count win over the others")),
    ]


def serve_parser():  # -> argparse.ArgumentParser
    import argparse

    p = argparse.ArgumentParser(
        prog="eosbroker serve", allow_abbrev=False, description=SERVE_HELP,
        epilog="Settings also come from environment variables named after them (EOSBROKER_LOG_RETENTION_MS "
               "or KAFKA_LOG_RETENTION_MS for log.retention.ms), between the --config file and --override.")
    for flag, keywords in _serve_options(os.environ):
        p.add_argument(flag, **keywords)
    return p


def quick_parse(argv: list[str]) -> SimpleNamespace | None:
    """The namespace argparse would make of a well-formed command line (each option known,
    spelt out, given a value that does not start with '-' and that its type accepts), or
    None for anything else, which argparse then parses and reports as always. Importing
    argparse (with gettext, locale and shutil) and building the parser would lengthen
    every start."""
    options = {flag: keywords for flag, keywords in _serve_options(os.environ)}
    dest = {flag: keywords.get("dest", flag[2:].replace("-", "_")) for flag, keywords in options.items()}
    given: dict[str, object] = {}
    i = 0
    try:
        while i < len(argv):
            flag, equals, value = argv[i].partition("=")
            if flag not in options:
                return None
            if not equals:
                if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                    return None
                i += 1
                value = argv[i]
            i += 1
            keywords = options[flag]
            converted = keywords["type"](value) if "type" in keywords else value
            if keywords.get("action") == "append":
                given.setdefault(dest[flag], []).append(converted)
            else:
                given[dest[flag]] = converted
        values = {}
        for flag, keywords in options.items():
            if dest[flag] in given:
                values[dest[flag]] = given[dest[flag]]
            else:
                default = keywords["default"]
                if isinstance(default, str) and "type" in keywords:
                    default = keywords["type"](default)  # as argparse converts a string default
                values[dest[flag]] = list(default) if isinstance(default, list) else default
    except Exception:  # a value its type rejects: argparse words the message
        return None
    return SimpleNamespace(**values)


def serve(argv: list[str]) -> None:
    """``eosbroker serve`` with the arguments after ``serve``."""
    gc.disable()  # until the broker listens (see the top of this module)
    try:
        _serve_command(argv)
    finally:
        gc.enable()


def _serve_command(argv: list[str]) -> None:
    args = quick_parse(argv) or serve_parser().parse_args(argv)
    _without_hypothesis()  # before a scenario's checks import kio
    try:
        config = BrokerConfig.load(args.config_file, [*environment_overrides(os.environ), *args.overrides])
        if args.nodes is not None:
            config.set("node.count", args.nodes)
        scenario = None
        if args.scenario_name is not None:
            from broker.faults.scenarios import ScenarioError, read_scenario

            try:
                scenario = read_scenario(args.scenario_name)
            except ScenarioError as e:
                serve_parser().error(str(e))
            for key, value in scenario.settings.items():
                config.set(key, value)
            if args.nodes is not None and args.nodes != scenario.nodes:
                raise ConfigError(f"--nodes {args.nodes}: the scenario {scenario.name!r} runs {scenario.nodes} node(s)")
            config.set("node.count", scenario.nodes)
        if not 1 <= config["node.count"] <= 64:
            raise ConfigError(f"node.count must be between 1 and 64, not {config['node.count']}")
        if "listeners" in config.explicit and _host_or_port_given(argv):
            raise ConfigError("--host/--port are the short form of listeners=PLAINTEXT://HOST:PORT; "
                              "give either them or the listeners setting")
        plan = config.listener_plan(args.host, args.port)  # refused here, with Kafka's message, before anything starts
        config.tls_listeners(plan)
        config.sasl_listeners(plan, None)
        admin_tls = _admin_tls(args)
        scram_users = []
        given = [t for t in config["scram.users"].split(";") if t.strip()] + args.scram_users
        if given:
            from broker.security.scram_users import ScramUserError, parse_scram_user

            try:
                scram_users = [parse_scram_user(text) for text in given]
            except ScramUserError as e:
                raise ConfigError(str(e)) from None
    except (ConfigError, OSError) as e:
        serve_parser().error(str(e))
    admin = None if args.admin_port is None else (args.admin_host, args.admin_port, args.admin_token, admin_tls)
    from broker.wire.listeners import close_sockets, listen_early

    # Listening before the rest of the broker loads: a client that connects meanwhile
    # is answered when the broker is ready, not refused.
    listening = listen_early(plan, config["node.count"])
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; keep asyncio usable where it cannot build
        uvloop = None
    runner = uvloop.run if uvloop is not None else asyncio.run
    try:
        runner(_serve(config, args.data_dir, args.host, args.port, admin, scenario, scram_users, listening))
    except CommandError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        close_sockets(listening)  # those no node took: a start that failed before its nodes listened


def _admin_tls(args):  # -> ssl.SSLContext | None
    """The control API's TLS context from --admin-tls-cert/--admin-tls-key, or None."""
    if args.admin_tls_cert is None and args.admin_tls_key is None:
        return None
    if args.admin_tls_cert is None or args.admin_tls_key is None or args.admin_port is None:
        raise ConfigError("--admin-tls-cert and --admin-tls-key go together, with --admin-port")
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(args.admin_tls_cert, args.admin_tls_key)
    except ssl.SSLError as e:
        raise ConfigError(f"--admin-tls-cert/--admin-tls-key: not a PEM certificate chain and its key: "
                          f"{e.reason or e}") from None
    return context


def _host_or_port_given(argv: list[str]) -> bool:
    """--host or --port on the command line (EOSBROKER_HOST/PORT, which the image sets,
    give way to a listeners setting)."""
    return any(a.partition("=")[0] in ("--host", "--port") for a in argv)


def _listening(broker, node, host: str) -> str:
    """A node's start-up line: "host:port" for the one listener --host/--port make,
    else each listener as Kafka writes it (NAME://host:port)."""
    binds = node.server.binds
    if "listeners" not in broker.config.explicit:
        return f"{host}:{binds[0].port}"
    return " ".join(b.text() for b in binds)


def _without_hypothesis() -> None:
    """Keeps Hypothesis out of a broker process.

    kio registers Hypothesis strategies for its types whenever Hypothesis is importable
    (the test extra installs it). That costs Hypothesis's imports and, in a directory
    without a ``.hypothesis`` cache (a fresh working directory), building its unicode
    table, plus a ``.hypothesis`` dir left in the working
    directory. A broker never needs them; a process that already uses Hypothesis (a
    test) keeps it."""
    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # None: `import hypothesis` raises ImportError


async def _serve(config: BrokerConfig, data_dir: Path, host: str, port: int, admin, scenario=None,
                 scram_users=(), listening=None) -> None:
    from broker.process import Broker
    from broker.log.data_dir_lock import DataDirError, unusable

    started = SYSTEM_CLOCK.monotonic()
    clock = SYSTEM_CLOCK
    if admin is not None or scenario is not None:  # time can be moved: give the broker a clock that can jump
        from broker.virtual_clock import VirtualClock

        clock = VirtualClock()
    try:  # the control API's timeline reads the event history: kept only for one
        broker = Broker(config, data_dir, host, port, clock, history=admin is not None, listening=listening)
    except DataDirError as e:
        raise CommandError(str(e)) from None
    except OSError as e:  # a file or directory under it
        raise CommandError(unusable(data_dir, e)) from None
    if scram_users:  # before the first client can log in
        broker.scram_credentials.apply([], list(scram_users))
    try:
        await broker.start()
    except OSError as e:  # a socket's error names no file
        raise CommandError(f"cannot listen: {e}" if e.filename is None else unusable(data_dir, e)) from None
    admin_server = None
    if admin is not None:
        from broker.control.http_server import AdminServer

        admin_server = AdminServer(broker, *admin)
        try:
            await admin_server.start()
        except OSError as e:
            await broker.stop()
            raise CommandError(f"cannot serve the control API: {e}") from None
    if scenario is not None:
        from broker.control.operations import ControlError
        from broker.control.service import ControlService
        from broker.faults.scenarios import load_into

        try:
            await load_into(admin_server.control if admin_server is not None else ControlService(broker), scenario)
        except ControlError as e:
            if admin_server is not None:
                await admin_server.stop()
            await broker.stop()
            raise CommandError(f"cannot load the scenario: {e.field}: {e.message}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if len(broker.nodes) == 1:
        print(f"eosbroker listening on {_listening(broker, broker.nodes[0], host)}", flush=True)
    else:
        for node in broker.nodes:
            print(f"eosbroker node {node.node_id} listening on {_listening(broker, node, host)}", flush=True)
    if admin_server is not None:
        print(f"eosbroker admin listening on {admin_server.url}", flush=True)
    if scenario is not None:
        print(f"eosbroker scenario {scenario.name} loaded: {scenario.title}", flush=True)
    # a node added through the control API announces itself as the first ones did
    # What start-up made lives as long as the process: the collector skips it from now on.
    gc.freeze()
    gc.enable()
    dataclass_code.save()  # what start-up compiled; the first requests' message types at exit
    broker.node_listening = lambda node: print(
        f"eosbroker node {node.node_id} listening on {_listening(broker, node, host)}", flush=True)
    without_effect = config.without_effect()
    if without_effect:
        logging.getLogger("broker").info("accepted, no effect in eosbroker: %s", ", ".join(without_effect))
    for controller in broker.listeners.controller:
        logging.getLogger("broker").info(
            "controller listener %s accepted, not served: eosbroker has no separate controller quorum",
            controller.text())
    logging.getLogger("broker").info(
        "started in %.0f ms, data in %s, profile emulate.kafka.version=%s",
        (SYSTEM_CLOCK.monotonic() - started) * 1000, data_dir, config["emulate.kafka.version"],
    )
    await stop.wait()
    logging.getLogger("broker").info("shutting down")
    if admin_server is not None:
        await admin_server.stop()
    await broker.stop()
    dataclass_code.save()


if _COLLECTING:
    gc.enable()  # importers of this module (the tools, tests) keep their collector
