"""broker.dataclass_code: dataclasses made from stored code objects are the classes
``@dataclass`` compiles itself; a missing, foreign, corrupt or unwritable store only
means compiling as usual."""

from __future__ import annotations

import dataclasses
import inspect
import marshal
import sys
from dataclasses import FrozenInstanceError, dataclass, field

import pytest

from importlib._bootstrap_external import MAGIC_NUMBER

from broker.dataclass_code import CompiledTexts


def _classes():
    """Fresh classes of every kind the broker and kio define (frozen, slots, order,
    defaults and factories, keyword-only, no eq), made by the dataclasses module."""

    @dataclass(frozen=True, slots=True)
    class Frozen:
        name: str
        partitions: tuple[int, ...] = ()
        weight: float = field(default=1.5, compare=False)

    @dataclass(order=True)
    class Ordered:
        epoch: int
        pid: int = -1
        members: list = field(default_factory=list)

    @dataclass(kw_only=True, eq=False)
    class KeywordOnly:
        a: int
        b: str = "b"

    return Frozen, Ordered, KeywordOnly


def _behaviour(Frozen, Ordered, KeywordOnly):
    f = Frozen("t", (1, 2))
    with pytest.raises(FrozenInstanceError):
        f.name = "u"
    o1, o2 = Ordered(1), Ordered(1, 2, [3])
    o1.members.append(9)
    k = KeywordOnly(a=1)
    with pytest.raises(TypeError):
        KeywordOnly(1)
    return (repr(f), f == Frozen("t", (1, 2), 9.0), hash(f) == hash(Frozen("t", (1, 2))), f.__slots__,
            repr(o1), o1 < o2, o1 == Ordered(1, -1, [9]), Ordered(2).members, Ordered.__match_args__,
            repr(k), k == KeywordOnly(a=1), [x.name for x in dataclasses.fields(Frozen)],
            [(c.__init__.__annotations__, str(inspect.signature(c.__init__))) for c in (Frozen, Ordered, KeywordOnly)])


def _made_with(texts: CompiledTexts, monkeypatch):
    monkeypatch.setattr(dataclasses, "exec", texts.exec, raising=False)
    try:
        return _behaviour(*_classes())
    finally:
        monkeypatch.delattr(dataclasses, "exec")


@pytest.fixture
def bytecode_written(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def test_stored_code_makes_the_same_classes(tmp_path, monkeypatch, bytecode_written):
    expected = _behaviour(*_classes())  # the dataclasses module on its own
    path = tmp_path / "code.marshal"
    first = CompiledTexts(path)
    first.load()
    assert _made_with(first, monkeypatch) == expected
    assert first.compiled > 0
    first.save()
    again = CompiledTexts(path)
    again.load()
    assert _made_with(again, monkeypatch) == expected
    assert again.compiled == 0  # every text came from the file
    mtime = path.stat().st_mtime_ns
    again.save()  # nothing new: nothing written
    assert path.stat().st_mtime_ns == mtime
    first.close()
    again.close()


def test_nothing_is_written_under_pythondontwritebytecode_unless_forced(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    path = tmp_path / "code.marshal"
    texts = CompiledTexts(path)
    _made_with(texts, monkeypatch)
    texts.save()
    assert not path.exists()
    texts.save(force=True)  # make compile
    stored = CompiledTexts(path)
    stored.load()
    assert _made_with(stored, monkeypatch) == _behaviour(*_classes()) and stored.compiled == 0
    stored.close()


def test_texts_a_module_no_longer_uses_are_dropped(tmp_path, monkeypatch):
    path = tmp_path / "code.marshal"
    old = CompiledTexts(path)
    old.exec("def gone(): pass", {"__name__": __name__}, {})
    old.save()
    texts = CompiledTexts(path)
    texts.load()
    _made_with(texts, monkeypatch)  # this module's classes, without "gone"
    texts.save(force=True)
    stored = CompiledTexts(path)
    stored.load()
    assert "def gone(): pass" not in stored._stored_for(__name__) and stored._stored_for(__name__)


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02\x03garbage", b"not a magic number at all",
                                     MAGIC_NUMBER, MAGIC_NUMBER + b"\x00\x00\x10\x00short"])
def test_an_unreadable_or_foreign_file_means_compiling(tmp_path, monkeypatch, content):
    path = tmp_path / "code.marshal"
    path.write_bytes(content)
    texts = CompiledTexts(path)
    texts.load()
    assert _made_with(texts, monkeypatch) == _behaviour(*_classes())
    assert texts.compiled > 0


def test_a_corrupt_module_blob_means_compiling(tmp_path, monkeypatch):
    path = tmp_path / "code.marshal"
    index = marshal.dumps({__name__: (0, 9), "truncated": (9, 100)})
    path.write_bytes(MAGIC_NUMBER + len(index).to_bytes(4, "big") + index + b"\xffbroken!")
    texts = CompiledTexts(path)
    texts.load()
    assert _made_with(texts, monkeypatch) == _behaviour(*_classes())
    assert texts.compiled > 0


def test_an_unwritable_place_stores_nothing_and_raises_nothing(tmp_path, monkeypatch, bytecode_written):
    (tmp_path / "a-file").write_text("")
    texts = CompiledTexts(tmp_path / "a-file" / "code.marshal")  # its directory cannot exist
    texts.load()
    _made_with(texts, monkeypatch)
    texts.save()
    assert not (tmp_path / "a-file" / "code.marshal").exists()


def test_the_broker_command_line_installs_it():
    import broker.cli  # noqa: F401  (installs at import, before its own dataclasses)
    from broker import dataclass_code

    assert dataclass_code._texts is not None and dataclasses.exec == dataclass_code._texts.exec
