"""Which test left a confluent-kafka (librdkafka) client alive.

Such a client keeps reconnecting to its broker after the broker stopped, logging
connection errors for the rest of the run, far from the test that made it. The pytest
plugin counts the live clients around each test and warns (or fails the test, with the
ini setting ``eosbroker_client_leaks = fail``) when a test ends with more than it began.
"""

from __future__ import annotations

import gc
import os
import time


class ClientLeakWarning(UserWarning):
    """A test ended with a confluent-kafka client still alive."""


def librdkafka_clients() -> int:
    """Live librdkafka handles in this process: each runs one thread named rdk:main."""
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no /proc: nothing to check
        return 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                count += comm.read().strip() == "rdk:main"
        except OSError:  # the thread ended meanwhile
            pass
    return count


def clients_outliving(before: int, wait_s: float) -> int:
    """How many clients more than ``before`` are alive, once garbage is collected and a
    handle being destroyed late (from one of librdkafka's own threads) had ``wait_s``
    to finish."""
    if librdkafka_clients() <= before:
        return 0
    gc.collect()
    deadline = time.monotonic() + wait_s
    while (after := librdkafka_clients()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    return max(0, after - before)


def leak_message(test: str, leaked: int) -> str:
    return (f"{test}: {leaked} confluent-kafka client(s) outlived the test and keep reconnecting to "
            "its broker: close() them, or drop every reference (a thread, a fixture, a global, a kept exception)")
