"""Finding a scenario (catalogue name or file) and loading it into a running broker:
checked in full against that broker first, then applied; a step refused while
applying undoes what the load added, so a scenario is in force whole or not at all."""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from broker.control.operations import ControlError
from broker.faults.scenarios.format import Scenario, ScenarioError, parse
from broker.faults.scenarios.triggers import Triggers

log = logging.getLogger(__name__)


def catalogue() -> dict[str, str]:
    """Name -> TOML text of every scenario shipped with eosbroker."""
    folder = resources.files("broker.faults.scenarios") / "catalogue"
    return {entry.name[: -len(".toml")]: entry.read_text(encoding="utf-8")
            for entry in sorted(folder.iterdir(), key=lambda e: e.name) if entry.name.endswith(".toml")}


def read_scenario(name_or_path: str) -> Scenario:
    """A catalogue scenario by name, or the scenario in a file; ScenarioError otherwise."""
    shipped = catalogue()
    if name_or_path in shipped:
        return parse(shipped[name_or_path], name_or_path)
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ScenarioError(f"cannot read {name_or_path}: {e.strerror or e}", "scenario") from None
        return parse(text, str(path))
    raise ScenarioError(unknown_name(name_or_path, shipped), "scenario")


def unknown_name(name: str, shipped: dict[str, str] | None = None) -> str:
    names = sorted(shipped if shipped is not None else catalogue())
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"no scenario {name!r} in the catalogue and no such file{hint} (the catalogue: {', '.join(names)})"


@dataclass
class LoadedScenario:
    scenario: Scenario
    triggers: Triggers
    fault_rule_ids: list[int] = field(default_factory=list)

    def describe(self) -> dict:
        return self.scenario.describe() | {"fault_rule_ids": list(self.fault_rule_ids),
                                           "triggers": self.triggers.describe()}


def _refuse(message: str, where: str, status: int = 409) -> ControlError:
    return ControlError(message, where, status)


def check_fits(broker, scenario: Scenario) -> None:
    """Everything about the running broker the scenario needs, before any change."""
    if len(broker.nodes) != scenario.nodes:
        raise _refuse(f"the scenario needs {scenario.nodes} node(s), this broker runs {len(broker.nodes)}; "
                      f"serve it with `eosbroker serve --scenario {scenario.name}`", "nodes")
    for key, value in scenario.settings.items():
        if broker.config[key] != value:
            raise _refuse(f"the scenario needs {key}={value}, this broker runs {broker.config[key]}; "
                          f"serve it with `eosbroker serve --scenario {scenario.name}`", f"settings.{key}")
    steps = [("setup", i, s) for i, s in enumerate(scenario.setup)]
    steps += [(f"triggers[{t}].do", i, s) for t, trig in enumerate(scenario.triggers) for i, s in enumerate(trig.do)]
    for i, f in enumerate(scenario.faults):
        if f.get("api_key") is not None and broker.apis.get(f["api_key"]) is None:
            raise _refuse(f"this broker (profile {broker.apis.profile}) serves no API {f['api_key']}",
                          f"faults[{i}].api_key", 400)
    for where, i, step in steps:
        if step.op == "clock_advance" and not hasattr(broker.clock, "advance"):
            raise _refuse("this broker's clock cannot be moved (serve it with --admin-port or --scenario)",
                          f"{where}[{i}].op")
    for t, trig in enumerate(scenario.triggers):
        if broker.apis.get(trig.when.api_key) is None:
            raise _refuse(f"this broker (profile {broker.apis.profile}) serves no API {trig.when.api_key}",
                          f"triggers[{t}].when.api", 400)


async def load_into(control, scenario: Scenario) -> LoadedScenario:
    """Replaces the broker's scenario (its rules and triggers) with ``scenario``."""
    broker = control.broker
    check_fits(broker, scenario)
    await unload(control)
    loaded = LoadedScenario(scenario, Triggers(control, scenario.triggers))
    try:
        for i, fault in enumerate(scenario.faults):
            try:
                loaded.fault_rule_ids.append(control.fault_add(**fault)["id"])
            except ControlError as e:
                raise ControlError(e.message, f"faults[{i}]" + (f".{e.field}" if e.field else ""), e.status) from None
        for i, step in enumerate(scenario.setup):
            try:
                await control.call(step.op, step.args, by="scenario setup")
            except ControlError as e:
                raise ControlError(e.message, f"setup[{i}]" + (f".{e.field}" if e.field else ""), e.status) from None
    except BaseException:
        for rule_id in loaded.fault_rule_ids:
            broker.faults.remove(rule_id)
        raise
    broker.scenario = loaded
    broker.triggers = loaded.triggers if loaded.triggers.triggers else None
    log.warning("scenario %r loaded: %d fault rules, %d setup steps, %d triggers", scenario.name,
                len(scenario.faults), len(scenario.setup), len(scenario.triggers))
    return loaded


async def unload(control) -> str | None:
    """Removes the loaded scenario's fault rules and triggers; returns its name."""
    broker = control.broker
    loaded = getattr(broker, "scenario", None)
    if loaded is None:
        return None
    broker.triggers = None
    broker.scenario = None
    for rule_id in loaded.fault_rule_ids:
        broker.faults.remove(rule_id)
    await loaded.triggers.close()
    log.warning("scenario %r unloaded", loaded.scenario.name)
    return loaded.scenario.name
