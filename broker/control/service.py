"""The control service: every operation on the running cluster as one method.

The HTTP API (``broker/control/``), ``eosbroker ctl`` and the Python API
(``broker.control.api_client``) are thin adapters over ``OPERATIONS`` (``broker.control.operations``):
each names a method of ``ControlService``, its HTTP route and its parameters. ``call``
checks the arguments, once; every action is logged with what it changed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker.control import log_browser
from broker.cluster.network import LinkFaults
from broker.control.operations import OPERATIONS_BY_NAME, ControlError, check_args, parse_duration_ms
from protocol.names import CONSUMER_OFFSETS, TRANSACTION_STATE

log = logging.getLogger(__name__)


# Operations on the request fault rules: replication's fetches meet the rules too.
_FAULT_RULE_CHANGES = ("fault_add", "fault_remove", "faults_clear")


class ControlService:
    """Operations on a running ``broker.process.Broker``; every adapter calls ``call``."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._reachability_changed = False

    async def call(self, name: str, raw: dict[str, Any], from_text: bool | set[str] = False,
                   by: str | None = None) -> dict:
        """``by``: who asked, when not a client of the control API (a scenario's
        setup, one of its triggers): the timeline says so."""
        op = OPERATIONS_BY_NAME.get(name)
        if op is None:
            raise ControlError(f"unknown operation {name!r}", status=404)
        args = check_args(op, raw, from_text)
        self._reachability_changed = False
        result = getattr(self, name)(**args)
        if hasattr(result, "__await__"):
            result = await result
        if self._reachability_changed or name in _FAULT_RULE_CHANGES:
            # the followers' next fetches show in what this answers
            await self.broker.replication.settled()
        if op.method == "POST":  # what changed the cluster goes on the timeline
            self.broker.cluster.history.record("control", op=name, args={k: v for k, v in args.items() if v is not None},
                                               **({} if by is None else {"by": by}))
        # What the operation set going (the duties of timers a clock advance fired, tasks
        # it woke) takes its first step before the answer goes out: a client request sent
        # after the answer finds it done.
        await asyncio.sleep(0)
        return result

    # -- nodes ---------------------------------------------------------------------------

    def _node(self, node_id: int):
        node = self.broker.node(node_id)
        if node is None:
            raise ControlError(f"no node {node_id}", "node_id", 404)
        return node

    def _up_nodes(self) -> list:
        return [n for n in self.broker.nodes if n.is_up]

    async def node_stop(self, node_id: int, crash: bool = False) -> dict:
        node = self._node(node_id)
        verb = "kill" if crash else "stop"
        if not node.is_up:
            raise ControlError(f"node {node_id} is already stopped", "node_id", 409)
        if self._up_nodes() == [node]:
            raise ControlError(f"node {node_id} is the last live node; refusing to {verb} it", "node_id", 409)
        moved = await self.broker.stop_node(node_id, crash=crash)
        self._links_changed()
        log.info("control: %s node %d; %s", "killed" if crash else "stopped", node_id, self._moves(moved))
        return {"node": node.info.describe(), "moved": self._describe_moves(moved)}

    async def node_kill(self, node_id: int) -> dict:
        return await self.node_stop(node_id, crash=True)

    def node_pause(self, node_id: int) -> dict:
        node = self._node(node_id)
        if not node.is_up:
            raise ControlError(f"node {node_id} is stopped", "node_id", 409)
        self.broker.pause_node(node_id)
        self._links_changed()  # its followers stop fetching
        log.info("control: paused node %d (requests are read, not answered; fenced after %d ms)",
                 node_id, self.broker.config["broker.session.timeout.ms"])
        return {"node": node.info.describe(), "moved": []}

    def node_resume(self, node_id: int) -> dict:
        node = self._node(node_id)
        if not node.is_up:
            raise ControlError(f"node {node_id} is stopped; start it instead", "node_id", 409)
        moved = self.broker.resume_node(node_id)
        self._links_changed()
        log.info("control: resumed node %d; %s", node_id, self._moves(moved))
        return {"node": node.info.describe(), "moved": self._describe_moves(moved)}

    async def node_add(self, node_id: int | None = None, port: int = 0) -> dict:
        if node_id is not None and self.broker.node(node_id) is not None:
            raise ControlError(f"node {node_id} already exists", "node_id", 409)
        if port > 65535:
            raise ControlError("port must be at most 65535", "port")
        if len(self.broker.nodes) >= 64:
            raise ControlError("a cluster has at most 64 nodes (as --nodes)", "node_id", 409)
        try:
            node = await self.broker.add_node(node_id, port)
        except OSError as e:
            raise ControlError(f"cannot listen on port {port}: {e}", "port", 409) from None
        log.info("control: added node %d listening on %s:%d", node.node_id, node.info.host, node.info.port)
        return {"node": node.info.describe(), "moved": []}

    async def node_remove(self, node_id: int) -> dict:
        from broker.cluster.replication import RemovalRefused

        node = self._node(node_id)
        if len(self.broker.nodes) == 1:
            raise ControlError(f"node {node_id} is the last node; refusing to remove it", "node_id", 409)
        # Up nodes take its place, running ones first; a fenced node is not a candidate.
        others = [n for n in self.broker.nodes if n is not node and n.is_up and not n.info.fenced]
        if node.is_up and not others:
            raise ControlError(f"node {node_id} is the last live node; refusing to remove it", "node_id", 409)
        candidates = [n.node_id for n in sorted(others, key=lambda n: n.info.state != "running")]
        try:
            plan = self.broker.cluster.replicas.plan_removal(node_id, candidates)
        except RemovalRefused as e:
            raise ControlError(str(e), "node_id", 409) from None
        moved = await self.broker.remove_node(node_id, plan)
        log.info("control: removed node %d; moved %d partitions: %s", node_id, len(moved), self._moves(moved))
        return {"node": node.info.describe() | {"state": "removed"}, "moved": self._describe_moves(moved)}

    async def node_start(self, node_id: int) -> dict:
        node = self._node(node_id)
        if node.is_up:
            raise ControlError(f"node {node_id} is already running", "node_id", 409)
        try:
            moved = await self.broker.start_node(node_id)
            self._links_changed()
        except OSError as e:
            raise ControlError(f"node {node_id} cannot listen on port {node.info.port}: {e}", "node_id", 409) from None
        log.info("control: started node %d on port %d; %s", node_id, node.info.port, self._moves(moved))
        return {"node": node.info.describe(), "moved": self._describe_moves(moved)}

    # -- topology ------------------------------------------------------------------------

    def partition_move(self, topic: str, partition: int, leader: int | None = None,
                       replicas: list[int] | None = None) -> dict:
        from broker.cluster.cluster import ReassignmentError

        if leader is None and replicas is None:
            raise ControlError("give leader, replicas or both", "leader")
        before = self.broker.cluster.leadership(topic, partition)
        before = None if before is None else before.describe()
        try:
            state = self.broker.cluster.reassign_partition(topic, partition, replicas, leader)
        except ReassignmentError as e:
            raise ControlError(str(e), e.field, e.status) from None
        log.info("control: moved %s-%d from %s to %s", topic, partition, before, state.describe())
        return {"topic": topic, "partition": partition} | state.describe()

    def _user_partition(self, topic: str, partition: int):
        if topic in (TRANSACTION_STATE, CONSUMER_OFFSETS):
            raise ControlError(f"{topic} is internal: its data-loss faults are not emulated", "topic")
        part = self.broker.cluster.partition(topic, partition)
        if part is None:
            field = "topic" if topic not in self.broker.cluster.topics.by_name else "partition"
            raise ControlError(f"no partition {topic}-{partition}", field, 404)
        return part

    def partition_truncate(self, topic: str, partition: int, offset: int, leader: int | None = None) -> dict:
        part = self._user_partition(topic, partition)
        replicas = self.broker.cluster.replicas
        state = self.broker.cluster.leadership(topic, partition)
        if not part.log_start_offset <= offset < part.high_watermark:
            raise ControlError(f"offset must be from the log start {part.log_start_offset} to below the log end "
                               f"{part.high_watermark}", "offset")
        if leader is not None and (leader not in state.replicas or leader not in replicas.up):
            raise ControlError(f"node {leader} is not a live replica of {topic}-{partition} "
                               f"(replicas {state.replicas})", "leader")
        before_end = part.high_watermark
        end = part.truncate_to(offset)
        if leader is None or not replicas.set_leader(topic, partition, leader, "unclean leader election (fault)"):
            old = state.leader
            state.leader_epoch += 1  # an unclean election: a new epoch even for the same node
            log.info("%s-%d: leader %d, epoch %d (unclean leader election, fault)", topic, partition, old,
                     state.leader_epoch)
            for listener in replicas.listeners:
                listener(topic, partition, old, state)
        replicas.save()
        log.warning("control: truncated %s-%d from log end %d to %d (asked %d): acknowledged records lost",
                    topic, partition, before_end, end, offset)
        return {"topic": topic, "partition": partition, "log_end_offset": end, "lost_from": end,
                "lost_until": before_end} | state.describe()

    def producers(self, topic: str, partition: int) -> dict:
        import dataclasses

        part = self._user_partition(topic, partition)
        return {"topic": topic, "partition": partition,
                "producers": [dataclasses.asdict(d) for d in part.producer_state.describe()]}

    def producer_state_delete(self, topic: str, partition: int, producer_id: int) -> dict:
        part = self._user_partition(topic, partition)
        if not part.producer_state.forget(producer_id):
            raise ControlError(f"{topic}-{partition} has no state for producer id {producer_id}", "producer_id", 404)
        log.warning("control: forgot producer id %d on %s-%d", producer_id, topic, partition)
        return {"topic": topic, "partition": partition, "producer_id": producer_id}

    def coordinator_move(self, to: int, transactional_id: str | None = None, group_id: str | None = None) -> dict:
        if (transactional_id is None) == (group_id is None):
            raise ControlError("give exactly one of transactional_id and group_id",
                               "transactional_id" if transactional_id is None else "group_id")
        if self.broker.node(to) is None:
            raise ControlError(f"no node {to}", "to", 404)
        if not self.broker.node(to).is_up:
            raise ControlError(f"node {to} is stopped", "to", 409)
        topic = TRANSACTION_STATE if transactional_id is not None else CONSUMER_OFFSETS
        self.broker.start_coordinators(topic)
        key_type = 1 if transactional_id is not None else 0
        partition = self.broker.coordinator_partition(transactional_id or group_id, key_type)
        state = self.broker.cluster.leadership(topic, partition)
        replicas = state.replicas if to in state.replicas else [to, *state.replicas[: max(0, len(state.replicas) - 1)]]
        moved = self.partition_move(topic, partition, leader=to,
                                    replicas=None if replicas == state.replicas else replicas)
        return moved | {"coordinator_epoch": state.leader_epoch}

    def leaders_elect(self) -> dict:
        moved = self.broker.cluster.replicas.elect_preferred()
        log.info("control: preferred leader election; %s", self._moves(moved))
        return {"moved": self._describe_moves(moved)}

    def leaders_shuffle(self) -> dict:
        moved = self.broker.cluster.replicas.shuffle()
        log.info("control: shuffled leaders; %s", self._moves(moved))
        return {"moved": self._describe_moves(moved)}

    # -- the network between nodes -------------------------------------------------------

    def _link_keys(self, source: int | None, target: int | None, both: bool) -> list[tuple]:
        for field, node_id in (("source", source), ("target", target)):
            if node_id is not None and self.broker.node(node_id) is None:
                raise ControlError(f"no node {node_id}", field, 404)
        if source is not None and source == target:
            raise ControlError("a link joins two different nodes", "target")
        return [(source, target), (target, source)] if both else [(source, target)]

    def _links_changed(self) -> None:
        self.broker.replication.refresh()
        self._reachability_changed = True

    def network_cut(self, source: int, target: int | None = None, both: bool = False) -> dict:
        for key in self._link_keys(source, target, both):
            self.broker.network.links[key] = LinkFaults(cut=True)
        self._links_changed()
        log.info("control: cut the link from node %d to %s%s", source,
                 "every node" if target is None else f"node {target}", " and back" if both else "")
        return {"links": self._links()}

    def network_link(self, source: int, target: int | None = None, delay_ms: int | None = None,
                     loss: float | None = None, seed: int | None = None, both: bool = False) -> dict:
        if delay_ms is None and loss is None:
            raise ControlError("give delay_ms, loss or both", "delay_ms")
        if delay_ms is not None and delay_ms > 3_600_000:
            raise ControlError("delay_ms is more than an hour", "delay_ms")
        if loss is not None and not 0 <= loss <= 1:
            raise ControlError("loss must be between 0 and 1", "loss")
        if seed is not None and not loss:
            raise ControlError("seed goes with loss", "seed")
        keys = self._link_keys(source, target, both)
        for i, key in enumerate(keys):
            # the other direction draws from its own RNG, seeded one further
            self.broker.network.links[key] = LinkFaults(delay_ms=delay_ms or 0, loss=loss or 0.0,
                                                        seed=None if seed is None else seed + i)
        self._links_changed()
        log.info("control: link from node %d to %s%s: delay %d ms, loss %s", source,
                 "every node" if target is None else f"node {target}", " and back" if both else "",
                 delay_ms or 0, loss or 0)
        return {"links": self._links()}

    def network_heal(self, source: int | None = None, target: int | None = None, both: bool = False) -> dict:
        links = self.broker.network.links
        if source is None and target is None:
            healed = len(links)
            links.clear()
        else:
            if source is None:
                raise ControlError("give source (and target) to heal one link, nothing to heal all", "source")
            keys = self._link_keys(source, target, both)
            healed = sum(links.pop(key, None) is not None for key in keys)
            if not healed:
                raise ControlError(f"no link fault from node {source} to "
                                   f"{'every node' if target is None else f'node {target}'}", "source", 404)
        self._links_changed()
        log.info("control: healed %d link faults", healed)
        return {"links": self._links()}

    # -- request faults ------------------------------------------------------------------

    def faults(self) -> dict:
        return {"rules": [r.describe() for r in self.broker.faults.rules.values()]}

    def fault_add(self, action: str, error: str | None = None, delay_ms: int | None = None, skip: int = 0,
                  count: int | None = None, nth: int | None = None, probability: float | None = None,
                  seed: int | None = None, **match) -> dict:
        from broker.faults.answers import parse_error
        from broker.faults.requests import ACTIONS, Match

        if action not in ACTIONS:
            raise ControlError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}", "action")
        match = Match(**match)
        self._check_match(match)
        if (action == "delay") != (delay_ms is not None):
            raise ControlError("delay_ms goes with action delay, and a delay rule needs it", "delay_ms")
        if delay_ms is not None and not 0 < delay_ms <= 3_600_000:
            raise ControlError("delay_ms must be more than 0 and at most an hour", "delay_ms")
        if (action == "error") != (error is not None):
            raise ControlError("error goes with action error, and an error rule needs it", "error")
        code = None
        if error is not None:
            try:
                code = parse_error(error)
            except ValueError:
                raise ControlError(f"error must be a Kafka error name such as NOT_ENOUGH_REPLICAS or its code, "
                                   f"not {error!r}", "error") from None
        if nth is not None:
            if skip or count is not None:
                raise ControlError("nth cannot be combined with skip or count", "nth")
            skip, count = nth - 1, 1
        if probability is not None and not 0 < probability <= 1:
            raise ControlError("probability must be more than 0 and at most 1", "probability")
        if seed is not None and probability is None:
            raise ControlError("seed goes with probability", "seed")
        rule = self.broker.faults.add(action, match, delay_ms=delay_ms or 0, error=code, skip=skip, count=count,
                                      nth=nth, probability=probability, seed=seed)
        log.info("control: added fault rule %s", rule.describe())
        return rule.describe()

    def _check_match(self, match) -> None:
        """Refuses a match that names an unknown API or node, or that no request can
        satisfy (a version range outside the API's, a topic on an API without topics)."""
        from broker.faults.fields import kinds_named_by

        if match.node_id is not None and self.broker.node(match.node_id) is None:
            raise ControlError(f"no node {match.node_id}", "node_id", 404)
        for name in ("min_version", "max_version"):
            if getattr(match, name) is not None and match.api_key is None:
                raise ControlError(f"{name} needs api_key", name)
        if match.api_key is None:
            return
        api = self.broker.apis.get(match.api_key)
        if api is None:
            raise ControlError(f"this broker serves no API {match.api_key}", "api_key")
        low = max(api.accepted_min, match.min_version if match.min_version is not None else 0)
        high = min(api.max, match.max_version if match.max_version is not None else api.max)
        if low > high:
            raise ControlError(f"{api.name} is served in versions {api.accepted_min}-{api.max}: no request has "
                               f"versions {match.min_version}-{match.max_version}",
                               "min_version" if match.min_version is not None else "max_version")
        kinds = set().union(*(kinds_named_by(match.api_key, v) for v in range(low, high + 1)))
        for name in ("transactional_id", "producer_id", "group_id", "topic", "partition"):
            if getattr(match, name) is not None and name not in kinds:
                raise ControlError(f"{api.name} v{low}-{high} requests never name a {name.replace('_', ' ')}", name)

    def fault_remove(self, rule_id: int) -> dict:
        rule = self.broker.faults.remove(rule_id)
        if rule is None:
            raise ControlError(f"no fault rule {rule_id}", "rule_id", 404)
        log.info("control: removed fault rule %d (fired %d times)", rule_id, rule.fired)
        return rule.describe()

    def fault_release(self, rule_id: int) -> dict:
        rule = self.broker.faults.rules.get(rule_id)
        if rule is None:
            raise ControlError(f"no fault rule {rule_id}", "rule_id", 404)
        if rule.action != "hold":
            raise ControlError(f"fault rule {rule_id} is a {rule.action} rule, not a hold rule", "rule_id", 409)
        released = rule.release()
        log.info("control: released %d requests held by fault rule %d", released, rule_id)
        return rule.describe() | {"released": released}

    def faults_clear(self) -> dict:
        cleared = self.broker.faults.clear()
        log.info("control: cleared %d fault rules", cleared)
        return {"rules": []}

    # -- the clock -----------------------------------------------------------------------

    def log_batches(self, topic: str, partition: int, from_offset: int = 0, max_batches: int = 50) -> dict:
        if (topic, partition) not in set(self.broker.cluster.partition_keys()):
            raise ControlError(f"no partition {topic}-{partition}", "partition", 404)
        stored = self.broker.cluster.partition(topic, partition)
        return {"topic": topic, "partition": partition} | log_browser.batches(
            stored, topic, from_offset, min(max_batches, log_browser.MAX_BATCHES))

    def events(self, since: int = 0, limit: int | None = None) -> dict:
        history = self.broker.cluster.history
        return {"now_ms": self.broker.clock.now_ms(), "next_seq": history.next_seq,
                "size": history.events.maxlen, "events": history.since(since, limit)}

    def clock(self) -> dict:
        clock = self.broker.clock
        return {"now_ms": clock.now_ms(), "offset_ms": getattr(clock, "offset_ms", 0),
                "virtual": hasattr(clock, "advance")}

    def clock_advance(self, by: str) -> dict:
        try:
            ms = parse_duration_ms(by)
        except ValueError:
            raise ControlError(f"by must be a duration like 500ms, 30s, 15m, 2h or 7d, not {by!r}", "by") from None
        if ms > 10 * 365 * 86_400_000:
            raise ControlError("by is more than ten years", "by")
        if not hasattr(self.broker.clock, "advance"):
            raise ControlError("this broker's clock cannot be moved (serve it with --admin-port)", "by", 409)
        fired = self.broker.clock.advance(ms)
        log.info("control: advanced the clock by %s (%d ms)", by, ms)
        return self.clock() | {"timers_fired": fired}

    def _links(self) -> list[dict]:
        return [{"source": s, "target": t} | f.describe() for (s, t), f in self.broker.network.links.items()]

    def _describe_moves(self, moved: list[tuple[str, int]]) -> list[dict]:
        cluster = self.broker.cluster
        return [{"topic": t, "partition": i} | cluster.leadership(t, i).describe() for t, i in moved]

    def _moves(self, moved: list[tuple[str, int]]) -> str:
        if not moved:
            return "no leader changed"
        cluster = self.broker.cluster
        return "new leaders: " + ", ".join(
            f"{t}-{i}->{cluster.leader_of(t, i)}@{cluster.leadership(t, i).leader_epoch}" for t, i in moved)

    # -- transactions --------------------------------------------------------------------

    # The coordinator's answer, as the control API reports it.
    _ABORT_REFUSALS = {
        "transactional_id_not_found": ("has no transaction state", 404),
        "invalid_txn_state": ("has no ongoing transaction", 409),
        "coordinator_load_in_progress": ("has its coordinator still loading", 503),
        "not_coordinator": ("has no coordinator on its leader", 503),
    }

    def transactions(self) -> dict:
        from broker.control import snapshot  # the console's reading of the coordinators

        return {"transactions": snapshot.transactions(self.broker, self.broker.cluster.clock.now_ms())}

    async def transaction_abort(self, transactional_id: str) -> dict:
        node = self.broker.coordinator_node(transactional_id, 1)
        service = None
        if node is not None and node.is_up:
            service = self.broker.node(node.node_id).coordinator_service(TRANSACTION_STATE, create=False)
        if service is None:
            raise ControlError(f"transactional id {transactional_id!r} has no transaction state",
                               "transactional_id", 404)
        coordinator = service.coordinator
        now_ms = self.broker.cluster.clock.now_ms()
        error = await service.run(transactional_id, lambda: coordinator.abort_transaction(transactional_id, now_ms),
                                  lambda refused: refused, reason="fenced")
        if error.name != "none":
            why, status = self._ABORT_REFUSALS.get(error.name, (error.name.upper(), 409))
            raise ControlError(f"transactional id {transactional_id!r} {why}", "transactional_id", status)
        md = coordinator.transaction_metadata(transactional_id)
        log.info("control: aborted the transaction of %r (producer id %d fenced at epoch %d)",
                 transactional_id, md.producer_id, md.producer_epoch)
        return {"transactional_id": transactional_id, "coordinator": node.node_id, "state": md.state.state_name,
                "producer_id": md.producer_id, "producer_epoch": md.producer_epoch}

    # -- scenarios -----------------------------------------------------------------------

    def scenarios(self) -> dict:
        from broker.faults.scenarios import catalogue, parse

        loaded = getattr(self.broker, "scenario", None)
        return {"catalogue": [{k: v for k, v in parse(text, name).describe().items()
                               if k in ("name", "title", "summary", "nodes")}
                              for name, text in catalogue().items()],
                "loaded": None if loaded is None else loaded.scenario.name}

    def scenario_show(self, scenario: str) -> dict:
        from broker.faults.scenarios import catalogue, parse
        from broker.faults.scenarios.loader import unknown_name

        text = catalogue().get(scenario)
        if text is None:
            raise ControlError(unknown_name(scenario), "scenario", 404)
        return parse(text, scenario).describe() | {"toml": text}

    def scenario(self) -> dict:
        loaded = getattr(self.broker, "scenario", None)
        return {"loaded": None} if loaded is None else {"loaded": loaded.describe()}

    async def scenario_load(self, scenario: str | None = None, toml: str | None = None) -> dict:
        from broker.faults.scenarios import ScenarioError, catalogue, load_into, parse
        from broker.faults.scenarios.loader import unknown_name

        if (scenario is None) == (toml is None):
            raise ControlError("give exactly one of scenario and toml", "scenario" if scenario is None else "toml")
        text = toml
        if scenario is not None:
            text = catalogue().get(scenario)
            if text is None:
                raise ControlError(unknown_name(scenario), "scenario", 404)
        try:
            parsed = parse(text, scenario or "toml")
        except ScenarioError as e:
            raise ControlError(e.message, e.field or "toml") from None
        loaded = await load_into(self, parsed)
        return {"loaded": loaded.describe()}

    async def scenario_unload(self) -> dict:
        from broker.faults.scenarios import unload

        return {"unloaded": await unload(self)}

    # -- inspection ----------------------------------------------------------------------

    def cluster(self) -> dict:
        cluster = self.broker.cluster
        return {
            "cluster_id": cluster.cluster_id,
            "controller_id": cluster.controller_id,
            "nodes": [node.describe() for node in cluster.nodes],
            "partitions": [
                {"topic": topic, "partition": index} | cluster.leadership(topic, index).describe()
                for topic, index in sorted(cluster.partition_keys())
            ],
            "coordinators": self._coordinators(),
            "links": self._links(),
        }

    def _coordinators(self) -> list[dict]:
        """Each coordinator partition that exists: the node leading it and whether that
        node's coordinator has it loaded."""
        out = []
        for kind, topic in (("transaction", TRANSACTION_STATE), ("group", CONSUMER_OFFSETS)):
            info = self.broker.cluster.topics.by_name.get(topic)
            for index in range(info.partitions if info else 0):
                leadership = self.broker.cluster.leadership(topic, index)
                node = self.broker.node(leadership.leader)
                service = None if node is None or not node.is_up else node.coordinator_service(topic, create=False)
                out.append({"kind": kind, "partition": index, "node_id": leadership.leader,
                            "coordinator_epoch": leadership.leader_epoch,
                            "state": "not started" if service is None else service.topic.state_of(index)})
        return out
