"""A tiny in-test runtime for GroupCoordinator: appends each Result's records to an
in-memory log (increasing offsets), replays them, collects Reply effects, and moves a
fake clock through the coordinator's deadlines. ``restart`` rebuilds a coordinator
from the log as a broker would at start-up."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from coordinator.group import (
    GroupConfig,
    GroupCoordinator,
    JoinProtocol,
    Reply,
    SyncAssignment,
    TransactionalOffsetRecord,
)
from coordinator.records import CoordinatorRecord, Result

CONFIG = GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100)
RANGE = (JoinProtocol("range", b"range-sub"),)


@dataclass(frozen=True)
class Entry:
    record: CoordinatorRecord | None  # None: a transaction marker
    producer_id: int = -1
    transactional: bool = False
    commit: bool = False


class Runtime:
    def __init__(self, config: GroupConfig = CONFIG, now_ms: int = 1_000, log: list[Entry] | None = None) -> None:
        self.config = config
        self.now = now_ms
        self._ids = itertools.count(1)
        self.coordinator = GroupCoordinator(config, new_member_uuid=lambda: f"u{next(self._ids)}")
        self.log: list[Entry] = []
        self.replies: dict[Any, Any] = {}
        self.appended: list[CoordinatorRecord] = []
        for p in range(config.offsets_topic_num_partitions):
            self.coordinator.load_partition(p)
        for entry in log or []:
            self._append(entry)
        for p in range(config.offsets_topic_num_partitions):
            self.coordinator.finish_loading(p, now_ms)

    def _append(self, entry: Entry) -> None:
        offset = len(self.log)
        self.log.append(entry)
        if entry.record is None:
            self.coordinator.replay_marker(entry.producer_id, entry.commit, partition=0)
        else:
            self.coordinator.replay(entry.record, offset, self.now, entry.producer_id, entry.transactional)

    def apply(self, result: Result) -> Any:
        for record in result.records:
            self.appended.append(record)
            if isinstance(record, TransactionalOffsetRecord):
                # What a broker reads back from disk: plain bytes plus the batch header.
                plain = CoordinatorRecord(record.key, record.value)
                self._append(Entry(plain, record.producer_id, True))
            else:
                self._append(Entry(record))
        for effect in result.effects:
            assert isinstance(effect, Reply)
            assert effect.reply_to not in self.replies, f"answered twice: {effect.reply_to}"
            self.replies[effect.reply_to] = effect.response
        return result.response

    def call(self, handler: str, **kwargs: Any) -> Any:
        if handler in ("join_group", "sync_group", "heartbeat", "leave_group", "offset_commit", "txn_offset_commit"):
            kwargs.setdefault("now_ms", self.now)
        result = getattr(self.coordinator, handler)(**kwargs)
        response = self.apply(result)
        if response is not None and "reply_to" in kwargs:
            self.replies[kwargs["reply_to"]] = response
        return response

    def marker(self, producer_id: int, commit: bool) -> None:
        self._append(Entry(None, producer_id, commit=commit))

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            for result in self.coordinator.poll(self.now):
                self.apply(result)
        self.now = target

    def restart(self, config: GroupConfig | None = None) -> Runtime:
        return Runtime(config or self.config, self.now, list(self.log))

    # -- request helpers -------------------------------------------------------------------

    def join(
        self, token: str, member_id: str = "", instance: str | None = None, protocols=RANGE,
        session: int = 10_000, rebalance: int = 30_000, version: int = 9, client_id: str = "c",
        group: str = "g", protocol_type: str = "consumer",
    ) -> Any:
        return self.call(
            "join_group", group_id=group, member_id=member_id, group_instance_id=instance,
            protocol_type=protocol_type, protocols=protocols, session_timeout_ms=session,
            rebalance_timeout_ms=rebalance, client_id=client_id, client_host="/127.0.0.1",
            api_version=version, reply_to=token,
        )

    def sync(
        self, token: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
        instance: str | None = None, group: str = "g", protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
    ) -> Any:
        return self.call(
            "sync_group", group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=instance, protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=[SyncAssignment(m, a) for m, a in (assignments or {}).items()], reply_to=token,
        )

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None, group: str = "g") -> Any:
        return self.call(
            "heartbeat", group_id=group, generation_id=generation, member_id=member_id,
            group_instance_id=instance,
        ).error_code

    def stable_pair(self) -> tuple[str, str, int]:
        """Two dynamic members through join and sync: (leader id, follower id, generation)."""
        a = self.join("a0").member_id
        b = self.join("b0").member_id
        self.join("a1", member_id=a)
        self.join("b1", member_id=b)
        # b arrived during the initial delay, which therefore runs twice.
        self.advance(2 * self.config.group_initial_rebalance_delay_ms)
        generation = self.replies["a1"].generation_id
        self.sync("bs", b, generation)
        self.sync("as", a, generation, {a: b"A", b: b"B"})
        return a, b, generation
