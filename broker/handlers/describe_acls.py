"""DescribeAcls (29): the bindings matching one filter, grouped by resource pattern;
SECURITY_DISABLED without an authorizer, as Kafka answers."""

from broker.security.acl_bindings import AclFilter
from broker.security.acl_ids import AclError
from broker.security.acls import CLUSTER, CLUSTER_NAME, DESCRIBE
from broker.errors import code
from protocol.answer_wire import answer_type

API_KEY = 29
Answer = answer_type(API_KEY)


def acl_filter(f) -> AclFilter:
    """An AclFilter from a DescribeAcls request or a DeleteAcls filter (same field names)."""
    return AclFilter(int(f.resource_type_filter), f.resource_name_filter,
                     int(getattr(f, "pattern_type_filter", 3)), f.principal_filter, f.host_filter,
                     int(f.operation), int(f.permission_type))


async def handle(ctx, request):
    if not ctx.allowed(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return Answer(error_code=code("CLUSTER_AUTHORIZATION_FAILED"), error_message="Cluster authorization failed.",
                      resources=())
    if not ctx.broker.authorizer.enabled:
        return Answer(error_code=code("SECURITY_DISABLED"), error_message="No Authorizer is configured on the broker",
                      resources=())
    f = acl_filter(request)
    try:
        f.validate()
    except AclError as e:
        return Answer(error_code=code("INVALID_REQUEST"), error_message=str(e), resources=())
    by_resource: dict[tuple[int, str, int], list] = {}
    for b in ctx.broker.authorizer.describe(f):
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            Answer.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                                  permission_type=b.permission_type))
    return Answer(error_code=0, error_message=None, resources=[
        Answer.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in by_resource.items()])
