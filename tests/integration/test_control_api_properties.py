"""Property tests of the control API against its own OpenAPI document: for every
operation the document lists, hypothesis sends path values and JSON bodies drawn from
the declared schemas and from outside them (wrong types, unknown fields, huge and
negative numbers, junk text). Every answer must be JSON: a 2xx object, or a 4xx
``{"error": ..., "field": ...}``; never a 5xx, never a hang, and the broker stays up."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(300)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def control_api(tmp_path_factory):
    from tests.broker_process import BrokerProcess

    broker = BrokerProcess(tmp_path_factory.mktemp("control-api") / "data", {"num.partitions": 2},
                           nodes=3, admin=True).start()
    from tests.integration.test_cluster import create

    create(broker.bootstrap, "fuzzed", 2)
    with urllib.request.urlopen(broker.admin_url + "/openapi.json", timeout=10) as r:
        document = json.loads(r.read())
    yield broker, document
    broker.kill()


def _value_for(schema: dict):
    """Values that fit ``schema``, mixed with values that do not."""
    fitting = {
        "integer": st.integers(min_value=schema.get("minimum", -5), max_value=5),
        "string": st.sampled_from(["fuzzed", "g", "t"]) | st.text(min_size=1, max_size=8),
        "array": st.lists(st.integers(min_value=0, max_value=5), max_size=4),
    }.get(schema.get("type"), JSON_VALUES)
    return fitting | JSON_VALUES


def _answers_json(operation: dict) -> bool:
    """Whether the operation's success answer is JSON (an operation that declares none is)."""
    success = [a for code, a in operation.get("responses", {}).items() if str(code).startswith("2")]
    return not success or any("application/json" in a.get("content", {"application/json": None}) for a in success)


def _requests(document: dict):
    calls = []
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            if path == "/openapi.json" or not _answers_json(op):
                continue  # the console's page and event stream, /metrics: not JSON, a stream never ends
            path_params = {p["name"]: _value_for(p["schema"]) for p in op.get("parameters", []) if p["in"] == "path"}
            body_schema = (op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}))
            props = body_schema.get("properties", {})
            body = st.fixed_dictionaries({}, optional={name: _value_for(s) for name, s in props.items()}) | \
                st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=2)
            calls.append(st.tuples(st.just(method.upper()), st.just(path), st.fixed_dictionaries(path_params), body))
    return st.one_of(calls)


def _send(url: str, method: str, path: str, params: dict, body: dict) -> tuple[int, object]:
    for name, value in params.items():
        text = value if isinstance(value, str) else json.dumps(value)
        path = path.replace("{" + name + "}", urllib.parse.quote(text, safe="") or "%20")
    data = json.dumps(body).encode() if method == "POST" else None
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_every_operation_answers_json_and_never_fails(control_api):
    broker, document = control_api

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_requests(document))
    def check(call):
        method, path, params, body = call
        status, answer = _send(broker.admin_url, method, path, params, body)
        assert status < 500, (call, status, answer)
        assert isinstance(answer, dict), (call, answer)
        if status >= 400:
            assert isinstance(answer.get("error"), str) and answer["error"], (call, answer)
            assert "field" in answer, (call, answer)

    check()
    assert broker.alive
    nodes = broker.control().cluster()["nodes"]
    assert any(n["state"] != "stopped" for n in nodes)  # the last live node was never stopped
