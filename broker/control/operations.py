"""The control operations: the one table behind the HTTP API (``broker/control/``),
``eosbroker ctl``, the Python API (``broker.control.api_client``), the OpenAPI document and the
scenario files' steps. Each ``Operation`` names a method of
``broker.control.service.ControlService``, its HTTP route and its parameters; ``check_args``
checks arguments, once, and bad ones raise ``ControlError`` naming the field.

A leaf: it imports nothing of the broker, so the scenario format, the console and the
client read the table without loading the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ControlError(Exception):
    """A refused control call: HTTP ``status``, the offending ``field`` (if any)."""

    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status

    def as_json(self) -> dict:
        return {"error": self.message, "field": self.field}


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str  # "integer", "long", "number", "boolean", "string", "duration" or "integer[]"
    where: str = "body"  # "path", "query" or "body"
    required: bool = True
    doc: str = ""
    minimum: int | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    name: str  # the ControlService method, the OpenAPI operationId and the Python API method
    method: str
    path: str
    summary: str
    params: tuple[Param, ...] = ()


_NODE_ID = Param("node_id", "integer", "path", doc="the node's id", minimum=0)

_TOPIC = Param("topic", "string", "path", doc="the topic")
_PARTITION = Param("partition", "integer", "path", doc="the partition index", minimum=0)

OPERATIONS: tuple[Operation, ...] = (
    Operation("cluster", "GET", "/cluster", "Nodes, partition leaders, replicas, ISRs and coordinators"),
    Operation("node_stop", "POST", "/nodes/{node_id}/stop",
              "Stop a node: listener closed, connections reset, its partitions and coordinators fail over",
              (_NODE_ID,)),
    Operation("node_kill", "POST", "/nodes/{node_id}/kill",
              "Kill a node: as stop, without a clean shutdown of its in-memory state", (_NODE_ID,)),
    Operation("node_pause", "POST", "/nodes/{node_id}/pause",
              "Pause a node: its connections stay open, requests are read but not answered until resume",
              (_NODE_ID,)),
    Operation("node_resume", "POST", "/nodes/{node_id}/resume", "Resume a paused node", (_NODE_ID,)),
    Operation("node_start", "POST", "/nodes/{node_id}/start",
              "Start a stopped node on its old port; it rejoins the ISRs", (_NODE_ID,)),
    Operation("node_add", "POST", "/nodes",
              "Add a node with its own listener; it holds no partition until one is moved to it or a new "
              "topic is spread over it",
              (Param("node_id", "integer", required=False, doc="its id; the highest id + 1 when absent", minimum=0),
               Param("port", "integer", required=False, doc="its port; a free one when absent or 0", minimum=0))),
    Operation("node_remove", "POST", "/nodes/{node_id}/remove",
              "Remove a node: its replicas, leaderships and coordinators move to the other nodes first, then "
              "it stops and leaves the cluster (refused if a partition would lose its last in-sync copy)",
              (_NODE_ID,)),
    Operation("partition_move", "POST", "/partitions/{topic}/{partition}/move",
              "Move a partition's leader and/or replicas (the leader epoch goes up)",
              (_TOPIC, _PARTITION,
               Param("leader", "integer", required=False, doc="the new leader (one of the replicas)", minimum=0),
               Param("replicas", "integer[]", required=False, doc="the new replica list", minimum=0))),
    Operation("partition_truncate", "POST", "/partitions/{topic}/{partition}/truncate",
              "Data loss as an unclean leader election causes it: drop the partition's records from offset on "
              "(whole batches; acknowledged acks=1 records included), rebuild its producer state from what is "
              "left, and bump the leader epoch (moving the leader when given)",
              (_TOPIC, _PARTITION,
               Param("offset", "long", doc="the first offset to lose", minimum=0),
               Param("leader", "integer", required=False, doc="the replica that becomes leader", minimum=0))),
    Operation("producers", "GET", "/partitions/{topic}/{partition}/producers",
              "The producer state of a partition, as DescribeProducers tells it", (_TOPIC, _PARTITION)),
    Operation("producer_state_delete", "POST", "/partitions/{topic}/{partition}/producers/{producer_id}/delete",
              "Data loss in the producer state: forget a producer id on one partition (its next batch is judged "
              "as an unknown producer's: UNKNOWN_PRODUCER_ID before KIP-360, accepted after)",
              (_TOPIC, _PARTITION, Param("producer_id", "long", "path", doc="the producer id", minimum=0))),
    Operation("coordinator_move", "POST", "/coordinators/move",
              "Move the coordinator of a transactional id or group to a node (its coordinator partition's "
              "leadership moves, with every id placed on that partition)",
              (Param("transactional_id", "string", required=False, doc="a transactional id"),
               Param("group_id", "string", required=False, doc="a consumer group id"),
               Param("to", "integer", doc="the node that becomes the coordinator", minimum=0))),
    Operation("leaders_elect", "POST", "/leaders/elect",
              "Preferred leader election: every partition led by its first replica where that one is in the ISR"),
    Operation("leaders_shuffle", "POST", "/leaders/shuffle",
              "Give every partition with more than one ISR member a different leader"),
    Operation("network_cut", "POST", "/network/cut",
              "Cut the inter-node link from one node to another (or to every node; both directions with "
              "both=true): markers and the emulated replication fail until healed; clients still reach both nodes",
              (Param("source", "integer", doc="the sending node", minimum=0),
               Param("target", "integer", required=False, doc="the receiving node; all when absent", minimum=0),
               Param("both", "boolean", required=False, doc="the link the other way too"))),
    Operation("network_link", "POST", "/network/link",
              "Slow down or make lossy the inter-node link from one node to another (both directions with "
              "both=true): each message (marker, replica fetch) is delayed by delay_ms and lost with probability "
              "loss, drawn from an RNG seeded by seed",
              (Param("source", "integer", doc="the sending node", minimum=0),
               Param("target", "integer", required=False, doc="the receiving node; all when absent", minimum=0),
               Param("delay_ms", "duration", required=False, doc="milliseconds or 200ms, 2s"),
               Param("loss", "number", required=False, doc="probability a message is lost (0 <= loss <= 1)"),
               Param("seed", "long", required=False, doc="seed of the loss draws (chosen and shown when absent)",
                     minimum=0),
               Param("both", "boolean", required=False, doc="the link the other way too"))),
    Operation("network_heal", "POST", "/network/heal",
              "Remove the inter-node link faults: every one, or those from source (to target; both directions "
              "with both=true)",
              (Param("source", "integer", required=False, doc="the sending node", minimum=0),
               Param("target", "integer", required=False, doc="the receiving node", minimum=0),
               Param("both", "boolean", required=False, doc="the link the other way too"))),
    Operation("faults", "GET", "/faults", "The request fault rules, with how often each matched and fired"),
    Operation("fault_add", "POST", "/faults",
              "Add a request fault rule: requests matching every given field get the action: delay, "
              "drop_response (process, never answer), close_after, close_before, error (answer an error code "
              "without processing, on every partition the request names), hold (until released)",
              (Param("action", "string", doc="delay | drop_response | close_after | close_before | error | hold"),
               Param("api_key", "integer", required=False, doc="only this API", minimum=0),
               Param("min_version", "integer", required=False, doc="only this API version or newer", minimum=0),
               Param("max_version", "integer", required=False, doc="only this API version or older", minimum=0),
               Param("node_id", "integer", required=False, doc="only requests to this node", minimum=0),
               Param("client_id", "string", required=False, doc="only this client id"),
               Param("transactional_id", "string", required=False, doc="only requests naming this transactional id"),
               Param("producer_id", "long", required=False,
                     doc="only requests naming this producer id (in a field or a Produce batch)", minimum=0),
               Param("group_id", "string", required=False, doc="only requests naming this group id"),
               Param("topic", "string", required=False, doc="only requests naming this topic"),
               Param("partition", "integer", required=False,
                     doc="only requests naming this partition (of topic, when given)", minimum=0),
               Param("error", "string", required=False,
                     doc="for error: the Kafka error name (NOT_ENOUGH_REPLICAS) or code (19)"),
               Param("delay_ms", "duration", required=False, doc="for delay: milliseconds or 500ms, 2s, 1m"),
               Param("skip", "integer", required=False, doc="let this many matching requests through first",
                     minimum=0),
               Param("count", "integer", required=False, doc="fire at most this many times (default: until removed)",
                     minimum=1),
               Param("nth", "integer", required=False, doc="fire only on the nth matching request", minimum=1),
               Param("probability", "number", required=False,
                     doc="fire on each eligible request with this probability (0 < p <= 1)"),
               Param("seed", "long", required=False,
                     doc="the seed of the rule's random draws (same seed, same firings; chosen and shown when absent)",
                     minimum=0))),
    Operation("fault_remove", "POST", "/faults/{rule_id}/remove",
              "Remove one request fault rule (requests it holds go on)",
              (Param("rule_id", "integer", "path", doc="the rule's id", minimum=0),)),
    Operation("fault_release", "POST", "/faults/{rule_id}/release",
              "Let the requests a hold rule holds go on (the rule keeps holding later ones until removed)",
              (Param("rule_id", "integer", "path", doc="the rule's id", minimum=0),)),
    Operation("faults_clear", "POST", "/faults/clear", "Remove every request fault rule (held requests go on)"),
    Operation("clock", "GET", "/clock", "The broker's clock: now and how far it was moved forward"),
    Operation("clock_advance", "POST", "/clock/advance",
              "Move the broker's clock forward: timeouts, expirations and retention act as if that time "
              "had passed, timers firing in order (clients keep real time)",
              (Param("by", "string", doc="a duration: 500ms, 30s, 15m, 2h, 7d (or milliseconds)"),)),
    Operation("scenarios", "GET", "/scenarios", "The scenario catalogue shipped with eosbroker, and the loaded one"),
    Operation("scenario_show", "GET", "/scenarios/{scenario}", "One catalogue scenario: its settings, faults, "
              "setup and triggers, and its file",
              (Param("scenario", "string", "path", doc="the scenario's name"),)),
    Operation("scenario", "GET", "/scenario", "The loaded scenario, with how often each trigger matched and fired"),
    Operation("scenario_load", "POST", "/scenario/load",
              "Load a scenario (a catalogue name, or a file's TOML text): checked whole, then its fault rules, "
              "setup steps and triggers replace the loaded scenario's; its settings and node count must "
              "be the broker's (serve --scenario applies them)",
              (Param("scenario", "string", required=False, doc="a catalogue scenario's name"),
               Param("toml", "string", required=False, doc="a scenario file's text"))),
    Operation("scenario_unload", "POST", "/scenario/unload",
              "Remove the loaded scenario's fault rules and triggers"),
    Operation("transactions", "GET", "/transactions",
              "Every transactional id the serving coordinators hold, as DescribeTransactions tells it, "
              "with the age of an open transaction"),
    Operation("transaction_abort", "POST", "/transactions/{transactional_id}/abort",
              "Fence the producer of a transactional id and abort its ongoing transaction now, as its "
              "timeout would (for a transaction that hangs)",
              (Param("transactional_id", "string", "path", doc="the transactional id"),)),
    Operation("log_batches", "GET", "/partitions/{topic}/{partition}/batches",
              "A partition's stored batches from an offset: producer id and epoch, sequences, the transactional "
              "and control flags (COMMIT/ABORT with the coordinator epoch), records (key, value, headers as "
              "hex, text and JSON) and whether a read_committed consumer sees each (visible, aborted, past-lso); "
              "__transaction_state records decoded as dump-log decodes them",
              (_TOPIC, _PARTITION,
               Param("from_offset", "long", "query", required=False, doc="the first offset wanted", minimum=0),
               Param("max_batches", "integer", "query", required=False, doc="at most this many batches (500)",
                     minimum=1))),
    Operation("events", "GET", "/events",
              "The event history behind the console's timeline: transactions' steps (adds, prepares, markers, "
              "outcomes), faults fired, control operations (node stops and pauses, coordinator moves, clock "
              "jumps, with the scenario trigger that made them), high watermark and LSO moves, groups' offsets "
              "(committed, pending in a transaction, deleted), rebalances (their start and end) and groups deleted; "
              "the last emulate.event.history.size of them",
              (Param("since", "long", "query", required=False, doc="the first sequence number wanted", minimum=0),
               Param("limit", "integer", "query", required=False, doc="at most this many, the newest",
                     minimum=1))),
)

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """'7d' -> 604800000; a bare number is milliseconds. ValueError on anything else."""
    text = text.strip().lower()
    for unit in ("ms", "s", "m", "h", "d"):
        if text.endswith(unit) and text[: -len(unit)].strip().isdigit():
            return int(text[: -len(unit)]) * _UNITS_MS[unit]
    if text.isdigit():
        return int(text)
    raise ValueError(text)


OPERATIONS_BY_NAME = {op.name: op for op in OPERATIONS}


def check_args(op: Operation, raw: dict[str, Any], from_text: bool | set[str] = False) -> dict[str, Any]:
    """The arguments of ``op`` from ``raw`` (JSON values; strings for the names in
    ``from_text``, or for all when it is True): missing, unknown or ill-typed ones
    raise ControlError naming the field."""
    text = from_text if isinstance(from_text, set) else (set(raw) if from_text else set())
    known = {p.name for p in op.params}
    for name in raw:
        if name not in known:
            raise ControlError(f"unknown field {name!r}", name)
    args = {}
    for p in op.params:
        if p.name not in raw or raw[p.name] is None:
            if p.required:
                raise ControlError(f"{p.name} is required", p.name)
            continue
        args[p.name] = _check_value(p, raw[p.name], p.name in text)
    return args


def _check_value(p: Param, value: Any, from_text: bool) -> Any:
    if p.type == "integer[]":
        if from_text and isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ControlError(f"{p.name} must be a list of integers", p.name)
        return [_integer(p, v, from_text) for v in value]
    if p.type in ("integer", "long"):
        return _integer(p, value, from_text)
    if p.type == "boolean":
        if from_text and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise ControlError(f"{p.name} must be true or false", p.name)
        return value
    if p.type == "number":
        if from_text and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ControlError(f"{p.name} must be a number, not {value!r}", p.name) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ControlError(f"{p.name} must be a number", p.name)
        return float(value)
    if p.type == "duration":
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        try:
            return parse_duration_ms(value)
        except (ValueError, AttributeError):
            raise ControlError(f"{p.name} must be milliseconds or a duration like 500ms, 2s, 1m, not {value!r}",
                               p.name) from None
    if not isinstance(value, str) or not value:
        raise ControlError(f"{p.name} must be a non-empty string", p.name)
    return value


def _integer(p: Param, value: Any, from_text: bool) -> int:
    if from_text and isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ControlError(f"{p.name} must be an integer, not {value!r}", p.name) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ControlError(f"{p.name} must be an integer", p.name)
    if p.minimum is not None and value < p.minimum:
        raise ControlError(f"{p.name} must be at least {p.minimum}", p.name)
    if value > (2**63 - 1 if p.type == "long" else 2**31 - 1):
        raise ControlError(f"{p.name} is out of range", p.name)
    return value
