"""DeleteAcls (31): removes the bindings each filter matches and lists them;
SECURITY_DISABLED for every filter without an authorizer, as Kafka answers."""

from broker.security.acl_ids import AclError
from broker.security.acls import ALTER, CLUSTER, CLUSTER_NAME
from broker.errors import code
from broker.handlers.describe_acls import acl_filter
from protocol.answer_wire import answer_type

API_KEY = 31
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return Answer(filter_results=[Answer.DeleteAclsFilterResult(
            error_code=code("CLUSTER_AUTHORIZATION_FAILED"), error_message="Cluster authorization failed.",
            matching_acls=()) for _ in request.filters])
    if not ctx.broker.authorizer.enabled:
        return Answer(filter_results=[Answer.DeleteAclsFilterResult(
            error_code=code("SECURITY_DISABLED"), error_message="No Authorizer is configured.", matching_acls=())
            for _ in request.filters])
    filters, errors = [], {}
    for i, raw in enumerate(request.filters):
        f = acl_filter(raw)
        try:
            f.validate()
            filters.append(f)
        except AclError as e:
            errors[i] = str(e)
    deleted = iter(ctx.broker.authorizer.delete(filters))
    results = []
    for i in range(len(request.filters)):
        if i in errors:
            results.append(Answer.DeleteAclsFilterResult(error_code=code("INVALID_REQUEST"), error_message=errors[i],
                                                         matching_acls=()))
            continue
        results.append(Answer.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[
            Answer.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.resource_name,
                pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                permission_type=b.permission_type)
            for b in next(deleted)]))
    return Answer(filter_results=results)
