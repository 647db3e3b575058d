"""The Kafka wire: the listeners, each connection's reader and request pipeline, dispatch
to the handlers, the request context, connection limits; and the asyncio client.
"""
