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


def read_small_file(path: Path) -> bytes:
    """The whole content of a file (an index, a snapshot, a checkpoint) read with one
    open, fstat and read: a buffered ``open().read()`` makes twice the system calls."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size) if size else b""
        if len(data) < size:  # a short read: the rest, up to end of file
            parts = [data]
            while chunk := os.read(fd, 1 << 20):
                parts.append(chunk)
            data = b"".join(parts)
        return data
    finally:
        os.close(fd)


# How many fsyncs one pass keeps in flight: the filesystem commits concurrent fsyncs
# together, where one after another each waits for a journal commit of its own.
FSYNC_PASS_THREADS = 16


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_all(paths, threads: int = FSYNC_PASS_THREADS) -> None:
    """fsyncs every file and directory of ``paths`` (each opened by its path) in one
    pass, several at a time: what a clean stop or a recovery-point checkpoint wrote
    across many partitions becomes durable at once, before the record that relies on it
    (the recovery points, the clean-shutdown marker) is written. Raises the first
    OSError once the pass is over."""
    paths = list(dict.fromkeys(paths))
    if len(paths) <= 1:
        for path in paths:
            _fsync_path(path)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(paths)), thread_name_prefix="fsync") as pool:
        failures = [f.exception() for f in [pool.submit(_fsync_path, path) for path in paths]]
    first = next((e for e in failures if e is not None), None)
    if first is not None:
        raise first


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


class JsonJournal:
    """A JSON object (string keys) kept as ``path`` plus ``<path>.journal`` beside it: a
    change appends one line per key (``[key, value]`` sets, ``[key]`` removes) instead of
    rewriting the whole file, so creating many topics one by one is not quadratic. When
    the journal holds more lines than the object has keys (and over 64), the file is
    rewritten whole and the journal removed: amortised, a change costs its own lines.

    A change is appended before any rewrite, so a crash between the rewrite and the
    journal's removal replays lines that agree with the file. A torn last line (a crash
    in the middle of an append, never acknowledged) is ignored.
    """

    def __init__(self, path: Path, to_file=None, from_file=None, **dumps_options) -> None:
        self.path = path
        self.journal_path = path.with_name(path.name + ".journal")
        self._to_file = to_file or (lambda value: value)
        self._from_file = from_file or (lambda value: value)
        self._dumps_options = dumps_options
        self._lines = 0

    def load(self) -> dict:
        """The object as the file and the journal's complete lines make it;
        FileNotFoundError when neither exists."""
        try:
            value = self._from_file(read_json(self.path))
        except FileNotFoundError:
            value = None
        try:
            text = self.journal_path.read_text()
        except FileNotFoundError:
            text = ""
        if value is None and not text:
            raise FileNotFoundError(self.path)
        value = {} if value is None else value
        import json

        complete = text[:text.rfind("\n") + 1]  # the part after the last newline is torn, or empty
        lines = complete.count("\n")
        # one parse for every line (each is a JSON array, so joined they make one array)
        for change in json.loads("[" + complete.replace("\n", ",")[:-1] + "]") if lines else ():
            if len(change) == 2:
                value[change[0]] = change[1]
            else:
                value.pop(change[0], None)
        self._lines = lines
        return value

    def exists(self) -> bool:
        return self.path.exists() or self.journal_path.exists()

    def change(self, whole: dict, changed: dict, removed=()) -> None:
        """Records ``changed`` (key -> new value) and ``removed`` keys; ``whole`` is the
        object with them applied, written out when the journal has grown long enough."""
        import json

        lines = [json.dumps([k, v], separators=(",", ":")) for k, v in changed.items()]
        lines += [json.dumps([k]) for k in removed]
        if not lines:
            return
        # no line appended since the last load or rewrite: the journal may be created here,
        # and its name must be as durable as its first line
        creating = not self._lines and not self.journal_path.exists()
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, ("\n".join(lines) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if creating:
            fsync_dir(self.journal_path.parent)
        self._lines += len(lines)
        if self._lines > max(64, len(whole)):
            self.rewrite(whole)

    def compact(self, whole: dict) -> None:
        """Folds the journal into the file (a clean stop): the next start parses one
        object instead of replaying a line per change."""
        if self._lines:
            self.rewrite(whole)

    def rewrite(self, whole: dict) -> None:
        """Writes the object whole and drops the journal."""
        write_json(self.path, self._to_file(whole), **self._dumps_options)
        try:
            self.journal_path.unlink()
        except FileNotFoundError:
            pass
        self._lines = 0
