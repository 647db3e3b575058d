"""Durable small-file writes shared by the storage and metadata code."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Makes renames and creations in ``directory`` durable (POSIX); a no-op where a
    directory cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, data: bytes, *, fsync: bool = True, sync_dir: bool = False) -> None:
    """Replaces ``path`` with ``data`` through ``<name>.tmp`` and a rename, so a crash
    leaves either the old file or the new one, never a prefix of it."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


# The metadata files (topics, partitions, ACLs, SCRAM users, dynamic configs) are JSON.
# json is imported on first use: a fresh broker reads and writes none of them on its way
# to serving its first request.

def read_json(path: Path):
    """The value stored in ``path``; FileNotFoundError when there is none."""
    text = path.read_text()  # first: a missing file raises before json is loaded
    import json

    return json.loads(text)


def write_json(path: Path, value, **dumps_options) -> None:
    """Replaces ``path`` atomically with ``value`` as JSON (``json.dumps`` options)."""
    import json

    replace_atomically(path, json.dumps(value, **dumps_options).encode())
