"""The specs of the answer and request types, stored once per installation.

``answer_type`` and ``request_type`` (protocol/answer_wire.py) make each API's message
type from the union of its fields over every version the broker serves; reading those
fields from kio imports the schema module of every version (a first Metadata answer
imported 28 modules for it). ``make compile`` stores each type's spec (plain data,
``answer_wire.message_spec``; ``python -m protocol.answer_wire`` stores them) in a file
beside the protocol's bytecode; a start reads the file once and then imports only the
schema of the version a request or answer uses. Where the directory is not writable
nothing is stored, as for the dataclass code.

The file is used only when its fingerprint matches: the spec format, kio's version, the
served versions table, and the size and modification time of the modules the specs are
made from. Otherwise, or with no file (a checkout where ``make compile`` has not run),
every spec is made from kio's schemas, as before.
"""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path

FORMAT = 1
CACHE_FILE = Path(__file__).parent / "__pycache__" / f"message-specs.{sys.implementation.cache_tag}.marshal"
_SOURCES = ("answer_wire.py", "request_wire.py", "own_schemas.py")

_specs: dict[tuple[str, int], tuple] | None = None


def _fingerprint() -> tuple:
    from protocol.kio_private import INSTALLED_KIO

    here = Path(__file__).parent
    sources = []
    for name in _SOURCES:
        try:
            st = os.stat(here / name)
        except OSError:
            return ()
        sources.append((name, st.st_size, st.st_mtime_ns))
    from protocol.request_wire import KAFKA_4_0

    return (FORMAT, INSTALLED_KIO, tuple(sorted(KAFKA_4_0.items())), tuple(sources))


def _load() -> dict[tuple[str, int], tuple]:
    try:
        stored = marshal.loads(CACHE_FILE.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(stored, tuple) or len(stored) != 2 or stored[0] != _fingerprint():
        return {}
    return stored[1]


def stored(direction: str, api_key: int) -> tuple | None:
    """The stored spec of ``direction``'s ("answer" or "request") type of ``api_key``, or
    None (no file, a stale one, or an API it does not hold)."""
    global _specs
    if _specs is None:
        _specs = _load()
    return _specs.get((direction, api_key))


def save(specs: dict[tuple[str, int], tuple], path: Path = CACHE_FILE) -> None:
    """Stores ``specs`` (by (direction, API key)) with the fingerprint of this installation."""
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(marshal.dumps((_fingerprint(), specs)))
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
