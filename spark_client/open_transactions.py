"""Which transactional ids have a transaction open (Ongoing), on every broker.

ListTransactions (v0, Kafka >= 3.0) answers for the coordinators of the broker it is
sent to, so it goes to each broker Metadata names. The driver uses this to find every
attempt of its query that a crashed driver, a killed executor or a losing speculative
task left open: their ids all start with the query's prefix.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from protocol.answer_wire import request_type
from protocol.client import metadata_request
from spark_client.wire import METADATA_V, Backoff, Client, KafkaError

LIST_TRANSACTIONS_V = 0
ONGOING = "Ongoing"
EMPTY = "Empty"  # an id initialised and in no transaction
_RETRIABLE = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available})


def broker_addresses(cluster: Client) -> list[tuple[str, int]]:
    r = cluster.any_connection().request(3, METADATA_V, metadata_request([]))
    return [(b.host, b.port) for b in r.brokers]


def ongoing_transactional_ids(cluster: Client, starting_with: str, deadline: float) -> set[str]:
    """Ids starting with ``starting_with`` whose transaction is Ongoing on some broker."""
    out: set[str] = set()
    for address in broker_addresses(cluster):
        backoff = Backoff()
        while True:
            r = cluster.connection(address).request(66, LIST_TRANSACTIONS_V, request_type(66)(
                state_filters=(ONGOING,), producer_id_filters=()))
            if r.error_code == ErrorCode.none:
                break
            if r.error_code not in _RETRIABLE:
                raise KafkaError(r.error_code, f"ListTransactions on {address[0]}:{address[1]}")
            backoff.sleep(deadline, f"ListTransactions on {address[0]}:{address[1]} answered {r.error_code.name}")
        out.update(s.transactional_id for s in r.transaction_states
                   if s.transactional_id.startswith(starting_with) and s.transaction_state == ONGOING)
    return out
