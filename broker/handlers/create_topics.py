"""CreateTopics (19), v2-v7: validates names, counts and configs as Kafka does."""

from broker.security.acls import CLUSTER, CLUSTER_NAME, CREATE, TOPIC
from broker.errors import code
from broker.cluster.topics import TopicError, effective_topic_config
from protocol.answer_wire import answer_type

API_KEY = 19
Answer = answer_type(API_KEY)

# Kafka's controller refuses a request that would create more partitions than this
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH): one request must not exhaust memory.
MAX_PARTITIONS_PER_REQUEST = 10000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


def _requested_partitions(request, default: int) -> int:
    total = 0
    for t in request.topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default
        elif t.num_partitions > 0:
            total += t.num_partitions
    return total


async def handle(ctx, request):
    cluster = ctx.cluster
    results = []
    seen = set()
    too_many = _requested_partitions(request, cluster.config["num.partitions"]) > MAX_PARTITIONS_PER_REQUEST
    for t in request.topics:
        result = Answer.CreatableTopicResult(name=t.name, topic_id=None, error_code=0, error_message=None,
                                             num_partitions=-1, replication_factor=-1, configs=None)
        if too_many:
            result = result._replace(error_code=code("POLICY_VIOLATION"), error_message=TOO_MANY_PARTITIONS)
            results.append(result)
            continue
        if t.name in seen:
            result = result._replace(error_code=code("INVALID_REQUEST"), error_message=(
                f"Create topics request from client contains a duplicate topic: {t.name}"))
            results.append(result)
            continue
        seen.add(t.name)
        if not (ctx.allowed(CREATE, CLUSTER, CLUSTER_NAME) or ctx.allowed(CREATE, TOPIC, t.name)):
            result = result._replace(error_code=code("TOPIC_AUTHORIZATION_FAILED"),
                                     error_message="Authorization failed.")
            results.append(result)
            continue
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
        if assignments and (t.num_partitions != -1 or t.replication_factor != -1):
            result = result._replace(error_code=code("INVALID_REQUEST"), error_message=(
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at "
                "the same time."))
            results.append(result)
            continue
        try:
            plan = cluster.check_create(t.name, t.num_partitions, t.replication_factor,
                                        {c.name: c.value for c in t.configs}, assignments)
            info = None if request.validate_only else await cluster.create_off_loop(plan)
            if assignments:
                partitions, replication = len(assignments), len(next(iter(assignments.values())))
            else:
                partitions = t.num_partitions if t.num_partitions != -1 else cluster.config["num.partitions"]
                replication = (t.replication_factor if t.replication_factor != -1
                               else cluster.default_replication_factor())
        except TopicError as e:
            result = result._replace(error_code=code(e.error_name), error_message=str(e))
            results.append(result)
            continue
        if info is not None:
            configs = effective_topic_config(info, cluster.config)
            result = result._replace(
                topic_id=info.topic_id,
                num_partitions=info.partitions,
                replication_factor=replication,
                configs=[
                    Answer.CreatableTopicConfigs(name=k, value=v, read_only=False,
                                                 config_source=1 if k in info.configs else 5, is_sensitive=False)
                    for k, v in sorted(configs.items())
                ],
            )
        else:  # validate_only: report what would be created
            result = result._replace(num_partitions=partitions, replication_factor=replication)
        results.append(result)
    return Answer(topics=results)
