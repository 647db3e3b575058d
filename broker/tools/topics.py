"""``eosbroker topics``: create, list, describe and delete topics on any Kafka-compatible
cluster, in the spirit of Kafka's kafka-topics.sh.

Everything goes over the wire with the tools' admin client (broker/tools/admin_client.py):
Metadata, CreateTopics, DeleteTopics and DescribeConfigs, each at the highest version
both sides know.
"""

from __future__ import annotations

import click
from kio.schema.errors import ErrorCode

from broker.tools.admin_client import METADATA, Admin, ToolError, error_name, run_admin
from protocol.answer_wire import request_type
from protocol.client import metadata_request

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32
TOPIC_RESOURCE = 2
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source: set on the topic itself
# The version ranges this tool can speak (it reads only fields these versions share).
SPOKEN = {
    METADATA: (1, 12),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DESCRIBE_CONFIGS: (1, 4),
}
TIMEOUT_MS = 30_000


def parse_configs(items: tuple[str, ...]) -> dict[str, str]:
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--config")
        configs[key.strip()] = value.strip()
    return configs


async def _metadata(admin: Admin, topics: list[str] | None):
    _, response = await admin.request(None, METADATA, metadata_request(topics))
    return response


async def create(admin: Admin, topic: str, partitions: int, replication_factor: int,
                 configs: dict[str, str], if_not_exists: bool) -> str:
    request = request_type(CREATE_TOPICS)
    _, response = await admin.request(None, CREATE_TOPICS, request(timeout_ms=TIMEOUT_MS, validate_only=False, topics=(
        request.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=replication_factor,
                               assignments=(), configs=tuple(request.CreatableTopicConfig(name=k, value=v)
                                                             for k, v in configs.items())),)))
    result = response.topics[0]
    if result.error_code == ErrorCode.topic_already_exists and if_not_exists:
        return f"Topic {topic} already exists."
    if result.error_code != ErrorCode.none:
        raise ToolError(f"cannot create topic {topic}: {error_name(result.error_code)}"
                        + (f" ({result.error_message})" if getattr(result, "error_message", None) else ""))
    return f"Created topic {topic}."


async def list_names(admin: Admin, exclude_internal: bool) -> list[str]:
    response = await _metadata(admin, None)
    return sorted(t.name for t in response.topics
                  if not (exclude_internal and (t.is_internal or t.name.startswith("__"))))


async def describe(admin: Admin, topics: list[str] | None, exclude_internal: bool) -> list[str]:
    response = await _metadata(admin, topics)
    found = sorted(response.topics, key=lambda t: t.name)
    lines = []
    for t in found:
        if t.error_code != ErrorCode.none:
            raise ToolError(f"cannot describe topic {t.name}: {error_name(t.error_code)}")
    found = [t for t in found if topics is not None
             or not (exclude_internal and (t.is_internal or t.name.startswith("__")))]
    configs = await _topic_configs(admin, [t.name for t in found]) if found else {}
    for t in found:
        partitions = sorted(t.partitions, key=lambda p: p.partition_index)
        replication = len(partitions[0].replica_nodes) if partitions else 0
        topic_id = getattr(t, "topic_id", None)
        shown = ",".join(f"{k}={v}" for k, v in sorted(configs.get(t.name, {}).items()))
        lines.append(f"Topic: {t.name}\tTopicId: {topic_id}\tPartitionCount: {len(partitions)}\t"
                     f"ReplicationFactor: {replication}\tConfigs: {shown}")
        for p in partitions:
            lines.append(f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                         f"Replicas: {_ids(p.replica_nodes)}\tIsr: {_ids(p.isr_nodes)}")
    return lines


def _ids(nodes) -> str:
    return ",".join(str(int(n)) for n in nodes)


