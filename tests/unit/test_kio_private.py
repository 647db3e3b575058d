"""kio's private modules are reached through protocol/kio_private.py only, and for the
kio release that module was written for."""

import ast
import importlib.metadata
import pathlib

from protocol.kio_private import WRITTEN_FOR_KIO

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "coordinator", "broker", "spark_client", "torture", "bench", "tools")


def _private_kio_imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kio" and any(part.startswith("_") for part in parts[1:]):
                found.append(name)
    return found


def test_the_installed_kio_is_the_release_the_adapter_was_written_for():
    assert importlib.metadata.version("kio") == WRITTEN_FOR_KIO


def test_no_other_module_imports_kio_private_modules():
    offenders = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "protocol" / "kio_private.py":
                continue
            found = _private_kio_imports(path)
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_checker_sees_a_private_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from kio.serial._introspect import classify_field\nimport kio.schema\n")
    assert _private_kio_imports(probe) == ["kio.serial._introspect"]
