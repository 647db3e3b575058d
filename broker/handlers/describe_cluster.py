"""DescribeCluster (60): the emulated nodes, as admin clients list brokers."""

from broker.security.acls import CLUSTER, CLUSTER_NAME, NOT_REQUESTED, authorized_operations
from protocol.answer_wire import answer_type

API_KEY = 60
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    cluster = ctx.cluster
    return Answer(
        error_code=0,
        endpoint_type=1,
        cluster_id=cluster.cluster_id,
        controller_id=cluster.controller_id,
        # on the listener the request came in on
        brokers=[Answer.DescribeClusterBroker(**b) for b in ctx.brokers("broker_id")],
        cluster_authorized_operations=authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
        if request.include_cluster_authorized_operations else NOT_REQUESTED,
    )
