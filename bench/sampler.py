"""Broker resource use through psutil: RSS sampled on a thread, CPU seconds on demand.

Children are included so a broker that forks workers (or a launcher script) is
measured whole.
"""

from __future__ import annotations

import os
import threading

import psutil

SAMPLE_INTERVAL_S = 0.05
# A JVM's just-in-time compiler threads (names as /proc shows them, cut at 15 characters).
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int, name_prefixes: tuple[str, ...]) -> float:
    """User+system CPU seconds of the process's threads whose names start with one of the
    prefixes (Linux /proc); 0 for a process that has none, or has gone."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().rstrip("\n")
            if not name.startswith(name_prefixes):
                continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue  # the thread ended
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / _TICKS_PER_S


def _tree(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _sum_over_tree(process: psutil.Process, measure) -> int | float:
    total = 0
    for p in _tree(process):
        try:
            total += measure(p)
        except psutil.NoSuchProcess:
            pass
    return total


class ResourceSampler:
    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak_rss = 0
        self.last_rss = 0
        self.cpu_at_start = self.cpu_seconds()
        self.jit_at_start = self.jit_cpu_seconds()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss-sampler", daemon=True)

    def rss(self) -> int:
        return _sum_over_tree(self.process, lambda p: p.memory_info().rss)

    def cpu_seconds(self) -> float:
        def user_plus_system(p: psutil.Process) -> float:
            t = p.cpu_times()
            return t.user + t.system

        return _sum_over_tree(self.process, user_plus_system)

    def run_seconds(self) -> float:
        """On-CPU seconds of the broker's process tree to the nanosecond (the scheduler's
        per-thread run time, /proc/<pid>/task/<tid>/schedstat), for spans whose CPU is a
        few clock ticks (a 200,000-record produce takes ~100 ms of broker CPU: ten ticks).
        Falls back to ``cpu_seconds`` where the kernel does not keep schedstat."""
        total = 0
        for p in _tree(self.process):
            try:
                tids = os.listdir(f"/proc/{p.pid}/task")
            except OSError:
                continue  # the process ended
            for tid in tids:
                try:
                    with open(f"/proc/{p.pid}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
                except FileNotFoundError:
                    if not os.path.exists("/proc/self/schedstat"):
                        return self.cpu_seconds()
                except OSError:
                    continue  # the thread ended
        return total / 1e9

    def jit_cpu_seconds(self) -> float:
        """CPU seconds of JIT compiler threads (a JVM's; 0 for brokers without them)."""
        return sum(thread_cpu_seconds(p.pid, JIT_THREADS) for p in _tree(self.process))

    def sample(self) -> int:
        rss = self.rss()
        if rss:
            self.last_rss = rss
            self.peak_rss = max(self.peak_rss, rss)
        return rss

    def _run(self) -> None:
        while not self._stopped.wait(SAMPLE_INTERVAL_S):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * SAMPLE_INTERVAL_S + 1)
