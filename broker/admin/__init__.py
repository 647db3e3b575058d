"""The admin HTTP server (aiohttp, on the broker's own event loop).

Routes come from the modules listed in ``ROUTE_MODULES``: each has
``add_routes(admin: AdminServer)`` and calls ``admin.add_route(method, path, handler,
openapi=..., auth=...)``; the OpenAPI document at ``/openapi.json`` lists every route
that gave an ``openapi`` operation object. To add routes (``/metrics``, a console
page), write such a module and add its name to ``ROUTE_MODULES`` (broker.admin.server).

Nothing is imported here: the control service reads ``broker.admin.snapshot`` without
loading the server, which imports the control service.
"""
