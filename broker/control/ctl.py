"""``eosbroker ctl``: the control API from the command line.

    eosbroker ctl --admin http://127.0.0.1:PORT cluster
    eosbroker ctl --admin URL node stop|kill|pause|resume|start|remove ID
    eosbroker ctl --admin URL node add [ID] [--port PORT]
    eosbroker ctl --admin URL partition move TOPIC PARTITION --leader ID [--replicas 1,2,3]
    eosbroker ctl --admin URL partition truncate TOPIC PARTITION OFFSET [--leader ID] | producers TOPIC PARTITION
        | forget-producer TOPIC PARTITION PRODUCER_ID
    eosbroker ctl --admin URL network cut|link|heal SOURCE [--target ID] [--both] [--delay-ms 200] [--loss 0.1 --seed 7]
    eosbroker ctl --admin URL coordinator move --transactional-id ID|--group-id ID --to NODE
    eosbroker ctl --admin URL leaders elect|shuffle
    eosbroker ctl --admin URL clock show|advance 7d
    eosbroker ctl --admin URL fault add --do drop_response --api-key 0 --count 1 | list | remove ID | release ID | clear
    eosbroker ctl --admin URL scenario list | show NAME | load NAME|FILE | state | unload
    eosbroker ctl --admin URL transactions list | abort TRANSACTIONAL_ID
"""

from __future__ import annotations

import json

import click

from broker.control.api_client import ControlClient, ControlRefused


@click.group()
@click.option("--admin", envvar="EOSBROKER_ADMIN", required=True, metavar="URL",
              help="the control API, e.g. http://127.0.0.1:9644 (env EOSBROKER_ADMIN)")
@click.option("--token", envvar="EOSBROKER_ADMIN_TOKEN", default=None, help="bearer token (env EOSBROKER_ADMIN_TOKEN)")
@click.option("--ca", envvar="EOSBROKER_ADMIN_CA", default=None, type=click.Path(exists=True, dir_okay=False),
              help="for an https control API: the CA (PEM) its certificate is checked against, e.g. eosbroker "
                   "certs' ca.crt (env EOSBROKER_ADMIN_CA)")
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON answer")
@click.pass_context
def ctl(ctx, admin: str, token: str | None, ca: str | None, as_json: bool) -> None:
    """Drive a running eosbroker through its control API (serve --admin-port)."""
    ctx.obj = (ControlClient(admin, token, ca=ca), as_json)


def _run(ctx, name: str, show=None, **args) -> None:
    client, as_json = ctx.obj
    try:
        answer = client.call(name, **args)
    except ControlRefused as e:
        raise click.ClickException(f"refused ({e.status}): {e.message}" + (f" [field: {e.field}]" if e.field else ""))
    except OSError as e:
        raise click.ClickException(f"cannot reach {client.url}: {e}") from None
    if as_json or show is None:
        click.echo(json.dumps(answer, indent=2))
    else:
        show(answer)


def _show_moves(answer: dict) -> None:
    if "node" in answer:
        n = answer["node"]
        click.echo(f"node {n['node_id']} ({n['host']}:{n['port']}): {n['state']}")
    moved = answer.get("moved", [answer] if "leader" in answer else [])
    for m in moved:
        click.echo(f"  {m['topic']}-{m['partition']}: leader {m['leader']} epoch {m['leader_epoch']} "
                   f"replicas {m['replicas']} isr {m['isr']}")
    if not moved:
        click.echo("  no leader changed")


