"""The live console at ``/`` on the admin port: one static page fed by server-sent
events (``/console/events``), each event the whole state as JSON (``/console/state``
answers the same once). The page's buttons call the control API's own routes; an
action is offered only when the control service has the operation.

The page itself is public; its data is not. With ``--admin-token`` the page asks for
the token, keeps it in the tab's sessionStorage and sends it as a bearer header on
every call, the event stream included (read with fetch, not EventSource, so the token
never travels in a URL or a cookie).
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
from importlib.resources import files

from aiohttp import web

from broker.control import snapshot
from broker.control.operations import OPERATIONS_BY_NAME

# How often the events stream looks for a change, and how often it sends the state
# anyway (transactions age).
POLL_S = 0.2
REFRESH_S = 1.0
# The page's actions and the control operations they call (the log browser's a GET).
ACTIONS = {"node_stop": "node_stop", "node_start": "node_start", "abort_transaction": "transaction_abort",
           "clock_advance": "clock_advance", "fault_remove": "fault_remove", "log_batches": "log_batches"}


def state(broker) -> dict:
    now_ms = broker.cluster.clock.now_ms()  # the broker's clock: virtual time moves ages too
    return {
        "now_ms": now_ms,
        "nodes": snapshot.nodes(broker),
        "transactions": snapshot.transactions(broker, now_ms),
        "partitions": snapshot.partitions(broker),
        "producers": snapshot.producers(broker),
        "groups": snapshot.groups(broker),
        "faults": [rule.describe() for rule in broker.faults.rules.values()],
        "links": [{"source": src, "target": dst} | dataclasses.asdict(link)
                  for (src, dst), link in broker.network.links.items()],
        "clock": {"offset_ms": getattr(broker.clock, "offset_ms", 0), "virtual": hasattr(broker.clock, "advance")},
        "actions": {action: OPERATIONS_BY_NAME[op].path for action, op in ACTIONS.items() if op in OPERATIONS_BY_NAME},
    }


def _asset(name: str) -> str:
    return files("broker.control").joinpath(name).read_text(encoding="utf-8")


def console_page() -> str:
    """console.html with the timeline's script and style inlined (one request, works offline)."""
    return (_asset("console.html").replace("/*TIMELINE_JS*/", _asset("timeline.js"))
            .replace("/*TIMELINE_CSS*/", _asset("timeline.css")))


def timeline_html(events: list[dict], now_ms: int, title: str) -> str:
    """A self-contained page of the timeline of ``events`` (GET /events), drawn by the
    console's own script: what the pytest plugin writes for a failed test."""
    page = _asset("console.html")
    section = page[page.index('<section id="timeline">'):page.index("</section>", page.index('<section id="timeline">'))]
    data = json.dumps({"events": events, "now_ms": now_ms}).replace("</", "<\\/")
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n'
            f"<style>body {{ font: 13px/1.4 system-ui, sans-serif; margin: 1rem; }}\n{_asset('timeline.css')}</style>"
            f"</head><body><h1>{html.escape(title)}</h1>\n{section}</section>\n"
            f'<script>"use strict";\n{_asset("timeline.js")}\nconst DATA = {data};\n'
            f"addEvents(DATA.events);\nrenderTimeline(DATA.now_ms);\n</script></body></html>\n")


def add_routes(admin) -> None:
    page = console_page().encode()

    async def index(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8")

    async def current(request: web.Request) -> web.Response:
        return web.json_response(state(admin.broker))

    closing = asyncio.Event()  # set at shutdown: open streams end instead of holding it up

    async def close_streams(app: web.Application) -> None:
        closing.set()

    admin.app.on_shutdown.append(close_streams)

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        last, last_sent = None, 0.0
        history = admin.broker.cluster.history
        seq = 0  # the first message carries the whole (bounded) history, later ones what is new
        try:
            while not closing.is_set():
                s = state(admin.broker)
                # A change is sent at once; ages (which change all the time) once a second.
                body = json.dumps({k: v for k, v in s.items() if k != "now_ms"} | {"transactions": [
                    {k: v for k, v in t.items() if k != "age_ms"} for t in s["transactions"]]}, sort_keys=True)
                if (body != last or history.next_seq != seq
                        or admin.broker.clock.monotonic() - last_sent >= REFRESH_S):
                    s["events"] = history.since(seq)
                    seq = history.next_seq
                    await response.write(f"data: {json.dumps(s)}\n\n".encode())
                    last, last_sent = body, admin.broker.clock.monotonic()
                try:
                    await asyncio.wait_for(closing.wait(), POLL_S)
                except asyncio.TimeoutError:
                    pass
        except ConnectionError:  # the browser went away
            pass
        return response

    admin.add_route("GET", "/", index, auth=False, openapi=_page(  # the page holds no data
        "console", "The live console (an HTML page fed by /console/events)", "text/html", {"type": "string"}))
    admin.add_route("GET", "/console/state", current, openapi=_page(
        "console_state", "The console's state once: nodes, transactions, partitions, producers, groups, faults, "
        "links and the clock", "application/json", {"type": "object"}))
    admin.add_route("GET", "/console/events", events, openapi=_page(
        "console_events", "The console's state as server-sent events: at each change, and once a second; each "
        "carries the event history's new events (the first, all it holds)",
        "text/event-stream", {"type": "string"}))


def _page(operation_id: str, summary: str, content_type: str, schema: dict) -> dict:
    return {"operationId": operation_id, "summary": summary,
            "responses": {"200": {"description": summary, "content": {content_type: {"schema": schema}}}}}
