"""Scenarios: incidents as data files (settings, fault rules, triggers) that a running
broker loads, and the catalogue that ships with eosbroker (``catalogue/*.toml``, one
page each in docs/scenarios/).

``eosbroker serve --scenario NAME|FILE`` starts a broker with a scenario's settings and
loads it; ``eosbroker ctl scenario load NAME|FILE`` (the ``scenario_load`` control
operation) loads one into a running broker whose settings already match.
"""

from broker.faults.scenarios.format import Scenario, ScenarioError, parse
from broker.faults.scenarios.loader import catalogue, load_into, read_scenario, unload

__all__ = ["Scenario", "ScenarioError", "catalogue", "load_into", "parse", "read_scenario", "unload"]
