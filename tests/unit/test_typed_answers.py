"""Handlers answer with their API's answer type (protocol.answer_wire.answer_type), so a
misspelt or missing field fails where the answer is built, not on the wire. Read from
each handler module: it names its type (``Answer = answer_type(API_KEY)``), returns no
dict display and turns no dataclass into a dict. The encoder refuses a dict answer."""

from __future__ import annotations

import ast
import dataclasses
from importlib import import_module
from pathlib import Path

import pytest

from broker.wire.server import _MODULES
from protocol.answer_wire import answer_from, answer_type, encode_response, response_frame_encoder

HANDLERS_DIR = Path(__file__).resolve().parents[2] / "broker" / "handlers"


def _dict_answers(path: Path) -> list[str]:
    """``return {"field": ...}`` statements (a dict display keyed by names, as answers
    were written) and ``asdict`` calls of a module, by line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict) and any(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys):
            found.append(f"line {node.lineno}: returns a dict")
        elif isinstance(node, ast.Call) and "asdict" in ast.unparse(node.func):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
    return found


@pytest.mark.parametrize(("api_key", "name"), sorted(_MODULES.items()), ids=[name for _, name in sorted(_MODULES.items())])
def test_a_handler_answers_with_its_answer_type(api_key, name):
    module = import_module(f"broker.handlers.{name}")
    assert getattr(module, "Answer", None) is answer_type(api_key)
    assert _dict_answers(HANDLERS_DIR / f"{name}.py") == []


def test_the_check_sees_a_dict_answer(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import dataclasses\ndef handle(r):\n    if r:\n        return {'error_code': 0}\n"
                     "    return dataclasses.asdict(r)\n")
    assert _dict_answers(probe) == ["line 4: returns a dict", "line 5: dataclasses.asdict"]


def test_a_coordinator_message_with_a_field_the_answer_lacks_fails_conversion():
    @dataclasses.dataclass
    class Misspelt:
        error_cod: int

    @dataclasses.dataclass
    class Heartbeat:
        error_code: int

    with pytest.raises(TypeError):
        answer_from(answer_type(12), Misspelt(0))
    assert answer_from(answer_type(12), Heartbeat(7)) == answer_type(12)(error_code=7)


@pytest.mark.parametrize("api_key", [26, 69])  # one API with a compiled layout, one answered through kio
def test_the_encoder_refuses_a_dict_answer_naming_the_api(api_key):
    with pytest.raises(TypeError, match=rf"\(API {api_key} v1\) is a dict"):
        response_frame_encoder(api_key, 1, True)(7, {"error_code": 0})
    assert encode_response(12, 4, answer_type(12)(error_code=0)) == bytes(7)  # typed: throttle, error, no tags
