"""File descriptors as a bounded resource: the storage files (segments, their indexes,
aborted-transaction indexes) are opened on demand and the least recently used are
closed once ``capacity`` of them are open.

Every partition's files go through it, the coordinator topics' included: nothing is
pinned. A file is appended to through the descriptor it holds (``PooledFile.descriptor``,
as Kafka's segment holds its channel): an append opens nothing while its files are open,
so none can be closed under it (the pool closes a file only to open another), and it
does not ask the pool; it marks the file ``written``, and the pool, about to close the
least recently opened or read file, passes over one marked since it last looked (clearing
the mark): the active segment of a partition being written stays open. Closed, a file is
reopened for appending (O_APPEND) at its next write (``PooledFile.fd``), and a
coordinator reads its partition's log once, when it loads.

One table per process, as the descriptor limit is per process. Closing a file loses
nothing written to it (the page cache keeps it; an fsync through a later descriptor
flushes it). Only the event loop thread uses the table; code that holds a descriptor
number must not open another pooled file before it is done with it.
"""

from __future__ import annotations

import errno
import logging
import os
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger(__name__)

APPEND_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
# Below it the pool would thrash: a read holds a segment while its indexes are opened.
MIN_CAPACITY = 16
# The share of the descriptor limit the storage files may take when no cap is set;
# the rest is for connections, snapshots, metadata files and the runtime.
_DEFAULT_SHARE = 0.5
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def descriptor_limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE; (-1, -1) where the platform has none."""
    try:
        import resource
    except ImportError:
        return -1, -1
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def raise_descriptor_limit() -> int:
    """Raises the soft descriptor limit to the hard one (as ``ulimit -n hard`` would) and
    logs both; returns the soft limit now in force (-1: unknown)."""
    soft, hard = descriptor_limits()
    if soft < 0 and hard < 0:
        return -1
    import resource

    target = hard
    if target == resource.RLIM_INFINITY:
        target = 1 << 20  # what the kernel accepts at most by default (nr_open)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("file descriptors: soft limit raised from %d to the hard limit %d", soft, target)
            return target
        except (ValueError, OSError) as e:
            log.warning("file descriptors: cannot raise the soft limit %d to the hard limit %d (%s)", soft, hard, e)
            return soft
    log.info("file descriptors: soft limit %d, hard limit %d", soft, hard)
    return soft


def capacity_for(setting: int, soft_limit: int) -> int:
    """The pool size: the ``log.open.files.max`` setting when positive, else a share of
    the soft limit."""
    if setting > 0:
        return max(MIN_CAPACITY, setting)
    if soft_limit <= 0:
        return 4096
    return max(MIN_CAPACITY, int(soft_limit * _DEFAULT_SHARE))


class DescriptorPool:
    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = max(MIN_CAPACITY, capacity)
        self._open: OrderedDict[PooledFile, None] = OrderedDict()  # least recently used first
        self.opens = 0  # descriptors opened, reopens included (a metric)
        self.failures = 0

    def __len__(self) -> int:
        return len(self._open)

    def resize(self, capacity: int) -> None:
        self.capacity = max(MIN_CAPACITY, capacity)
        self._shrink(self.capacity)

    def _shrink(self, size: int) -> None:
        while len(self._open) > size:
            victim, _ = self._open.popitem(last=False)
            if victim.written:  # a second chance: written to since the pool last looked
                victim.written = False
                self._open[victim] = None
                continue
            victim._release()

    def open(self, f: PooledFile) -> int:
        self._shrink(self.capacity - 1)
        try:
            fd = os.open(f.path, f.flags, 0o644)
        except OSError as e:
            if e.errno in OUT_OF_DESCRIPTORS:
                raise self.out_of_descriptors(e, str(f.path)) from None
            raise
        self.opens += 1
        f.descriptor = fd
        self._open[f] = None
        return fd

    def out_of_descriptors(self, error: OSError, what: str) -> OSError:
        """The process ran out of descriptors (EMFILE/ENFILE) opening ``what``: the pool
        gives back a quarter of its files and keeps to that size from now on, so that
        the next request finds descriptors again; logs what to raise. Returns the error
        for the caller to raise (its request answers KAFKA_STORAGE_ERROR)."""
        self.failures += 1
        before = self.capacity
        self.capacity = max(MIN_CAPACITY, len(self._open) * 3 // 4)
        self._shrink(self.capacity)
        soft, _ = descriptor_limits()
        message = (f"out of file descriptors opening {what} ({os.strerror(error.errno)}, soft limit {soft}): "
                   f"raise the limit (ulimit -n, LimitNOFILE=, docker --ulimit nofile=) or lower "
                   f"log.open.files.max; storage files kept open now at most {self.capacity} (was {before})")
        if self.failures == 1 or self.failures % 100 == 0:
            log.error("%s [%d times so far]", message, self.failures)
        return OSError(error.errno, message)

    def forget(self, f: PooledFile) -> None:
        self._open.pop(f, None)


POOL = DescriptorPool()


def storage_error(error: OSError) -> OSError:
    """An OSError from storage as it is logged: out of descriptors (and not already
    reported by the pool), the pool gives some back and the message names what to raise."""
    if error.errno in OUT_OF_DESCRIPTORS and error.filename is not None:
        return POOL.out_of_descriptors(error, error.filename)
    return error


class PooledFile:
    """A file opened through the pool when its descriptor is asked for (``fd``), and
    closed when it is the least recently used one and room is needed. ``descriptor`` is
    the one it holds, -1 while it is not open: an append writes through it as it is."""

    __slots__ = ("path", "flags", "descriptor", "closed", "written")

    def __init__(self, path: Path, flags: int = APPEND_FLAGS) -> None:
        self.path = path
        self.flags = flags
        self.descriptor = -1
        self.closed = False
        self.written = False  # appended to through ``descriptor`` since the pool last looked

    @property
    def fd(self) -> int:
        """The descriptor, (re)opened if needed, and the file now the most recently used;
        OSError once closed."""
        fd = self.descriptor
        if fd >= 0:
            POOL._open.move_to_end(self)
            return fd
        if self.closed:
            raise OSError(errno.EBADF, f"{self.path} is closed")
        return POOL.open(self)

    @property
    def is_open(self) -> bool:
        return self.descriptor >= 0

    def _release(self) -> None:
        fd, self.descriptor = self.descriptor, -1
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        """Closes for good: the descriptor now, and no reopening."""
        self.closed = True
        if self.descriptor >= 0:
            POOL.forget(self)
            self._release()
