"""What the followers' Fetch requests tell about replication (Kafka's ``Replica`` state
of a ``Partition``), without I/O: the caller (broker/cluster/replication.py) sends the
fetches through the network and reports what became of each.

- How far each follower holds a partition: the ``fetch_offset`` of its latest fetch the
  leader handled (a follower asks from its own log end). The high watermark is the
  lowest of these over the ISR, the leader's log end included; an acks=all write is
  replicated once it is below it.
- Since when each follower has been unable to fetch: every attempt since then failed
  (the link cut, the request lost, held or refused, the answer an error or never
  received). A follower unable to fetch for longer than ``replica.lag.time.max.ms``
  is out of sync: the leader drops it from the ISR. (Kafka counts from the follower's
  last fetch that reached the log end; that count would also drop a healthy follower
  whenever the broker's clock is moved forward, which a fetch loop cannot keep up with.)
"""

from __future__ import annotations

Key = tuple[str, int, int]  # (topic, partition, follower)


class FollowerFetches:
    def __init__(self, lag_ms: int) -> None:
        self.lag_ms = lag_ms
        self.fetched: dict[Key, int] = {}
        self.failing_since: dict[Key, int] = {}
        self._reported: set[Key] = set()  # failing ones ``take_out_of_sync`` has given

    def caught_up(self, key: Key, log_end: int) -> None:
        """The follower holds the whole log (every follower when fetching begins: they
        were in sync until then; a node that has just started)."""
        self.fetched[key] = log_end
        self.answered(key)

    def handled(self, key: Key, fetch_offset: int) -> None:
        """The leader handled the follower's fetch from ``fetch_offset``."""
        self.fetched[key] = fetch_offset

    def answered(self, key: Key) -> None:
        """The follower received an answer without error for the partition."""
        if self.failing_since.pop(key, None) is not None:
            self._reported.discard(key)

    def able(self, key: Key) -> bool:
        """Whether the follower's last attempt to fetch the partition got its answer."""
        return key not in self.failing_since

    def failed(self, key: Key, now_ms: int) -> None:
        """The follower's attempt to fetch the partition failed."""
        self.failing_since.setdefault(key, now_ms)

    def fetched_offset(self, key: Key) -> int:
        """How far the follower holds the log (-1: not known)."""
        return self.fetched.get(key, -1)

    def high_watermark(self, followers: list[Key], log_end: int) -> int:
        """The offset every ISR member (``followers``, and the leader at ``log_end``) holds."""
        low = log_end
        for key in followers:
            offset = self.fetched.get(key, -1)
            if offset < low:
                low = offset
        return low

    def take_out_of_sync(self, now_ms: int) -> list[tuple[Key, int]]:
        """The followers unable to fetch for longer than the lag, with since when, each
        given once until it fetches again (the leader acts on each once)."""
        out = [(key, since) for key, since in self.failing_since.items()
               if now_ms - since > self.lag_ms and key not in self._reported]
        self._reported.update(key for key, _ in out)
        return out

    def next_out_of_sync_ms(self) -> int | None:
        """When the next follower unable to fetch becomes out of sync (if still unable)."""
        due = [since for key, since in self.failing_since.items() if key not in self._reported]
        return min(due) + self.lag_ms + 1 if due else None

    def forget(self, key: Key) -> None:
        self.fetched.pop(key, None)
        self.failing_since.pop(key, None)
        self._reported.discard(key)

    def clear(self) -> None:
        self.fetched.clear()
        self.failing_since.clear()
        self._reported.clear()
