"""ApiVersions (18): the version ranges in force for the broker's version profile."""

API_KEY = 18


async def handle(ctx, request):
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": r.api_key, "min_version": r.advertised_min, "max_version": r.max}
            for r in ctx.broker.apis.ranges.values()
        ],
        
        "finalized_features_epoch": -1,
    }
