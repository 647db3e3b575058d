"""The one place that reaches into kio's private modules.

kio's public API builds and writes whole messages. The compiled layouts, the wire-shape
check and the fault answers also need to walk a message's fields and write one field
at a time, which only kio's private ``_introspect``, ``_serialize`` and
``_implicit_defaults`` offer. They may change in any kio release, so they are imported
here and nowhere else, and tests/unit/test_kio_private.py pins the kio version this
module was written for.
"""

from __future__ import annotations

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio._version import __version__ as INSTALLED_KIO

# The kio release these imports were written and checked against.
WRITTEN_FOR_KIO = "0.6.5"

__all__ = [
    "INSTALLED_KIO",
    "WRITTEN_FOR_KIO",
    "EntityField",
    "EntityTupleField",
    "PrimitiveTupleField",
    "classify_field",
    "get_field_writer",
    "get_tagged_field_default",
    "is_optional",
]
