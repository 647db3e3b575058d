"""The ``eosbroker`` command group (click): the tools, ``settings``, and ``serve``, whose
options broker.cli parses without click (a broker starts faster without it)."""

from __future__ import annotations

import importlib

import click

from broker import cli
from broker.config import SETTINGS, properties_text


class _LazyGroup(click.Group):
    """Imports a tool's module only when its command runs."""

    lazy = {"transactions": "broker.tools.transaction_admin:transactions", "dump-log": "broker.tools.dump_log:dump_log",
            "topics": "broker.tools.topics:topics", "healthcheck": "broker.tools.healthcheck:healthcheck",
            "ctl": "broker.control.ctl:ctl", "scenarios": "broker.faults.scenarios.cli:scenarios"}

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx, name):
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="eosbroker", prog_name="eosbroker", message="%(prog)s %(version)s")
@click.option("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR")
def main(log_level: str) -> None:
    """eosbroker: a Kafka-compatible broker emulator built around exactly-once."""
    cli.configure_logging(log_level)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
              add_help_option=False, help=cli.SERVE_HELP + " Options: eosbroker serve --help.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args: tuple[str, ...]) -> None:
    cli.serve(list(args))


@main.command("settings")
def settings_cmd() -> None:
    """List every setting with its default, as a server.properties file (--config) takes them."""
    for name, s in sorted(SETTINGS.items()):
        if s.doc:
            click.echo(f"# {s.doc}")
        click.echo(f"{name}={properties_text(s.default)}")
    import textwrap

    from broker.config import kafka_names, settings_in_effect

    in_effect = sorted(settings_in_effect())
    without = sorted(n for n in kafka_names() if n not in SETTINGS and n not in in_effect)
    click.echo("\n# Apache Kafka's other broker and controller settings are accepted too, and type-checked as Kafka")
    click.echo("# checks them. These take effect: " + ", ".join(in_effect) + ".")
    click.echo("# Accepted, no effect in eosbroker:")
    for line in textwrap.wrap(", ".join(without), 100):
        click.echo(f"#   {line}")


@main.command("certs")
@click.option("--dir", "directory", default="./certs", show_default=True, type=click.Path(file_okay=False),
              help="where to write the files (made if missing; files there are replaced)")
@click.option("--host", "hosts", multiple=True, metavar="NAME|IP",
              help="a host name or address clients reach the broker by, for its certificate; repeatable "
                   "(localhost and 127.0.0.1 are always in)")
@click.option("--client", "clients", multiple=True, metavar="NAME",
              help="a client certificate to make (subject CN=NAME); repeatable (default: alice, bob)")
@click.option("--password", default="eosbroker", show_default=True, help="the PKCS12 files' password")
@click.option("--days", default=825, show_default=True, type=click.IntRange(1, 36500), help="validity")
@click.option("--protocol", default="SSL", show_default=True, type=click.Choice(["SSL", "SASL_SSL"]),
              help="the security.protocol the printed client settings name")
def certs_cmd(directory: str, hosts: tuple[str, ...], clients: tuple[str, ...], password: str, days: int,
              protocol: str) -> None:
    """Write a development CA, a broker certificate and client certificates (PEM and PKCS12),
    and print the broker and client settings that go with them."""
    from broker.security.certs import DEFAULT_CLIENTS, client_settings_text, write_certificates

    try:
        written = write_certificates(directory, hosts, clients or DEFAULT_CLIENTS, password, days)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(client_settings_text(written, protocol), nl=False)
