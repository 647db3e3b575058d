"""The ``eosbroker`` command line."""

from __future__ import annotations

import gc

# Start-up creates tens of thousands of objects that live as long as the process
# (modules, classes, kio's message types); the cyclic collector would scan them again
# and again while they are made and free nothing (~10% of start-up). It is off while
# this module loads, and `serve` keeps it off until the broker listens.
gc.disable()

import asyncio
import importlib
import logging
import os
import signal
import sys
from pathlib import Path

import click

from broker.clock import SYSTEM_CLOCK
from broker.config import SETTINGS, BrokerConfig, ConfigError, environment_overrides


class _LazyGroup(click.Group):
    """Imports a tool's module only when its command runs: `serve` starts faster."""

    lazy = {"transactions": "broker.tools.transaction_admin:transactions", "dump-log": "broker.tools.dump_log:dump_log",
            "topics": "broker.tools.topics:topics", "healthcheck": "broker.tools.healthcheck:healthcheck",
            "ctl": "broker.admin.ctl:ctl", "scenarios": "broker.scenarios.cli:scenarios"}

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx, name):
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup)
@click.option("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR")
def main(log_level: str) -> None:
    """eosbroker: a Kafka-compatible broker emulator built around exactly-once."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="EOSBROKER_HOST")
@click.option("--port", default=9092, show_default=True, type=int, envvar="EOSBROKER_PORT")
@click.option("--data-dir", default="./data", show_default=True, type=click.Path(file_okay=False, path_type=Path),
              envvar="EOSBROKER_DATA_DIR")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="a server.properties file (Kafka setting names)")
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="set one setting; repeatable")
@click.option("--nodes", type=click.IntRange(1, 64), default=None,
              help="nodes in this process (ids 1..N, ports from --port on); the setting node.count")
@click.option("--admin-port", type=click.IntRange(0, 65535), default=None,
              help="serve the control API (HTTP, /openapi.json) on this port; 0 picks a free one")
@click.option("--admin-host", default="127.0.0.1", show_default=True)
@click.option("--admin-token", envvar="EOSBROKER_ADMIN_TOKEN", default=None,
              help="require 'Authorization: Bearer TOKEN' on the control API (env EOSBROKER_ADMIN_TOKEN)")
@click.option("--scenario", "scenario_name", metavar="NAME|FILE", default=None,
              help="run a scenario: a catalogue name (eosbroker scenarios) or a TOML file; its settings and "
                   "node count win over the others")
def serve(host: str, port: int, data_dir: Path, config_file: Path | None, overrides: tuple[str, ...],
          nodes: int | None, admin_port: int | None, admin_host: str, admin_token: str | None,
          scenario_name: str | None) -> None:
    """Start the broker and serve until SIGINT or SIGTERM.

    Settings also come from environment variables named after them (EOSBROKER_LOG_RETENTION_MS
    or KAFKA_LOG_RETENTION_MS for log.retention.ms), between the --config file and --override."""
    _without_hypothesis()  # before a scenario's checks import kio
    try:
        config = BrokerConfig.load(config_file, [*environment_overrides(os.environ), *overrides])
        if nodes is not None:
            config.set("node.count", nodes)
        scenario = None
        if scenario_name is not None:
            from broker.scenarios import ScenarioError, read_scenario

            try:
                scenario = read_scenario(scenario_name)
            except ScenarioError as e:
                raise click.BadParameter(str(e), param_hint="--scenario") from None
            for key, value in scenario.settings.items():
                config.set(key, value)
            if nodes is not None and nodes != scenario.nodes:
                raise ConfigError(f"--nodes {nodes}: the scenario {scenario.name!r} runs {scenario.nodes} node(s)")
            config.set("node.count", scenario.nodes)
        if not 1 <= config["node.count"] <= 64:
            raise ConfigError(f"node.count must be between 1 and 64, not {config['node.count']}")
    except (ConfigError, OSError) as e:
        raise click.UsageError(str(e)) from None
    admin = None if admin_port is None else (admin_host, admin_port, admin_token)
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; keep asyncio usable where it cannot build
        uvloop = None
    runner = uvloop.run if uvloop is not None else asyncio.run
    gc.disable()
    try:
        runner(_serve(config, data_dir, host, port, admin, scenario))
    finally:
        gc.enable()


def _without_hypothesis() -> None:
    """Keeps Hypothesis out of a broker process.

    kio registers Hypothesis strategies for its types whenever Hypothesis is importable
    (the test extra installs it). That costs ~0.3 s of imports and, in a directory
    without a ``.hypothesis`` cache (a fresh working directory), ~1.6 s more building
    Hypothesis's unicode table, plus a ``.hypothesis`` dir left in the working
    directory. A broker never needs them; a process that already uses Hypothesis (a
    test) keeps it."""
    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # None: `import hypothesis` raises ImportError


async def _serve(config: BrokerConfig, data_dir: Path, host: str, port: int, admin, scenario=None) -> None:
    from broker.app import Broker

    started = SYSTEM_CLOCK.monotonic()
    clock = None
    if admin is not None or scenario is not None:  # time can be moved: give the broker a clock that can jump
        from broker.virtual_clock import VirtualClock

        clock = VirtualClock()
    broker = Broker(config, data_dir, host, port) if clock is None else Broker(config, data_dir, host, port, clock)
    try:
        await broker.start()
    except OSError as e:
        raise click.ClickException(f"cannot listen: {e}") from None
    admin_server = None
    if admin is not None:
        from broker.admin import AdminServer

        admin_server = AdminServer(broker, *admin)
        try:
            await admin_server.start()
        except OSError as e:
            await broker.stop()
            raise click.ClickException(f"cannot serve the control API: {e}") from None
    if scenario is not None:
        from broker.control import ControlError, ControlService
        from broker.scenarios import load_into

        try:
            await load_into(admin_server.control if admin_server is not None else ControlService(broker), scenario)
        except ControlError as e:
            if admin_server is not None:
                await admin_server.stop()
            await broker.stop()
            raise click.ClickException(f"cannot load the scenario: {e.field}: {e.message}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if len(broker.nodes) == 1:
        print(f"eosbroker listening on {host}:{broker.port}", flush=True)
    else:
        for node in broker.nodes:
            print(f"eosbroker node {node.node_id} listening on {host}:{node.server.port}", flush=True)
    if admin_server is not None:
        print(f"eosbroker admin listening on {admin_server.url}", flush=True)
    if scenario is not None:
        print(f"eosbroker scenario {scenario.name} loaded: {scenario.title}", flush=True)
    # a node added through the control API announces itself as the first ones did
    # What start-up made lives as long as the process: the collector skips it from now on.
    gc.freeze()
    gc.enable()
    broker.node_listening = lambda node: print(
        f"eosbroker node {node.node_id} listening on {host}:{node.server.port}", flush=True)
    logging.getLogger("broker").info(
        "started in %.0f ms, data in %s, profile emulate.kafka.version=%s",
        (SYSTEM_CLOCK.monotonic() - started) * 1000, data_dir, config["emulate.kafka.version"],
    )
    await stop.wait()
    logging.getLogger("broker").info("shutting down")
    if admin_server is not None:
        await admin_server.stop()
    await broker.stop()


@main.command("settings")
def settings_cmd() -> None:
    """List every setting with its default."""
    for name, s in sorted(SETTINGS.items()):
        note = f"  ({s.doc})" if s.doc else ""
        click.echo(f"{name}={s.default}{note}")


gc.enable()  # importers of this module (the tools, tests) keep their collector

if __name__ == "__main__":
    main()
