#!/bin/sh
# Prints the interpreter the Makefile makes .venv with: the first of the candidates given
# that is Python >= 3.11, can make a venv, and is an optimized build; else python3.
#
# The broker is interpreter-bound, so the build matters: pyenv's default build (shared
# libpython, no PGO or LTO) costs it markedly more CPU than a distribution's python3
# (Debian links it statically, with PGO and LTO) on the same transactional load. Builds configured
# with --enable-optimizations (the official Docker images) count as optimized too.
for candidate in "$@"; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" - 2>/dev/null <<'CHECK'
import importlib.util
import sys
import sysconfig

if sys.version_info < (3, 11) or not all(importlib.util.find_spec(m) for m in ("venv", "ensurepip")):
    sys.exit(1)
if "--enable-optimizations" in (sysconfig.get_config_var("CONFIG_ARGS") or ""):
    sys.exit(0)
with open("/proc/self/maps") as maps:  # a shared libpython mapped: not a distribution's build
    sys.exit(1 if "libpython" in maps.read() else 0)
CHECK
    then
        echo "$candidate"
        exit 0
    fi
done
echo python3
