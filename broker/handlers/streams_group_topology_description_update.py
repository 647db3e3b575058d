"""StreamsGroupTopologyDescriptionUpdate (93): v0 (KIP-1331). A member pushes its
topology's description for a topology description plugin to keep. Kafka keeps none
unless group.streams.topology.description.plugin.class names a Java plugin; eosbroker
loads no such plugins, so it answers as Kafka 4.4 without one: after the group's READ
check, UNSUPPORTED_VERSION with Kafka's message (and its heartbeats never ask for a
description)."""

from broker.errors import code
from broker.security.acls import GROUP, GROUP_DENIED, READ
from protocol.answer_wire import answer_type

API_KEY = 93
Answer = answer_type(API_KEY)
NO_PLUGIN = "The broker has no streams group topology description plugin configured."


async def handle(ctx, request):
    if not ctx.allowed(READ, GROUP, request.group_id):
        return Answer(error_code=GROUP_DENIED)
    return Answer(error_code=code("UNSUPPORTED_VERSION"), error_message=NO_PLUGIN)