async def _topic_configs(admin: Admin, names: list[str]) -> dict[str, dict[str, str]]:
    """The configs set on each topic itself (not the broker's defaults)."""
    request = request_type(DESCRIBE_CONFIGS)
    _, response = await admin.request(None, DESCRIBE_CONFIGS, request(
        resources=tuple(request.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=n,
                                                        configuration_keys=None) for n in names),
        include_synonyms=False, include_documentation=False))
    out: dict[str, dict[str, str]] = {}
    for r in response.results:
        if r.error_code != ErrorCode.none:
            raise ToolError(f"cannot describe the configs of topic {r.resource_name}: {error_name(r.error_code)}")
        out[r.resource_name] = {c.name: c.value for c in r.configs if c.config_source == DYNAMIC_TOPIC_CONFIG}
    return out


async def delete(admin: Admin, topic: str, if_exists: bool) -> str:
    request = request_type(DELETE_TOPICS)
    version, response = await admin.request(None, DELETE_TOPICS, request(
        timeout_ms=TIMEOUT_MS, topic_names=(topic,), topics=(request.DeleteTopicState(topic_id=None, name=topic),)))
    result = response.responses[0]
    if result.error_code == ErrorCode.unknown_topic_or_partition and if_exists:
        return f"Topic {topic} does not exist."
    if result.error_code != ErrorCode.none:
        raise ToolError(f"cannot delete topic {topic}: {error_name(result.error_code)}")
    return f"Deleted topic {topic}."


# -- commands ------------------------------------------------------------------------


@click.group("topics")
@click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT",
              help="broker(s) to connect to, comma-separated")
@click.pass_context
def topics(ctx: click.Context, bootstrap: str) -> None:
    """Create, list, describe and delete topics (like kafka-topics.sh)."""
    ctx.obj = bootstrap


def _run(bootstrap: str, command) -> None:
    run_admin(bootstrap, command, spoken=SPOKEN, client_id="eosbroker-topics")


@topics.command("create")
@click.option("--topic", required=True)
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="number of partitions (default: the broker's num.partitions)")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="replicas per partition (default: the broker's default.replication.factor)")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="a topic config; repeatable")
@click.option("--if-not-exists", is_flag=True, help="succeed when the topic already exists")
@click.pass_obj
def create_command(bootstrap: str, topic: str, partitions: int | None, replication_factor: int | None,
                   configs: tuple[str, ...], if_not_exists: bool) -> None:
    """Create a topic."""
    parsed = parse_configs(configs)

    async def command(admin: Admin) -> None:
        click.echo(await create(admin, topic, partitions or -1, replication_factor or -1, parsed, if_not_exists))

    _run(bootstrap, command)


@topics.command("list")
@click.option("--exclude-internal", is_flag=True, help="leave out __consumer_offsets, __transaction_state, ...")
@click.pass_obj
def list_command(bootstrap: str, exclude_internal: bool) -> None:
    """List the names of every topic."""
    async def command(admin: Admin) -> None:
        for name in await list_names(admin, exclude_internal):
            click.echo(name)

    _run(bootstrap, command)


@topics.command("describe")
@click.option("--topic", "names", multiple=True, help="describe only this topic; repeatable (default: all)")
@click.option("--exclude-internal", is_flag=True, help="leave out internal topics when describing all")
@click.pass_obj
def describe_command(bootstrap: str, names: tuple[str, ...], exclude_internal: bool) -> None:
    """Describe topics: partitions, leaders, replicas, ISR and the configs set on them."""
    async def command(admin: Admin) -> None:
        for line in await describe(admin, list(names) or None, exclude_internal):
            click.echo(line)

    _run(bootstrap, command)


@topics.command("delete")
@click.option("--topic", required=True)
@click.option("--if-exists", is_flag=True, help="succeed when the topic does not exist")
@click.pass_obj
def delete_command(bootstrap: str, topic: str, if_exists: bool) -> None:
    """Delete a topic and its data."""
    async def command(admin: Admin) -> None:
        click.echo(await delete(admin, topic, if_exists))

    _run(bootstrap, command)
