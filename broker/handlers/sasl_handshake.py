"""SaslHandshake (17) after authentication, or on a listener without SASL: refused with
ILLEGAL_SASL_STATE, as Kafka's request handler answers it. Before authentication (and to
begin a re-authentication) the connection's SASL exchange answers it
(broker.security.sasl)."""

API_KEY = 17
ILLEGAL_SASL_STATE = 34


async def handle(ctx, request):
    return {"error_code": ILLEGAL_SASL_STATE, "mechanisms": []}
