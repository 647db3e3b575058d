"""DescribeCluster (60): the emulated nodes, as admin clients list brokers."""

API_KEY = 60


async def handle(ctx, request):
    cluster = ctx.cluster
    return {
        "error_code": 0,
        "endpoint_type": 1,
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
        "brokers": [{"broker_id": n.node_id, "host": n.host, "port": n.port, "rack": None} for n in cluster.live_nodes],
        "cluster_authorized_operations": -2147483648,
    }
