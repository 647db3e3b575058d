"""One module per Kafka API, named after it; each exposes API_KEY and ``async handle(ctx, request)``.

A handler returns the response as a dict of Kafka field names (built into the
negotiated version's kio dataclass by the server), a kio response, or None when
no response is sent (Produce with acks=0). The listener's dispatch
(``broker.wire.server.HANDLERS``) maps each API key to its module.
"""
