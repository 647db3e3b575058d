"""SaslHandshake (17) after authentication, or on a listener without SASL: refused with
ILLEGAL_SASL_STATE, as Kafka's request handler answers it. Before authentication (and to
begin a re-authentication) the connection's SASL exchange answers it
(broker.security.sasl)."""

from protocol.answer_wire import answer_type

API_KEY = 17
Answer = answer_type(API_KEY)
ILLEGAL_SASL_STATE = 34


async def handle(ctx, request):
    return Answer(error_code=ILLEGAL_SASL_STATE, mechanisms=())
