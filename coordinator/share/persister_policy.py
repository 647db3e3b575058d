"""How a share-state call from one broker to the share coordinator is retried, and what
a share-partition leader makes of one that failed (Kafka 4.4's PersisterStateManager
and SharePartition.fetchPersisterError).

A call that could not reach the coordinator (a disconnect: NETWORK_EXCEPTION; no answer
in time: REQUEST_TIMED_OUT) or that reached a node not (yet) coordinating the key
(COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
UNKNOWN_TOPIC_OR_PARTITION) is sent again, to the coordinator found anew, after an
exponential backoff: at most ``MAX_ATTEMPTS`` sends, then the last error stands.
Kafka jitters each backoff by 20%; here it is exact, so a run repeats.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

E = ErrorCode
MAX_ATTEMPTS = 5
BACKOFF_MS = 1_000
BACKOFF_MAX_MS = 30_000
RETRIABLE = frozenset({E.network_exception, E.request_timed_out, E.coordinator_not_available,
                       E.coordinator_load_in_progress, E.not_coordinator, E.unknown_topic_or_partition})


def retry_after_ms(error: ErrorCode, attempts: int) -> int | None:
    """The wait before the next send after ``attempts`` sends that ended in ``error``;
    None when the call ends with it."""
    if error not in RETRIABLE or attempts >= MAX_ATTEMPTS:
        return None
    return min(BACKOFF_MS * 2 ** (attempts - 1), BACKOFF_MAX_MS)


def leader_error(error: ErrorCode) -> ErrorCode:
    """The error a share-partition leader answers (ShareFetch, ShareAcknowledge) for a
    state call that failed."""
    if error in (E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress):
        return E.coordinator_not_available
    if error in (E.group_id_not_found, E.unknown_topic_or_partition, E.fenced_state_epoch):
        return error
    if error is E.fenced_leader_epoch:
        return E.not_leader_or_follower
    return E.unknown_server_error
