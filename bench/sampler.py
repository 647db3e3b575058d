"""Broker resource use through psutil: RSS sampled on a thread, CPU seconds on demand.

Children are included so a broker that forks workers (or a launcher script) is
measured whole.
"""

from __future__ import annotations

import threading

import psutil

SAMPLE_INTERVAL_S = 0.05


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
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss-sampler", daemon=True)

    def rss(self) -> int:
        return _sum_over_tree(self.process, lambda p: p.memory_info().rss)

    def cpu_seconds(self) -> float:
        def user_plus_system(p: psutil.Process) -> float:
            t = p.cpu_times()
            return t.user + t.system

        return _sum_over_tree(self.process, user_plus_system)

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
