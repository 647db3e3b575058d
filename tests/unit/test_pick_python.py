"""tools/pick-python.sh: the Makefile's choice of the venv's interpreter."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "pick-python.sh"


def pick(*candidates: str) -> str:
    return subprocess.run(["sh", str(SCRIPT), *candidates], capture_output=True, text=True, check=True).stdout.strip()


def fake_python(tmp_path: Path, name: str, exit_code: int) -> str:
    """An executable that answers the script's check with exit_code, as an interpreter would."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\ncat >/dev/null\nexit {exit_code}\n")
    path.chmod(0o755)
    return str(path)


def test_first_candidate_that_passes_the_check_is_chosen(tmp_path):
    refused = fake_python(tmp_path, "shared-build", 1)
    accepted = fake_python(tmp_path, "optimized-build", 0)
    also = fake_python(tmp_path, "another-optimized-build", 0)
    assert pick(refused, accepted, also) == accepted


def test_missing_candidates_are_skipped_and_python3_is_the_fallback(tmp_path):
    refused = fake_python(tmp_path, "shared-build", 1)
    assert pick(str(tmp_path / "absent"), refused) == "python3"
    assert pick() == "python3"


def test_an_interpreter_is_judged_by_how_it_was_built():
    """This test's own interpreter passes exactly when it is 3.11+, can make a venv and is
    either configured with --enable-optimizations or does not map a shared libpython."""
    import importlib.util
    import sysconfig

    with open("/proc/self/maps") as maps:
        shared = "libpython" in maps.read()
    optimized = "--enable-optimizations" in (sysconfig.get_config_var("CONFIG_ARGS") or "") or not shared
    can_make_venv = all(importlib.util.find_spec(m) for m in ("venv", "ensurepip"))
    expected = sys.executable if optimized and can_make_venv else "python3"
    assert pick(sys.executable) == expected
