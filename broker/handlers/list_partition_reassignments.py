"""ListPartitionReassignments (46): reassignments complete at once here (every node has
the data), so none is ever in progress and the answer lists none."""

from protocol.answer_wire import answer_type

API_KEY = 46
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    return Answer(error_code=0, error_message=None, topics=())
