"""The C allocator's settings for the data path's large buffers.

Every Fetch answer and large Produce request is a buffer of up to a megabyte or more,
allocated and freed once per request. With glibc's defaults each one is fresh memory
from the kernel: the heap top is given back (trimmed) as soon as 128 kB-2 MB lie free
there, so the next request grows it again through brk, page faults and zeroed pages.
Keeping up to 16 MB of freed heap for reuse spares that (the bench's consume workload
shows it). The ctypes import waits for the first Produce or Fetch, off the start-up path.
"""

from __future__ import annotations

_M_TRIM_THRESHOLD = -1  # mallopt parameters, as <malloc.h> numbers them
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_SETTINGS = ((_M_TRIM_THRESHOLD, 16 << 20), (_M_TOP_PAD, 4 << 20), (_M_MMAP_THRESHOLD, 4 << 20))

tuned = False  # read by the handlers on each request: one global lookup once it is set


def keep_freed_buffers() -> bool:
    """Sets the process's allocator to keep freed large buffers (once); True when the C
    library took every setting, False where it has no mallopt (not glibc)."""
    global tuned
    tuned = True
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(param, value) == 1 for param, value in _SETTINGS)
