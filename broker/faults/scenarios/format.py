"""The scenario file format (TOML), read and checked in full before anything runs.

    name = "coordinator-dies-after-prepare-commit"
    title = "The coordinator's node dies after PREPARE_COMMIT"
    summary = "..."
    nodes = 3                              # node.count the scenario needs

    [settings]                             # broker settings, Kafka names
    "transaction.abort.timed.out.transaction.cleanup.interval.ms" = 500

    [[faults]]                             # request fault rules (the fault_add operation)
    action = "drop_response"
    api = "Produce"                        # a name or an API key
    count = 1

    [[setup]]                              # control operations run once, at load
    op = "network_cut"
    source = 1

    [[triggers]]                           # control operations run when a request matches
    when = { api = "EndTxn", committed = true, transactional_id = "app-1", at = "arrival" }
    do = [{ op = "network_cut", source = "$node" }]

A trigger's ``when`` names the API and, optionally, ``at`` ("arrival": before the
request is handled, or "answer": after, before its answer leaves), ``node_id``,
``client_id``, ``nth`` (only the Nth match) or ``skip``/``count`` (default: the first
match only; ``repeat = true``: every match), and any top-level field of that API's
request (``transactional_id``, ``committed``, ``group_id``, ...). Its ``do`` is a list of
control operations with their arguments; ``"$node"`` stands for the node the request
arrived at. Unknown keys, unknown operations or fields, ill-typed values and bad
durations raise ScenarioError naming the field (``triggers[1].when.commited``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from broker.config import SETTINGS, ConfigError, BrokerConfig, closest
from broker.control.operations import OPERATIONS_BY_NAME, ControlError, check_args, parse_duration_ms

NODE_PLACEHOLDER = "$node"
OLD_VERSIONS_PREFIX = "v3_and_below_"
# Operations a scenario may not run from inside itself.
_NOT_FROM_SCENARIOS = {"scenarios", "scenario_show", "scenario", "scenario_load", "scenario_unload"}
_TOP_KEYS = {"name", "title", "summary", "nodes", "settings", "faults", "setup", "triggers"}
_WHEN_KEYS = {"api", "at", "node_id", "client_id", "nth", "skip", "count", "repeat"}
AT = ("arrival", "answer")


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; ``field`` is where (``triggers[0].when.api``)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Step:
    """One control operation and its (checked) arguments; may hold "$node"."""

    op: str
    args: dict[str, Any]

    def describe(self) -> dict:
        return {"op": self.op} | self.args


@dataclass(frozen=True)
class When:
    api_key: int
    at: str = "arrival"
    node_id: int | None = None
    client_id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    skip: int = 0
    count: int | None = 1  # None: every match

    def describe(self) -> dict:
        from protocol.request_wire import api_name

        out = {"api": api_name(self.api_key), "at": self.at, "skip": self.skip, "count": self.count}
        if self.node_id is not None:
            out["node_id"] = self.node_id
        if self.client_id is not None:
            out["client_id"] = self.client_id
        return out | self.fields


@dataclass(frozen=True)
class TriggerSpec:
    when: When
    do: tuple[Step, ...]

    def describe(self) -> dict:
        return {"when": self.when.describe(), "do": [s.describe() for s in self.do]}


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    summary: str
    nodes: int
    settings: dict[str, Any]  # typed values
    faults: tuple[dict[str, Any], ...]
    setup: tuple[Step, ...]
    triggers: tuple[TriggerSpec, ...]
    source: str = ""  # the file's text

    def describe(self) -> dict:
        return {"name": self.name, "title": self.title, "summary": self.summary, "nodes": self.nodes,
                "settings": {k: _jsonable(v) for k, v in self.settings.items()},
                "faults": [dict(f) for f in self.faults], "setup": [s.describe() for s in self.setup],
                "triggers": [t.describe() for t in self.triggers]}


def _jsonable(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) or v is None else str(v)


# -- parsing -------------------------------------------------------------------------------


def parse(text: str, origin: str = "scenario") -> Scenario:
    """The scenario in ``text``; ScenarioError naming the field on anything wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{origin} is not valid TOML: {e}") from None
    _no_unknown(data, _TOP_KEYS, "")
    name = _string(data, "name", "", required=True)
    nodes = data.get("nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 64:
        raise ScenarioError("must be an integer from 1 to 64", "nodes")
    settings = _settings(data.get("settings", {}))
    if "node.count" in settings:
        raise ScenarioError("give the node count as the top-level 'nodes'", "settings.node.count")
    faults = tuple(_fault(f, f"faults[{i}]", nodes) for i, f in enumerate(_tables(data, "faults")))
    setup = tuple(_step(s, f"setup[{i}]", nodes, placeholders=False) for i, s in enumerate(_tables(data, "setup")))
    triggers = tuple(_trigger(t, f"triggers[{i}]", nodes) for i, t in enumerate(_tables(data, "triggers")))
    return Scenario(name, _string(data, "title", "") or name, _string(data, "summary", "") or "", nodes, settings,
                    faults, setup, triggers, text)


def _no_unknown(table: dict, known: set[str], where: str) -> None:
    for key in table:
        if key not in known:
            raise ScenarioError(f"unknown key (known: {', '.join(sorted(known))})", _join(where, key))


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _string(table: dict, key: str, where: str, required: bool = False) -> str | None:
    value = table.get(key)
    if value is None:
        if required:
            raise ScenarioError("is required", _join(where, key))
        return None
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError("must be a non-empty string", _join(where, key))
    return value


def _tables(data: dict, key: str) -> list[dict]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ScenarioError(f"must be an array of tables ([[{key}]])", key)
    return value


def _settings(table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ScenarioError("must be a table of Kafka setting names", "settings")
    out = {}
    for key, raw in table.items():
        if key not in SETTINGS:
            suggestion = closest(key, SETTINGS)
            raise ScenarioError(f"unknown setting; did you mean {suggestion!r}?" if suggestion
                                else "unknown setting (eosbroker settings lists them)", f"settings.{key}")
        if isinstance(raw, (dict, list)):
            raise ScenarioError("must be a string, number or boolean", f"settings.{key}")
        try:
            out[key] = BrokerConfig().parse(key, str(raw).lower() if isinstance(raw, bool) else raw)
        except ConfigError as e:
            raise ScenarioError(str(e), f"settings.{key}") from None
    return out


@cache
def _api_keys() -> dict[str, int]:
    from protocol.request_wire import KAFKA_4_0

    return {name.lower(): key for key, (name, *_rest) in KAFKA_4_0.items()}


def _api(value: Any, where: str) -> int:
    from protocol.request_wire import KAFKA_4_0

    if isinstance(value, str):
        key = _api_keys().get(value.lower())
        if key is None:
            raise ScenarioError(f"unknown API {value!r}", where)
        return key
    if isinstance(value, bool) or not isinstance(value, int) or value not in KAFKA_4_0:
        raise ScenarioError(f"must be an API name (Produce, EndTxn, ...) or key, not {value!r}", where)
    return value


def _check(op_name: str, raw: dict, where: str, nodes: int, placeholders: bool) -> dict[str, Any]:
    """``raw`` checked as the arguments of ``op_name`` (the control API's own checks);
    node fields must name a node of the scenario, or be "$node" where allowed."""
    op = OPERATIONS_BY_NAME[op_name]
    node_fields = {p.name for p in op.params if p.type == "integer" and _is_node_param(p.name)}
    deferred = {}
    checkable = {}
    for key, value in raw.items():
        if key in node_fields and value == NODE_PLACEHOLDER:
            if not placeholders:
                raise ScenarioError(f"{NODE_PLACEHOLDER} only means something in a trigger's do", _join(where, key))
            deferred[key] = value
        else:
            checkable[key] = value
    try:
        args = check_args(op, checkable | {k: 1 for k in deferred})
    except ControlError as e:
        raise ScenarioError(e.message, _join(where, e.field) if e.field else where) from None
    for key in node_fields & set(args):
        if key not in deferred and not 1 <= args[key] <= nodes:
            raise ScenarioError(f"no node {args[key]} in a scenario of {nodes} node(s)", _join(where, key))
    if op_name == "clock_advance":
        try:
            parse_duration_ms(args["by"])
        except ValueError:
            raise ScenarioError(f"must be a duration like 500ms, 30s, 15m, 2h or 7d, not {args['by']!r}",
                                _join(where, "by")) from None
    return args | deferred


def _is_node_param(name: str) -> bool:
    return name in ("node_id", "source", "target", "to", "leader")


def _fault(raw: dict, where: str, nodes: int) -> dict[str, Any]:
    raw = dict(raw)
    if "api" in raw:
        if "api_key" in raw:
            raise ScenarioError("give api or api_key, not both", _join(where, "api"))
        raw["api_key"] = _api(raw.pop("api"), _join(where, "api"))
    return _check("fault_add", raw, where, nodes, placeholders=False)


def _step(raw: dict, where: str, nodes: int, placeholders: bool) -> Step:
    raw = dict(raw)
    op = raw.pop("op", None)
    if not isinstance(op, str):
        raise ScenarioError("each step names its control operation: op = \"node_pause\"", _join(where, "op"))
    if op not in OPERATIONS_BY_NAME or op in _NOT_FROM_SCENARIOS:
        known = sorted(set(OPERATIONS_BY_NAME) - _NOT_FROM_SCENARIOS)
        raise ScenarioError(f"unknown operation {op!r} (known: {', '.join(known)})", _join(where, "op"))
    if op == "fault_add" and "api" in raw:
        raw["api_key"] = _api(raw.pop("api"), _join(where, "api"))
    return Step(op, _check(op, raw, where, nodes, placeholders))


def _trigger(raw: dict, where: str, nodes: int) -> TriggerSpec:
    _no_unknown(raw, {"when", "do"}, where)
    when_raw = raw.get("when")
    if not isinstance(when_raw, dict):
        raise ScenarioError("is required: a table such as { api = \"EndTxn\", committed = true }",
                            _join(where, "when"))
    do_raw = raw.get("do")
    if not isinstance(do_raw, list) or not do_raw or not all(isinstance(s, dict) for s in do_raw):
        raise ScenarioError("is required: a list of steps such as [{ op = \"node_pause\", node_id = \"$node\" }]",
                            _join(where, "do"))
    when = _when(when_raw, _join(where, "when"), nodes)
    do = tuple(_step(s, f"{where}.do[{i}]", nodes, placeholders=True) for i, s in enumerate(do_raw))
    return TriggerSpec(when, do)


def _when(raw: dict, where: str, nodes: int) -> When:
    if "api" not in raw:
        raise ScenarioError("is required", _join(where, "api"))
    api_key = _api(raw["api"], _join(where, "api"))
    request_fields = request_field_types(api_key)
    for key in raw:
        if key not in _WHEN_KEYS and key not in request_fields:
            from protocol.request_wire import api_name

            raise ScenarioError(f"neither a trigger key ({', '.join(sorted(_WHEN_KEYS))}) nor a field of "
                                f"{api_name(api_key)} requests ({', '.join(sorted(request_fields))})",
                                _join(where, key))
    at = raw.get("at", "arrival")
    if at not in AT:
        raise ScenarioError(f"must be one of {', '.join(AT)}", _join(where, "at"))
    node_id = _int(raw, "node_id", where, 1, nodes)
    client_id = _string(raw, "client_id", where)
    nth, skip, count = (_int(raw, k, where, 1 if k != "skip" else 0) for k in ("nth", "skip", "count"))
    repeat = raw.get("repeat", False)
    if not isinstance(repeat, bool):
        raise ScenarioError("must be true or false", _join(where, "repeat"))
    if nth is not None and (skip is not None or count is not None or repeat):
        raise ScenarioError("nth means the Nth match only: give it alone, without skip, count or repeat",
                            _join(where, "nth"))
    if repeat and count is not None:
        raise ScenarioError("repeat fires on every match: give it without count", _join(where, "repeat"))
    if nth is not None:
        skip, count = nth - 1, 1
    fields = {}
    for key, value in raw.items():
        if key in _WHEN_KEYS:
            continue
        kind = request_fields[key]
        if kind is None or isinstance(value, (dict, list)) or not _fits(value, kind):
            raise ScenarioError(f"must be a {kind.__name__ if kind else 'scalar'} (it is compared with the "
                                f"request's field)", _join(where, key))
        fields[key] = value
    return When(api_key, at, node_id, client_id, fields, skip or 0, None if repeat else (count or 1))


def _fits(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _int(raw: dict, key: str, where: str, minimum: int, maximum: int = 2**31 - 1) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ScenarioError(f"must be an integer from {minimum} to {maximum}", _join(where, key))
    return value


@cache
def request_field_types(api_key: int) -> dict[str, type | None]:
    """Top-level request fields of an API in any version it has: name -> bool, int or
    str where a trigger can compare it, None for lists and structures."""
    from protocol.request_wire import KAFKA_4_0
    from protocol.request_wire import request_class

    _, _, low, high = KAFKA_4_0[api_key]
    out: dict[str, type | None] = {}
    for version in range(0, high + 1):
        try:
            cls = request_class(api_key, version)
        except Exception:  # a version kio does not have
            continue
        for f in dataclasses.fields(cls):
            name = f.name.removeprefix(OLD_VERSIONS_PREFIX)  # kio's name for fields later versions moved
            if name in out and out[name] is not None:
                continue
            out[name] = _scalar_type(f.type)
    return out


def _scalar_type(annotation: Any) -> type | None:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    if "tuple" in text or "frozenset" in text:
        return None
    if "bool" in text:
        return bool
    if "str" in text or "TransactionalId" in text or "GroupId" in text or "TopicName" in text:
        return str
    if any(t in text for t in ("int", "i8", "i16", "i32", "i64", "Id", "Epoch", "Ms")):
        return int
    return None
