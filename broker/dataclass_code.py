"""Dataclass methods compiled once per installation, not at every start.

Up to Python 3.12, ``@dataclass`` writes a class's __init__, __repr__, __eq__, __hash__
and (frozen) __setattr__/__delattr__ as source text and compiles each with ``exec``. The
~40 dataclasses on the way to a broker's first Metadata answer (its own and kio's message
types) spent a large share of start-up in Python's parser and compiler doing that. ``install`` gives the dataclasses module an ``exec`` that compiles a text it has not
seen before and reuses the stored code object of one it has: the same text compiles to
the same code, so the classes are exactly what ``@dataclass`` makes without it.

``save`` keeps the code objects in a file beside the broker's bytecode, tagged with the
interpreter's bytecode magic number (another Python ignores the file), one blob per
defining module, read only when that module defines a class (a start reads what it
uses). A module's blob holds the texts its last importer used, so texts of changed
classes do not pile up. Like Python's bytecode it is not written under
PYTHONDONTWRITEBYTECODE; ``make compile`` (``warm``) writes it anyway. Where the directory
is not writable nothing is stored and every start compiles, as before; an unreadable file
counts as none.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import sys
from importlib._bootstrap_external import MAGIC_NUMBER
from pathlib import Path

CACHE_FILE = Path(__file__).parent / "__pycache__" / f"dataclass-code.{sys.implementation.cache_tag}.marshal"


class CompiledTexts:
    """Code objects by source text, grouped by the module whose class the text is for.

    The file: the magic number, the size of an index, the index (marshal: module ->
    offset and size of its blob), then the blobs (marshal: text -> code). A start reads
    the index and the blobs of the modules it uses, from the file it opened: another
    process replacing the file meanwhile does not change what this one reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._index: dict[str, tuple[int, int]] = {}  # module -> (offset, size) after the index
        self._base = 0  # where the blobs start in the open file
        self._stored: dict[str, dict[str, object]] = {}  # unpacked blobs
        self._used: dict[str, dict[str, object]] = {}  # what this process looked up, by module
        self.compiled = 0  # texts compiled here: 0 once everything came from the file
        self._unsaved = False

    def load(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return  # none yet: compile as usual
        try:
            head = os.pread(fd, len(MAGIC_NUMBER) + 4, 0)
            if head[:len(MAGIC_NUMBER)] == MAGIC_NUMBER and len(head) == len(MAGIC_NUMBER) + 4:
                size = int.from_bytes(head[len(MAGIC_NUMBER):], "big")
                index = marshal.loads(os.pread(fd, size, len(head)))
                if isinstance(index, dict):
                    self._fd, self._index, self._base, fd = fd, index, len(head) + size, None
        except (OSError, ValueError, EOFError, TypeError):
            pass  # unreadable or written by another Python: compile as usual
        finally:
            if fd is not None:
                os.close(fd)

    def _blob(self, module: str) -> bytes | None:
        where = self._index.get(module)
        if where is None or self._fd is None:
            return None
        try:
            offset, size = where
            blob = os.pread(self._fd, size, self._base + offset)
        except (OSError, ValueError, TypeError):
            return None
        return blob if len(blob) == size else None

    def _stored_for(self, module: str) -> dict[str, object]:
        stored = self._stored.get(module)
        if stored is None:
            stored = {}
            blob = self._blob(module)
            if blob is not None:
                try:
                    stored = marshal.loads(blob)
                except (ValueError, EOFError, TypeError):
                    pass
            stored = self._stored[module] = stored if isinstance(stored, dict) else {}
        return stored

    def exec(self, source, globals=None, locals=None, /):
        """``exec`` for the dataclasses module: each text is compiled once."""
        if not isinstance(source, str):
            return exec(source, globals, locals)
        module = (globals or {}).get("__name__") or ""
        code = self._stored_for(module).get(source)
        if code is None:
            # dont_inherit: compiled as exec() compiles it in the dataclasses module, not under
            # this module's ``from __future__ import annotations`` (string annotations)
            code = compile(source, "<string>", "exec", dont_inherit=True)
            self.compiled += 1
            self._unsaved = True
        self._used.setdefault(module, {})[source] = code
        return exec(code, globals, locals)

    def save(self, force: bool = False) -> None:
        """Writes the file if this process compiled anything or left a stored text of a
        module it used unused; atomically, and quietly not at all where it cannot. Like
        Python's own bytecode, not under PYTHONDONTWRITEBYTECODE unless forced (``warm``)."""
        if sys.dont_write_bytecode and not force:
            return
        stale = any(len(self._stored_for(m)) != len(used) for m, used in self._used.items())
        if not (self._unsaved or stale or force):
            return
        blobs = {m: self._blob(m) for m in self._index if m not in self._used}
        blobs.update((m, marshal.dumps(used)) for m, used in self._used.items())
        index, offset = {}, 0
        for module, blob in blobs.items():
            if blob is not None:
                index[module] = (offset, len(blob))
                offset += len(blob)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(exist_ok=True)
            index_bytes = marshal.dumps(index)
            with open(tmp, "wb") as f:
                f.write(MAGIC_NUMBER + len(index_bytes).to_bytes(4, "big") + index_bytes)
                for blob in blobs.values():
                    if blob is not None:
                        f.write(blob)
            os.replace(tmp, self.path)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
            return
        self._stored.update(self._used)  # what the file now holds for them
        self._unsaved = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_texts: CompiledTexts | None = None


def install(path: Path = CACHE_FILE) -> CompiledTexts:
    """Loads the stored code and routes the dataclasses module's ``exec`` through it; from
    then on every ``@dataclass`` in this process uses it."""
    global _texts
    if _texts is None:
        _texts = CompiledTexts(path)
        _texts.load()
        dataclasses.exec = _texts.exec  # a module global shadows the builtin in that module only
    return _texts


def save() -> None:
    if _texts is not None:
        _texts.save()


def warm(path: Path = CACHE_FILE) -> int:
    """Compiles and stores the dataclass code of every broker module and of every request
    and response type the broker serves, at every version (``make compile``, the container
    build): a broker then compiles none of it, at start or at its first request of a
    kind. A start reads only the index and the modules it uses. Returns how many texts
    are stored."""
    import importlib
    import pkgutil

    if "kio" not in sys.modules:
        sys.modules.setdefault("hypothesis", None)  # as a broker does: no strategies for kio's types
    texts = install(path)
    for package in ("protocol", "coordinator", "broker"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if module.name.startswith("broker.testing"):  # the pytest plugin: pytest's, not the broker's
                continue
            importlib.import_module(module.name)
    from broker.wire.server import HANDLERS
    from protocol.request_wire import KAFKA_4_0
    from protocol.request_wire import request_class
    from protocol.answer_wire import response_class

    for api_key, (_name, advertised_min, _accepted_min, max_version) in KAFKA_4_0.items():
        if api_key not in HANDLERS:
            continue
        for version in range(advertised_min, max_version + 1):
            try:
                request_class(api_key, version)
                response_class(api_key, version)
            except KeyError:  # a version kio has no schema for (served another way)
                pass
    texts.save(force=True)
    return sum(len(used) for used in texts._used.values())


if __name__ == "__main__":
    from broker import dataclass_code  # the module broker.cli installs, not this __main__ copy

    print(f"{dataclass_code.warm()} dataclass method texts compiled into {CACHE_FILE}")
