"""ListPartitionReassignments (46): reassignments complete at once here (every node has
the data), so none is ever in progress and the answer lists none."""

API_KEY = 46


async def handle(ctx, request):
    return {"error_code": 0, "error_message": None, "topics": []}
