"""``eosbroker scenarios``: the catalogue, without a running broker."""

from __future__ import annotations

import click

from broker.faults.scenarios.format import ScenarioError


@click.command("scenarios")
@click.argument("name", required=False, metavar="[NAME|FILE]")
def scenarios(name: str | None) -> None:
    """List the scenario catalogue, or print one scenario's file (checked)."""
    from broker.faults.scenarios.loader import catalogue, read_scenario

    if name is None:
        for scenario_name, text in catalogue().items():
            s = read_scenario(scenario_name)
            click.echo(f"{scenario_name:<40} {s.nodes} node(s)  {s.title}")
        return
    try:
        scenario = read_scenario(name)
    except ScenarioError as e:
        raise click.ClickException(str(e)) from None
    click.echo(scenario.source, nl=False)
