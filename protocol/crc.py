"""CRC-32C (Castagnoli), computed in C by the crc32c package, imported on first use.

Importing crc32c pulls in importlib.metadata, about 20 ms of every broker start;
callers use ``crc.crc32c(data)`` and the first call replaces this function with
the C one.
"""


def crc32c(data) -> int:
    global crc32c
    from crc32c import crc32c as impl

    crc32c = impl
    return impl(data)
