"""AlterConfigs (33): replaces the whole override set of a topic, a broker or a group."""

from broker.cluster.dynamic_configs import answer_alter_configs
from protocol.answer_wire import answer_type

API_KEY = 33
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    return answer_alter_configs(ctx, request, incremental=False, answer=Answer)
