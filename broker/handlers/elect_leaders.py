"""ElectLeaders (43): preferred (or unclean) leader election, for every partition or
the listed ones. Any node answers (Kafka forwards it to the controller).

Preferred: the first replica leads again if it is in the ISR (ELECTION_NOT_NEEDED when
it already does, PREFERRED_LEADER_NOT_AVAILABLE when it is not in the ISR). Unclean:
a partition without a leader gets any live replica (ELECTION_NOT_NEEDED when it has
one). With no partitions listed, only partitions whose election was needed are
reported, as Kafka does."""

from broker.errors import code
from protocol.answer_wire import answer_type

API_KEY = 43
Answer = answer_type(API_KEY)
PREFERRED, UNCLEAN = 0, 1


def _elect(cluster, topic: str, index: int, election_type: int) -> tuple[str, str | None]:
    state = cluster.leadership(topic, index)
    if state is None:
        return "UNKNOWN_TOPIC_OR_PARTITION", "The partition does not exist."
    replicas = cluster.replicas
    if election_type == UNCLEAN:
        if state.leader != -1:
            return "ELECTION_NOT_NEEDED", "Leader election not needed for topic partition."
        live = [r for r in state.replicas if r in replicas.up]
        if not live:
            return "ELIGIBLE_LEADERS_NOT_AVAILABLE", "No live replica can lead."
        state.isr = [live[0]]
        replicas.set_leader(topic, index, live[0], "unclean leader election")
        return "NONE", None
    preferred = state.replicas[0]
    if state.leader == preferred:
        return "ELECTION_NOT_NEEDED", "Leader election not needed for topic partition."
    if preferred not in state.isr:
        return "PREFERRED_LEADER_NOT_AVAILABLE", f"Failed to elect leader for partition {topic}-{index}: " \
                                                 f"the preferred replica {preferred} is not in the ISR."
    replicas.set_leader(topic, index, preferred, "preferred leader election (ElectLeaders)")
    return "NONE", None


async def handle(ctx, request):
    cluster = ctx.cluster
    election_type = getattr(request, "election_type", PREFERRED)
    if election_type not in (PREFERRED, UNCLEAN):
        return Answer(error_code=code("INVALID_REQUEST"), replica_election_results=())
    everything = request.topic_partitions is None
    wanted = (sorted(cluster.partition_keys()) if everything
              else [(t.topic, p) for t in request.topic_partitions for p in t.partitions])
    results: dict[str, list] = {}
    for topic, index in wanted:
        error, message = _elect(cluster, topic, index, election_type)
        if everything and error == "ELECTION_NOT_NEEDED":
            continue
        results.setdefault(topic, []).append(Answer.PartitionResult(partition_id=index, error_code=code(error),
                                                                    error_message=message))
    cluster.replicas.save()
    return Answer(error_code=0, replica_election_results=[
        Answer.ReplicaElectionResult(topic=t, partition_result=ps) for t, ps in results.items()])
