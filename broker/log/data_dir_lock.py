"""One broker process per data directory, as Kafka takes a ``.lock`` file in each log
directory: a second broker on the same files would serve the same partitions, and its
clean shutdown would vouch for files the first one is still writing.

The lock is an fcntl lock on ``<data dir>/.lock``, so it lives exactly as long as the
process holding it (kill -9 frees it); the file holds that process's id, for the message
another broker prints when it finds the directory taken.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirError(Exception):
    """The data directory cannot be used: one line saying why."""


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self._file = None

    def acquire(self) -> "DataDirLock":
        """Creates the directory if needed and locks it; DataDirError when it is not
        writable or another process holds it."""
        data_dir = self.path.parent
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            # a file object: a broker dropped without stop() (a test's) still closes it
            lock_file = open(self.path, "a+b", buffering=0)
        except OSError as e:
            raise DataDirError(unusable(data_dir, e)) from None
        try:
            fcntl.lockf(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _pid_in(lock_file)
            lock_file.close()
            raise DataDirError(f"data directory '{data_dir}' is in use by another broker"
                               + (f" (pid {holder})" if holder else "")) from None
        if not os.access(data_dir, os.W_OK):  # the lock file was there already; new files could not be
            lock_file.close()
            raise DataDirError(f"data directory '{data_dir}' is not writable")
        try:
            lock_file.truncate(0)
            lock_file.write(f"{os.getpid()}\n".encode())
        except OSError as e:
            lock_file.close()
            raise DataDirError(unusable(data_dir, e)) from None
        self._file = lock_file
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the lock
            self._file = None


def unusable(data_dir: Path, e: OSError) -> str:
    """One line for an OSError met creating or opening something in the data directory."""
    where = f" ({e.filename})" if e.filename is not None else ""
    return f"data directory '{data_dir}' is not usable: {e.strerror}{where}"


def _pid_in(lock_file) -> int | None:
    try:
        lock_file.seek(0)
        text = lock_file.read(32).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
