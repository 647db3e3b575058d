"""CreateAcls (30): adds ACL bindings (ALTER on the cluster needed when ACLs are enforced).
Without an authorizer (``authorizer.class.name`` unset) every creation is answered
SECURITY_DISABLED, as Kafka answers."""

from broker.security.acl_bindings import AclBinding, validate_new
from broker.security.acl_ids import AclError
from broker.security.acls import ALTER, CLUSTER, CLUSTER_NAME
from broker.errors import code
from protocol.answer_wire import answer_type

API_KEY = 30
Answer = answer_type(API_KEY)


async def handle(ctx, request):
    if not ctx.allowed(ALTER, CLUSTER, CLUSTER_NAME):
        return Answer(results=[Answer.AclCreationResult(error_code=code("CLUSTER_AUTHORIZATION_FAILED"),
                                                        error_message="Cluster authorization failed.")
                               for _ in request.creations])
    if not ctx.broker.authorizer.enabled:
        return Answer(results=[Answer.AclCreationResult(error_code=code("SECURITY_DISABLED"),
                                                        error_message="No Authorizer is configured.")
                               for _ in request.creations])
    results, valid = [], []
    for c in request.creations:
        binding = AclBinding(int(c.resource_type), c.resource_name, int(getattr(c, "resource_pattern_type", 3)),
                             c.principal, c.host, int(c.operation), int(c.permission_type))
        try:
            validate_new(binding)
        except AclError as e:
            results.append(Answer.AclCreationResult(error_code=code("INVALID_REQUEST"), error_message=str(e)))
            continue
        valid.append(binding)
        results.append(Answer.AclCreationResult(error_code=0, error_message=None))
    ctx.broker.authorizer.create(valid)
    return Answer(results=results)
