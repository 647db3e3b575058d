"""The admin HTTP server: aiohttp on the broker's event loop, JSON errors, an optional
bearer token, and routes added by the modules in ``ROUTE_MODULES``."""

from __future__ import annotations

import hmac
import importlib
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from broker.control.operations import ControlError
from broker.control.service import ControlService

log = logging.getLogger(__name__)

# Modules with ``add_routes(admin)``, loaded in this order when the server starts.
ROUTE_MODULES: list[str] = [
    "broker.control.routes",
    "broker.control.metrics",
    "broker.control.console",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(status: int, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": message, "field": field}, status=status)


class AdminServer:
    def __init__(self, broker, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 tls=None) -> None:
        """``tls``: an ssl.SSLContext to serve HTTPS with."""
        self.broker = broker
        self.tls = tls
        self.control = ControlService(broker)
        self.host = host
        self.port = port
        self.token = token
        self.app = web.Application(middlewares=[self._errors], client_max_size=1 << 20)
        self.openapi_paths: dict[str, dict[str, dict]] = {}
        self._public: set[tuple[str, str]] = set()
        self._runner: web.AppRunner | None = None
        for name in ROUTE_MODULES:
            importlib.import_module(name).add_routes(self)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.port}"

    def add_route(self, method: str, path: str, handler: Handler, *, openapi: dict | None = None,
                  auth: bool = True) -> None:
        """Serves ``handler`` at ``method path`` (aiohttp path syntax, ``{name}`` for a
        parameter); ``openapi`` is its OpenAPI operation object; ``auth=False`` serves
        it without the bearer token."""
        self.app.router.add_route(method, path, handler)
        if openapi is not None:
            if not auth:  # exempt from the document's bearer requirement
                openapi = openapi | {"security": []}
            self.openapi_paths.setdefault(path, {})[method.lower()] = openapi
        if not auth:
            self._public.add((method.upper(), path))

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        log.info("control API on %s%s", self.url, " (bearer token required)" if self.token else "")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.token is not None and not self._is_public(request):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                return json_error(401, "missing or wrong bearer token", "Authorization")
        try:
            return await handler(request)
        except ControlError as e:
            return json_error(e.status, e.message, e.field)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return json_error(e.status, e.reason)
        except json.JSONDecodeError as e:
            return json_error(400, f"the body is not JSON: {e}", "body")
        except Exception:
            log.exception("control API: %s %s failed", request.method, request.path)
            return json_error(500, "internal error (see the broker log)")

    def _is_public(self, request: web.Request) -> bool:
        route = request.match_info.route.resource
        path = route.canonical if route is not None else request.path
        return (request.method, path) in self._public
