"""Resolves a Maven project's runtime classpath into the local Maven cache, once.

The classpath is remembered in a cache directory outside the repository, keyed by the
pom's content, so a test session pays for Maven only when the pom changed or a jar
vanished from ~/.m2. Nothing binary is ever written into the repository.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "eosbroker" / "reference"


class ToolMissing(RuntimeError):
    pass


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ToolMissing(f"{tool} is not installed: run `make java` (installs Java 17 and Maven)")
    return path


def mvn_command(pom: Path, *goals: str) -> list[str]:
    return [require("mvn"), "-B", "-q", "-f", str(pom), *goals]


def _locked(name: str):
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    lock = open(CACHE_DIR / f"{name}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def pom_key(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


def classpath(pom: Path, name: str) -> str:
    """The runtime classpath of `pom`'s dependencies, resolved by Maven if needed."""
    cached = CACHE_DIR / f"{name}-{pom_key(pom)}.classpath"
    with _locked(name):
        if cached.exists():
            entries = cached.read_text().strip().split(os.pathsep)
            if entries and all(Path(e).exists() for e in entries):
                return os.pathsep.join(entries)
        out = cached.with_suffix(".tmp")
        result = subprocess.run(
            mvn_command(pom, "dependency:build-classpath", "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={out}"),
            capture_output=True, text=True, timeout=900,
        )
        if result.returncode != 0:
            raise RuntimeError(f"maven could not resolve {pom}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        os.replace(out, cached)
        return cached.read_text().strip()


def built_jar(project: Path, name: str) -> Path:
    """Builds a Maven project's jar (once per content of its pom and sources) into the cache."""
    digest = hashlib.sha256()
    for f in sorted(p for p in project.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(f.relative_to(project)).encode())
        digest.update(f.read_bytes())
    key = digest.hexdigest()[:16]
    jar = CACHE_DIR / f"{name}-{key}.jar"
    with _locked(name):
        if jar.exists():
            return jar
        build_dir = CACHE_DIR / f"{name}-build"
        result = subprocess.run(
            mvn_command(project / "pom.xml", "package", "-DskipTests", f"-DbuildDirectory={build_dir}"),
            capture_output=True, text=True, timeout=900,
        )
        if result.returncode != 0:
            raise RuntimeError(f"maven could not build {project}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
        produced = sorted(build_dir.glob("*.jar"))
        if not produced:
            raise RuntimeError(f"maven built no jar for {project}")
        shutil.copyfile(produced[0], jar)
        return jar
