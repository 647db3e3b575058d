"""CRC-32C (Castagnoli), computed in C by the crc32c package, loaded on first use.

The package's ``__init__`` asks importlib.metadata for its own version, costly CPU
on the way to a restarted broker's first recovery check or a fresh one's first
produce; only its C function is needed, so its extension module is loaded alone when
it is where the package keeps it, and the package is imported otherwise. Callers use
``crc.crc32c(data)``; the first call replaces this function with the C one.
"""

import sys


def crc32c(data) -> int:
    global crc32c
    crc32c = _c_function()
    return crc32c(data)


def _c_function():
    if "crc32c" not in sys.modules:
        try:
            from importlib.machinery import PathFinder
            from importlib.util import find_spec, module_from_spec

            package = find_spec("crc32c")
            spec = PathFinder.find_spec("crc32c._crc32c", package.submodule_search_locations)
            module = module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.crc32c
        except (ImportError, AttributeError, TypeError):  # laid out otherwise: the package's own way
            pass
    from crc32c import crc32c as impl

    return impl
