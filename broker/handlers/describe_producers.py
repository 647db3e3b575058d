"""DescribeProducers (61): the active producers of each partition (kafka-transactions.sh
describe-producers), from the partition's producer state. With the authorizer on a topic
needs READ (else TOPIC_AUTHORIZATION_FAILED with its message), as in Kafka."""

from broker.security.acls import DENIED_MESSAGES, READ, TOPIC, TOPIC_DENIED
from broker.errors import code
from protocol.answer_wire import answer_type

API_KEY = 61
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    topics = []
    for t in request.topics:
        partitions = []
        readable = ctx.allowed(READ, TOPIC, t.name)
        for index in t.partition_indexes:
            if not readable:
                partitions.append(Answer.PartitionResponse(partition_index=index, error_code=TOPIC_DENIED,
                                                           error_message=DENIED_MESSAGES[TOPIC_DENIED],
                                                           active_producers=()))
                continue
            part, error = ctx.led_partition(t.name, index)
            if error is not None:
                partitions.append(Answer.PartitionResponse(partition_index=index, error_code=code(error),
                                                           error_message=None, active_producers=()))
                continue
            partitions.append(Answer.PartitionResponse(
                partition_index=index,
                error_code=0,
                error_message=None,
                active_producers=[
                    Answer.ProducerState(producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                                         last_sequence=p.last_sequence, last_timestamp=p.last_timestamp,
                                         coordinator_epoch=p.coordinator_epoch,
                                         current_txn_start_offset=p.current_txn_start_offset)
                    for p in part.producer_state.describe()
                ],
            ))
        topics.append(Answer.TopicResponse(name=t.name, partitions=partitions))
    return Answer(topics=topics)
