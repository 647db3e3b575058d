"""The Python API of the control service: one method per operation, over HTTP.

    from broker.control.api_client import ControlClient
    control = ControlClient("http://127.0.0.1:9644")
    control.node_stop(node_id=2)
    control.cluster()["partitions"]

Only the standard library is used, so tests and tools can import it anywhere.
A refused call raises ``ControlRefused`` with the HTTP status, message and field.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from broker.control.operations import OPERATIONS_BY_NAME


class ControlRefused(Exception):
    def __init__(self, status: int, message: str, field: str | None) -> None:
        super().__init__(f"{status}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.message = message
        self.field = field


class ControlClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0, ca: str | None = None) -> None:
        """``ca``: a PEM file of the CA an https URL's certificate is checked against
        (else the system's)."""
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._tls = None
        if ca is not None:
            import ssl

            self._tls = ssl.create_default_context(cafile=ca)

    def call(self, name: str, **args: Any) -> dict:
        op = OPERATIONS_BY_NAME[name]
        path_args = {p.name: args.pop(p.name) for p in op.params if p.where == "path" and p.name in args}
        path = op.path.format(**{k: urllib.parse.quote(str(v), safe="") for k, v in path_args.items()})
        if op.method == "GET":
            query = {k: v for k, v in args.items() if v is not None}
            return self.request("GET", path + ("?" + urllib.parse.urlencode(query) if query else ""))
        return self.request(op.method, path, {k: v for k, v in args.items() if v is not None})

    def request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._tls) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                answer = json.loads(e.read())
            except ValueError:
                answer = {"error": e.reason}
            raise ControlRefused(e.code, answer.get("error", ""), answer.get("field")) from None

    def __getattr__(self, name: str):
        if name not in OPERATIONS_BY_NAME:
            raise AttributeError(name)
        return lambda **args: self.call(name, **args)

    def __dir__(self):
        return [*super().__dir__(), *OPERATIONS_BY_NAME]


