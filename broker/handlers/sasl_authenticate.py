"""SaslAuthenticate (36) after authentication, or on a listener without SASL: refused
with ILLEGAL_SASL_STATE and Kafka's message. Before authentication the connection's SASL
exchange answers it (broker.security.sasl)."""

from protocol.answer_wire import answer_type

API_KEY = 36
Answer = answer_type(API_KEY)
ILLEGAL_SASL_STATE = 34


async def handle(ctx, request):
    return Answer(error_code=ILLEGAL_SASL_STATE,
                  error_message="SaslAuthenticate request received after successful authentication",
                  auth_bytes=b"", session_lifetime_ms=0)