def _table(rows: list[list], header: list[str]) -> None:
    cells = [header, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@ctl.command()
@click.option("--all", "show_internal", is_flag=True, help="also list the coordinator topics' partitions")
@click.pass_context
def cluster(ctx, show_internal: bool) -> None:
    """Nodes, partition leaders, ISRs and coordinators as tables."""

    def show(c: dict) -> None:
        click.echo(f"cluster {c['cluster_id']}, controller {c['controller_id']}\n")
        coordinators: dict[int, list[int]] = {}
        for entry in c["coordinators"]:
            counts = coordinators.setdefault(entry["node_id"], [0, 0])
            counts[0 if entry["kind"] == "transaction" else 1] += 1
        _table([[n["node_id"], f"{n['host']}:{n['port']}", n["state"] + (" (fenced)" if n.get("fenced") else ""),
                 sum(1 for p in c["partitions"] if p["leader"] == n["node_id"]),
                 *coordinators.get(n["node_id"], [0, 0])] for n in c["nodes"]],
               ["NODE", "ADDRESS", "STATE", "LEADS", "TXN-COORD", "GROUP-COORD"])
        rows = [[p["topic"], p["partition"], p["leader"], p["leader_epoch"], ",".join(map(str, p["replicas"])),
                 ",".join(map(str, p["isr"]))] for p in c["partitions"]
                if show_internal or not p["topic"].startswith("__")]
        if rows:
            click.echo()
            _table(rows, ["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR"])

    _run(ctx, "cluster", show)


@ctl.command()
@click.argument("action", type=click.Choice(["stop", "kill", "pause", "resume", "start", "add", "remove"]))
@click.argument("node_id", type=int, required=False)
@click.option("--port", type=int, default=None, help="for add: the new node's port (a free one when absent)")
@click.pass_context
def node(ctx, action: str, node_id: int | None, port: int | None) -> None:
    """Stop, kill, pause, resume, start or remove node ID; add a node (ID optional)."""
    if node_id is None and action != "add":
        raise click.UsageError(f"node {action} needs the node's id")
    if port is not None and action != "add":
        raise click.UsageError("--port is for node add")
    if action == "add":
        _run(ctx, "node_add", _show_moves, node_id=node_id, port=port)
    else:
        _run(ctx, f"node_{action}", _show_moves, node_id=node_id)


@ctl.group()
def partition() -> None:
    """Partition leadership and replicas."""


@partition.command("move")
@click.argument("topic")
@click.argument("partition_index", metavar="PARTITION", type=int)
@click.option("--leader", type=int, default=None, help="the new leader")
@click.option("--replicas", default=None, help="the new replicas, e.g. 2,3,1")
@click.pass_context
def partition_move(ctx, topic: str, partition_index: int, leader: int | None, replicas: str | None) -> None:
    """Move a partition's leader and/or replicas."""
    try:
        replica_list = None if replicas is None else [int(r) for r in replicas.split(",") if r.strip()]
    except ValueError:
        raise click.BadParameter(f"not a comma-separated list of node ids: {replicas!r}", param_hint="--replicas")
    _run(ctx.parent, "partition_move", _show_moves, topic=topic, partition=partition_index, leader=leader,
         replicas=replica_list)


@partition.command("truncate")
@click.argument("topic")
@click.argument("partition_index", metavar="PARTITION", type=int)
@click.argument("offset", type=int)
@click.option("--leader", type=int, default=None, help="the replica that becomes leader")
@click.pass_context
def partition_truncate(ctx, topic: str, partition_index: int, offset: int, leader: int | None) -> None:
    """Lose the records from OFFSET on, as an unclean leader election does."""
    _run(ctx.parent, "partition_truncate", topic=topic, partition=partition_index, offset=offset, leader=leader)


@partition.command("producers")
@click.argument("topic")
@click.argument("partition_index", metavar="PARTITION", type=int)
@click.pass_context
def partition_producers(ctx, topic: str, partition_index: int) -> None:
    """The partition's producer state."""
    _run(ctx.parent, "producers", topic=topic, partition=partition_index)


@partition.command("forget-producer")
@click.argument("topic")
@click.argument("partition_index", metavar="PARTITION", type=int)
@click.argument("producer_id", type=int)
@click.pass_context
def partition_forget_producer(ctx, topic: str, partition_index: int, producer_id: int) -> None:
    """Delete a producer id's state on the partition."""
    _run(ctx.parent, "producer_state_delete", topic=topic, partition=partition_index, producer_id=producer_id)


@ctl.group()
def network() -> None:
    """Faults on the links between nodes (markers, replication)."""


def _link_args(target, both) -> dict:
    return {"target": target, "both": True if both else None}


@network.command("cut")
@click.argument("source", type=int)
@click.option("--target", type=int, default=None, help="only the link to this node")
@click.option("--both", is_flag=True, help="the link back too")
@click.pass_context
def network_cut(ctx, source: int, target: int | None, both: bool) -> None:
    """Cut the link from SOURCE (to --target, or every node)."""
    _run(ctx.parent, "network_cut", source=source, **_link_args(target, both))


@network.command("link")
@click.argument("source", type=int)
@click.option("--target", type=int, default=None, help="only the link to this node")
@click.option("--delay-ms", default=None, help="delay each message: milliseconds, or 200ms, 2s")
@click.option("--loss", type=float, default=None, help="lose each message with this probability")
@click.option("--seed", type=int, default=None, help="seed of the loss draws")
@click.option("--both", is_flag=True, help="the link back too")
@click.pass_context
def network_link(ctx, source: int, target: int | None, delay_ms: str | None, loss: float | None,
                 seed: int | None, both: bool) -> None:
    """Delay or make lossy the link from SOURCE (to --target, or every node)."""
    if delay_ms is not None and delay_ms.strip().isdigit():
        delay_ms = int(delay_ms)
    _run(ctx.parent, "network_link", source=source, delay_ms=delay_ms, loss=loss, seed=seed,
         **_link_args(target, both))


@network.command("heal")
@click.argument("source", type=int, required=False)
@click.option("--target", type=int, default=None, help="only the link to this node")
@click.option("--both", is_flag=True, help="the link back too")
@click.pass_context
def network_heal(ctx, source: int | None, target: int | None, both: bool) -> None:
    """Heal every link fault, or those from SOURCE (to --target)."""
    _run(ctx.parent, "network_heal", source=source, **_link_args(target, both))


@ctl.group()
def coordinator() -> None:
    """Transaction and group coordinators."""


@coordinator.command("move")
@click.option("--transactional-id", default=None)
@click.option("--group-id", default=None)
@click.option("--to", "to", type=int, required=True, help="the node that becomes the coordinator")
@click.pass_context
def coordinator_move(ctx, transactional_id: str | None, group_id: str | None, to: int) -> None:
    """Move the coordinator of a transactional id or a group to a node."""
    _run(ctx.parent, "coordinator_move", _show_moves, transactional_id=transactional_id, group_id=group_id, to=to)


@ctl.command()
@click.argument("action", type=click.Choice(["elect", "shuffle"]))
@click.pass_context
def leaders(ctx, action: str) -> None:
    """Preferred leader election, or shuffle the leaders."""
    _run(ctx, f"leaders_{action}", _show_moves)


@ctl.command()
@click.argument("action", type=click.Choice(["show", "advance"]))
@click.argument("by", required=False)
@click.pass_context
def clock(ctx, action: str, by: str | None) -> None:
    """Show the broker's clock, or move it forward: ctl clock advance 7d."""
    if action == "show":
        _run(ctx, "clock")
        return
    if by is None:
        raise click.UsageError("clock advance needs a duration, e.g. 7d, 2h, 30s")
    _run(ctx, "clock_advance", by=by)


@ctl.command()
@click.argument("action", type=click.Choice(["add", "list", "remove", "release", "clear"]))
@click.argument("rule_id", required=False, type=int)
@click.option("--do", "do", help="delay | drop_response | close_after | close_before | error | hold (for add)")
@click.option("--api-key", type=int, default=None)
@click.option("--min-version", type=int, default=None, help="only this API version or newer")
@click.option("--max-version", type=int, default=None, help="only this API version or older")
@click.option("--node", "node_id", type=int, default=None)
@click.option("--client-id", default=None)
@click.option("--transactional-id", default=None)
@click.option("--producer-id", type=int, default=None)
@click.option("--group-id", default=None)
@click.option("--topic", default=None)
@click.option("--partition", type=int, default=None)
@click.option("--error", default=None, help="for --do error: NOT_ENOUGH_REPLICAS, or the code")
@click.option("--delay-ms", default=None, help="for --do delay: milliseconds, or 500ms, 2s")
@click.option("--skip", type=int, default=None, help="let this many matching requests through first")
@click.option("--count", type=int, default=None, help="fire at most this many times")
@click.option("--nth", type=int, default=None, help="fire only on the nth matching request")
@click.option("--probability", type=float, default=None, help="fire with this probability (0 < p <= 1)")
@click.option("--seed", type=int, default=None, help="seed of the probability draws")
@click.pass_context
def fault(ctx, action: str, rule_id: int | None, do: str | None, delay_ms: str | None, **match) -> None:
    """Request fault rules: add --do error --api-key 0 --topic T --error NOT_ENOUGH_REPLICAS | list |
    remove ID | release ID | clear."""
    if action == "list":
        _run(ctx, "faults")
    elif action == "clear":
        _run(ctx, "faults_clear")
    elif action in ("remove", "release"):
        if rule_id is None:
            raise click.UsageError(f"fault {action} needs the rule's id")
        _run(ctx, f"fault_{action}", rule_id=rule_id)
    else:
        if do is None:
            raise click.UsageError("fault add needs --do ACTION")
        if delay_ms is not None:
            match["delay_ms"] = int(delay_ms) if delay_ms.strip().isdigit() else delay_ms
        _run(ctx, "fault_add", action=do, **{k: v for k, v in match.items() if v is not None})


@ctl.command()
@click.argument("action", type=click.Choice(["list", "show", "load", "state", "unload"]))
@click.argument("scenario", required=False, metavar="NAME|FILE")
@click.pass_context
def scenario(ctx, action: str, scenario: str | None) -> None:
    """Scenarios: list | show NAME | load NAME|FILE | state | unload."""
    if action in ("show", "load") and scenario is None:
        raise click.UsageError(f"scenario {action} needs a catalogue name" + (" or a file" if action == "load" else ""))
    if action == "list":
        _run(ctx, "scenarios", lambda a: _table([[s["name"], s["nodes"], s["title"]] for s in a["catalogue"]],
                                                ["NAME", "NODES", "TITLE"]))
    elif action == "show":
        _run(ctx, "scenario_show", lambda a: click.echo(a["toml"], nl=False), scenario=scenario)
    elif action == "state":
        _run(ctx, "scenario")
    elif action == "unload":
        _run(ctx, "scenario_unload")
    else:
        from pathlib import Path

        path = Path(scenario)
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise click.BadParameter(f"cannot read {scenario}: {e}", param_hint="NAME|FILE") from None
            _run(ctx, "scenario_load", _show_loaded, toml=text)
        else:
            _run(ctx, "scenario_load", _show_loaded, scenario=scenario)


@ctl.command()
@click.argument("action", type=click.Choice(["list", "abort"]))
@click.argument("transactional_id", required=False)
@click.pass_context
def transactions(ctx, action: str, transactional_id: str | None) -> None:
    """Transactions: list | abort TRANSACTIONAL_ID (fences its producer and aborts its open transaction)."""
    if action == "list":
        if transactional_id is not None:
            raise click.UsageError("transactions list takes no transactional id")
        _run(ctx, "transactions", lambda a: _table(
            [[t["transactional_id"], t["state"], t["producer_id"], t["producer_epoch"], t["timeout_ms"],
              "" if t["age_ms"] is None else t["age_ms"], ",".join(t["partitions"])]
             for t in a["transactions"]],
            ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "TIMEOUT-MS", "AGE-MS", "PARTITIONS"]))
        return
    if transactional_id is None:
        raise click.UsageError("transactions abort needs the transactional id")
    _run(ctx, "transaction_abort", lambda a: click.echo(
        f"aborted: {a['transactional_id']} is {a['state']}, producer id {a['producer_id']} "
        f"fenced at epoch {a['producer_epoch']} (coordinator {a['coordinator']})"), transactional_id=transactional_id)


def _show_loaded(answer: dict) -> None:
    s = answer["loaded"]
    click.echo(f"scenario {s['name']} loaded: {s['title']}")
    click.echo(f"  {len(s['fault_rule_ids'])} fault rule(s), {len(s['setup'])} setup step(s), "
               f"{len(s['triggers'])} trigger(s)")
