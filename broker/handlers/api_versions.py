"""ApiVersions (18): the version ranges in force for the broker's version profile."""

API_KEY = 18


async def handle(ctx, request):
    apis = ctx.broker.apis
    features = apis.features
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": r.api_key, "min_version": r.advertised_min, "max_version": r.max}
            for r in ctx.broker.apis.ranges.values()
        ],
        "supported_features": [{"name": n, "min_version": 0, "max_version": level}
                               for n, level in apis.supported_features.items()],
        "finalized_features_epoch": 1 if apis.supported_features else -1,
        "finalized_features": [{"name": n, "min_version_level": level, "max_version_level": level}
                               for n, level in features.items()],
    }
