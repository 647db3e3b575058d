"""docs/architecture.md names files, modules, classes and functions; each must exist, so the
map cannot drift from the code (as test_readme_api_table keeps the README's API table true).

- every path of the packages the page names exists;
- on each step of "The paths, file by file", every name given right after the step's
  file (before the colon) is defined in that file: at its top level, or as a member of
  one of its classes (``Class.member``);
- anywhere on the page, ``Class.member`` of a class the packages define is a member of it,
  and a bare name in backticks that looks like code (snake_case with an underscore, or
  UPPER_CASE) is defined somewhere in the packages."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("broker", "coordinator", "protocol", "spark_client")
PATH = re.compile(r"(?<![\w/.-])((?:broker|coordinator|protocol|spark_client)/[\w/]*\w(?:\.py)?)")
TICKED = re.compile(r"`([^`]+)`")
STEP = re.compile(r"^\d+\. `([\w/]+\.py)`(?: \(again\))?([^:]*):")
IDENTIFIER = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


class Defined:
    """What a module defines: top-level names, and each class's members (methods,
    class-level names, attributes its methods set on ``self``)."""

    def __init__(self, tree: ast.Module) -> None:
        self.names: set[str] = set()
        self.classes: dict[str, set[str]] = {}
        for node in tree.body:
            self.names |= _bound(node)
            if isinstance(node, ast.ClassDef):
                members = set()
                for item in node.body:
                    members |= _bound(item)
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                        targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                        for t in targets:
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                                members.add(t.attr)
                self.classes[node.name] = members

    def has(self, name: str) -> bool:
        owner, _, member = name.partition(".")
        if member:
            return member in self.classes.get(owner, ())
        return name in self.names or any(name in m for m in self.classes.values())


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = set()
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    names.add(n.id)
        return names
    if isinstance(node, (ast.ImportFrom, ast.Import)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.If, ast.Try)):
        return {name for child in node.body for name in _bound(child)}
    return set()


@cache
def defined(path: Path) -> Defined:
    return Defined(ast.parse(path.read_text(), str(path)))


@cache
def everywhere() -> tuple[dict[str, set[str]], set[str]]:
    """Every class's members and every defined name, across the packages."""
    classes: dict[str, set[str]] = {}
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            d = defined(path)
            names |= d.names
            for cls, members in d.classes.items():
                classes.setdefault(cls, set()).update(members)
                names |= members
    return classes, names


def _lines() -> list[str]:
    return PAGE.read_text().splitlines()


def missing_paths(lines: list[str]) -> list[str]:
    return sorted({p for line in lines for p in PATH.findall(line) if not (ROOT / p).exists()})


def undefined_step_names(lines: list[str]) -> list[tuple[str, str]]:
    bad = []
    for line in lines:
        m = STEP.match(line)
        if m is None:
            continue
        file, names = ROOT / m.group(1), TICKED.findall(m.group(2))
        if not file.exists():
            bad.append((m.group(1), "(no such file)"))
            continue
        for name in names:
            if IDENTIFIER.match(name) and not defined(file).has(name):
                bad.append((m.group(1), name))
    return bad


def undefined_names(lines: list[str]) -> list[str]:
    classes, names = everywhere()
    bad = set()
    for line in lines:
        for token in TICKED.findall(line):
            if not IDENTIFIER.match(token):
                continue
            owner, _, member = token.partition(".")
            if member:
                if owner in classes and member not in classes[owner]:
                    bad.add(token)
            elif (re.fullmatch(r"[A-Z][A-Z0-9_]+", token) or re.fullmatch(r"_?[a-z][a-z0-9]*(_[a-z0-9]+)+", token)) \
                    and token not in names:
                bad.add(token)
    return sorted(bad)


def test_every_path_the_page_names_exists():
    assert missing_paths(_lines()) == []


def test_every_step_names_what_its_file_defines():
    lines = _lines()
    steps = [line for line in lines if STEP.match(line)]
    assert len(steps) >= 50  # the three paths are there, and the pattern reads them
    assert undefined_step_names(lines) == []


def test_every_class_member_and_code_name_the_page_names_exists():
    assert undefined_names(_lines()) == []


def test_the_checks_catch_what_drifted():
    drifted = [
        "1. `broker/coordinators/transaction_service.py` `MarkerSender.sned`: a misspelt method.",
        "2. `broker/no_such_module.py` `x`: a file that went.",
        "3. `broker/coordinators/transaction_service.py` `MARKER_WAIT_S`: a constant that never was.",
        "In prose, `TransactionService.gone` and `NO_SUCH_SETTING_NAME`, at broker/gone.py.",
    ]
    assert undefined_step_names(drifted) == [("broker/coordinators/transaction_service.py", "MarkerSender.sned"),
                                             ("broker/no_such_module.py", "(no such file)"),
                                             ("broker/coordinators/transaction_service.py", "MARKER_WAIT_S")]
    assert undefined_names(drifted) == ["MARKER_WAIT_S", "MarkerSender.sned", "NO_SUCH_SETTING_NAME",
                                        "TransactionService.gone"]
    assert missing_paths(drifted) == ["broker/gone.py", "broker/no_such_module.py"]


def _steps_of(lines: list[str], heading: str) -> list[tuple[int, str]]:
    """(number, file) of each step under ``heading``, up to the next heading."""
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return [(int(line.split(".", 1)[0]), m.group(1)) for line in lines[start:end] if (m := STEP.match(line))]


def end_txn_files(lines: list[str]) -> set[str]:
    """The files EndTxn meets: its own steps' and those of the Produce steps its step 1
    goes through ("as Produce's steps 1-N")."""
    produce = _steps_of(lines, "### A transactional Produce (socket to acknowledged batch)")
    start = lines.index("### EndTxn (socket to the LSO)")
    last = int(re.search(r"as Produce's steps 1-(\d+)", lines[start + 2]).group(1))
    return {file for _, file in _steps_of(lines, "### EndTxn (socket to the LSO)")} | \
        {file for number, file in produce if number <= last}


def test_the_end_txn_path_counts_the_files_its_steps_name():
    lines = _lines()
    stated = next(int(m.group(1)) for line in lines if (m := re.match(r"That is (\d+) files in the steps", line)))
    assert len(end_txn_files(lines)) == stated


def test_the_end_txn_total_is_its_steps_files_and_those_beside_them():
    """"Beside the steps, N files ...": the paragraph names N files none of the steps
    names, and the total the page states is the steps' count and those N."""
    lines = _lines()
    start = next(i for i, line in enumerate(lines) if line.startswith("That is ") and " files in the steps" in line)
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    paragraph = " ".join(lines[start:end])
    stated_beside = int(re.search(r"Beside the steps, (\d+) files?", paragraph).group(1))
    beside = set(PATH.findall(paragraph.split("Beside the steps", 1)[1].split("So EndTxn", 1)[0]))
    steps = end_txn_files(lines)
    assert not beside & steps
    assert len(beside) == stated_beside
    assert int(re.search(r"runs code in (\d+) files", paragraph).group(1)) == len(steps) + len(beside)
