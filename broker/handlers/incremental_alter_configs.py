"""IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT on a topic's, a
broker's or a group's overrides."""

from broker.cluster.dynamic_configs import answer_alter_configs
from protocol.answer_wire import answer_type

API_KEY = 44
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    return answer_alter_configs(ctx, request, incremental=True, answer=Answer)
