"""GroupCoordinator driven by the real coordinator runtime over an in-memory log: each
handler's Result goes through ``CoordinatorRuntime.apply`` (append, replay, effects),
timers through ``fire_timers`` as a fake clock passes the coordinator's deadlines, and
markers through ``write_marker``. ``restart`` loads a new coordinator from a copy of
the log, as a broker does at start-up."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode as E

from coordinator.group import (
    GroupConfig,
    GroupCoordinator,
    JoinProtocol,
    Reply,
    SyncAssignment,
)
from coordinator.group.coordinator import offset_errors
from coordinator.group.messages import HeartbeatResponse, LeaveGroupResponse, OffsetDeleteResponse, SyncGroupResponse
from coordinator.runtime import CoordinatorRecord, CoordinatorRefused, CoordinatorRuntime, InMemoryLog
from protocol.records import decode_records

CONFIG = GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=100)
RANGE = (JoinProtocol("range", b"range-sub"),)


class RecordingLog(InMemoryLog):
    """An in-memory log that also lists the records appended to it, in order."""

    def __init__(self, partitions: dict | None = None) -> None:
        super().__init__()
        self.partitions = {p: list(batches) for p, batches in (partitions or {}).items()}
        self.appended: list[CoordinatorRecord] = []

    def append(self, partition, batch, now_ms):
        base_offset = super().append(partition, batch, now_ms)
        if not batch.is_control:
            self.appended += [CoordinatorRecord(r.key, r.value) for r in decode_records(batch)]
        return base_offset


@dataclass(frozen=True)
class Refused:
    """What the runtime refused a call with (not loaded here: the partition's refusal)."""

    error_code: E


# Each API's answer to an empty group id (the group service answers it with the API's
# failure answer), for the APIs naming one group that refuse it (OffsetCommit accepts it).
_FAILED = {
    "sync_group": lambda error, _: SyncGroupResponse(error),
    "heartbeat": lambda error, _: HeartbeatResponse(error),
    "leave_group": lambda error, _: LeaveGroupResponse(error),
    "offset_delete": lambda error, _: OffsetDeleteResponse(error),
    "txn_offset_commit": lambda error, kwargs: offset_errors(kwargs["offsets"], lambda _o: error),
}


class Runtime:
    def __init__(self, config: GroupConfig = CONFIG, now_ms: int = 1_000, log: RecordingLog | None = None) -> None:
        self.config = config
        self.now = now_ms
        self._ids = itertools.count(1)
        self.coordinator = GroupCoordinator(config, new_member_uuid=lambda: f"u{next(self._ids)}")
        self.log = log or RecordingLog()
        self.replies: dict[Any, Any] = {}
        self.runtime = CoordinatorRuntime(self.coordinator, self.log, self._perform, timers=self.coordinator.timers())
        for p in range(config.offsets_topic_num_partitions):
            self.runtime.begin_load(p, 0)
        for p in range(config.offsets_topic_num_partitions):
            self.runtime.load(p, now_ms)

    @property
    def appended(self) -> list[CoordinatorRecord]:
        return self.log.appended

    def _perform(self, effect: Any) -> None:
        assert isinstance(effect, Reply)
        assert effect.reply_to not in self.replies, f"answered twice: {effect.reply_to}"
        self.replies[effect.reply_to] = effect.response

    def call(self, handler: str, **kwargs: Any) -> Any:
        if handler in ("join_group", "sync_group", "heartbeat", "leave_group", "offset_commit", "txn_offset_commit"):
            kwargs.setdefault("now_ms", self.now)
        group_id = kwargs["group_id"] if "group_id" in kwargs else (list(kwargs["group_ids"]) or [""])[0]
        try:
            response = self.run_checked(group_id, lambda: getattr(self.coordinator, handler)(**kwargs),
                                        lambda: self._check(handler, kwargs))
        except CoordinatorRefused as refused:  # the broker answers it with the API's failure answer
            return Refused(refused.error)
        if response is not None and "reply_to" in kwargs:
            self.replies[kwargs["reply_to"]] = response
        return response

    def run_checked(self, group_id: str, handler, check) -> Any:
        """As the group service runs a request: ``check()``, the coordinator's checks made
        before the request is scheduled, answers it, or ``handler`` runs through the
        runtime on the group's partition (raising CoordinatorRefused where not served)."""
        refused = check()
        if refused is not None:
            return refused
        return self.runtime.run(self.coordinator.partition_for(group_id), handler, self.now)

    def _check(self, handler: str, kwargs: dict) -> Any:
        """The check the broker's handler of ``handler``'s API passes the group service."""
        if handler == "join_group":
            return self.coordinator.join_group_request_error(kwargs["group_id"], kwargs["member_id"],
                                                             kwargs["session_timeout_ms"])
        failed = _FAILED.get(handler)
        error = None if failed is None else self.coordinator.group_id_error(kwargs["group_id"])
        return None if error is None else failed(error, kwargs)

    def marker(self, producer_id: int, commit: bool, partition: int = 0) -> None:
        self.runtime.write_marker(partition, producer_id, 0, commit, 0, self.now)

    def unload(self, partition: int) -> None:
        self.runtime.unload(partition)

    def load(self, partition: int, coordinator_epoch: int = 0) -> None:
        self.runtime.begin_load(partition, coordinator_epoch)
        self.runtime.load(partition, self.now)

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.runtime.fire_timers(self.now)
        self.now = target

    def restart(self, config: GroupConfig | None = None) -> Runtime:
        return Runtime(config or self.config, self.now, RecordingLog(self.log.partitions))

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
