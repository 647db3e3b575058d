"""ApiVersions (18): the version ranges in force for the broker's version profile.

The answer depends only on the ApiTable (the profile's ranges, the supported and finalized
features) and the request's version, not on the listener, the client or the connection's
SASL state: it is encoded once per version and kept, and made again when the features
change. Clients send one on every connection, librdkafka on every reconnect too."""

from __future__ import annotations

import weakref

from protocol import answer_wire
from protocol.answer_wire import EncodedBody

API_KEY = 18

# ApiTable -> (its features when the bodies were encoded, {version: body})
_ENCODED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def handle(ctx, request):
    return encoded_answer(ctx.broker.apis, ctx.version)


def encoded_answer(apis, version: int) -> EncodedBody:
    """The answer's body for this table and version, encoded on its first request."""
    features = (tuple(apis.supported_features.items()), tuple(apis.features.items()))
    kept = _ENCODED.get(apis)
    if kept is None or kept[0] != features:  # first request, or the features changed since
        kept = _ENCODED[apis] = (features, {})
    body = kept[1].get(version)
    if body is None:
        body = kept[1][version] = EncodedBody(answer_wire.encode_response(API_KEY, version, answer(apis)))
    return body


def answer(apis) -> dict:
    features = apis.features
    supported = apis.supported_features
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": r.api_key, "min_version": r.advertised_min, "max_version": r.max}
            for r in apis.ranges.values()
        ],
        "supported_features": [{"name": n, "min_version": 0, "max_version": level}
                               for n, level in supported.items()],
        "finalized_features_epoch": 1 if supported else -1,
        "finalized_features": [{"name": n, "min_version_level": level, "max_version_level": level}
                               for n, level in features.items()],
    }
