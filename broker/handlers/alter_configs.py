"""AlterConfigs (33): replaces the whole override set of a topic, a broker or a group."""

from broker.dynamic_configs import ConfigChange, ConfigChangeError
from broker.errors import code

API_KEY = 33


async def handle(ctx, request):
    responses = []
    for r in request.resources:
        result = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                  "resource_name": r.resource_name}
        try:
            ctx.broker.dynamic_configs.alter(ctx.cluster, r.resource_type, r.resource_name,
                                             [ConfigChange(c.name, c.value) for c in r.configs],
                                             incremental=False, validate_only=request.validate_only)
        except ConfigChangeError as e:
            result.update(error_code=code(e.error_name), error_message=str(e))
        responses.append(result)
    return {"responses": responses}
