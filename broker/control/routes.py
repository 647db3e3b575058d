"""The control service's operations as HTTP routes, and ``/openapi.json``.

GET operations take their parameters from the path and the query string, POST
operations from the path and a JSON object body; every answer is JSON.
"""

from __future__ import annotations

import json

from aiohttp import web

from broker.control.operations import OPERATIONS, ControlError, Operation

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}, "field": {"type": "string", "nullable": True}},
}
_TYPES = {"integer": {"type": "integer", "format": "int32"}, "string": {"type": "string", "minLength": 1},
          "long": {"type": "integer", "format": "int64"}, "number": {"type": "number"}, "boolean": {"type": "boolean"},
          "duration": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\d+(ms|s|m|h|d)?$"}]},
          "integer[]": {"type": "array", "items": {"type": "integer", "format": "int32"}}}


def add_routes(admin) -> None:
    for op in OPERATIONS:
        admin.add_route(op.method, op.path, _handler(admin, op), openapi=operation_object(op))
    async def openapi(request: web.Request) -> web.Response:  # aiohttp deprecates plain functions
        return _openapi(admin)

    admin.add_route("GET", "/openapi.json", openapi, auth=False,
                    openapi={"operationId": "openapi", "summary": "This document",
                             "responses": {"200": {"description": "the OpenAPI document",
                                                   "content": {"application/json": {"schema": {"type": "object"}}}}}})


def _handler(admin, op: Operation):
    async def handle(request: web.Request) -> web.Response:
        raw: dict = {}
        if op.method == "POST" and request.can_read_body:
            body = await request.read()
            if body.strip():
                raw = json.loads(body)
                if not isinstance(raw, dict):
                    raise ControlError("the body must be a JSON object", "body")
        raw.update(request.query)
        for name, value in request.match_info.items():
            raw[name] = value
        # Path and query values are text; a JSON body keeps its types.
        text = {name for name in raw if name in request.match_info or name in request.query}
        result = await admin.control.call(op.name, raw, from_text=text)
        return web.json_response(result)

    return handle


def operation_object(op: Operation) -> dict:
    parameters = [
        {"name": p.name, "in": p.where, "required": p.required or p.where == "path", "description": p.doc,
         "schema": _schema(p)}
        for p in op.params if p.where != "body"
    ]
    body = [p for p in op.params if p.where == "body"]
    out: dict = {
        "operationId": op.name,
        "summary": op.summary,
        "parameters": parameters,
        "responses": {
            "200": {"description": "done", "content": {"application/json": {"schema": {"type": "object"}}}},
            "4XX": {"description": "refused; `field` names the offending argument",
                    "content": {"application/json": {"schema": ERROR_SCHEMA}}},
        },
    }
    if body:
        out["requestBody"] = {"required": any(p.required for p in body), "content": {"application/json": {
            "schema": {"type": "object", "additionalProperties": False,
                       "required": [p.name for p in body if p.required],
                       "properties": {p.name: _schema(p) | {"description": p.doc} for p in body}}}}}
    return out


def _schema(p) -> dict:
    schema = dict(_TYPES[p.type])
    if p.minimum is not None:
        target = schema["items"] if p.type == "integer[]" else schema
        target["minimum"] = p.minimum
    return schema


def _openapi(admin) -> web.Response:
    document = {
        "openapi": "3.0.3",
        "info": {"title": "eosbroker control API", "version": "1"},
        "paths": admin.openapi_paths,
    }
    if admin.token is not None:
        document["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
        document["security"] = [{"bearer": []}]
    return web.json_response(document)
