"""The console's log browser: a partition's stored batches as Kafka stores them, each
record marked as a read_committed consumer sees it (visible, aborted, past the LSO).
``__transaction_state`` and ``__consumer_offsets`` records are decoded by
``eosbroker dump-log``'s decoders."""

from __future__ import annotations

import json

from broker.tools.dump_log import consumer_offsets_text, transaction_state_text
from protocol.names import CONSUMER_OFFSETS, TRANSACTION_STATE
from protocol.records import CONTROL_TYPE_COMMIT, decode_records, increment_sequence, read_control_record

MAX_BATCHES = 500


def batches(partition, topic: str, from_offset: int, max_batches: int) -> dict:
    """Up to ``max_batches`` batches from the one holding ``from_offset``."""
    lso, hw = partition.last_stable_offset, partition.high_watermark
    out = []
    for batch in partition.log.batches(from_offset):
        if len(out) >= max_batches:
            break
        records = decode_records(batch)
        aborted = {(a.producer_id, a.first_offset, a.last_offset)
                   for a in partition.aborted.overlapping(batch.base_offset, batch.last_offset + 1)}
        b = {"base_offset": batch.base_offset, "last_offset": batch.last_offset,
             "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
             "base_sequence": batch.base_sequence, "last_sequence": batch.last_sequence,
             "partition_leader_epoch": batch.partition_leader_epoch, "transactional": batch.is_transactional,
             "control": None, "max_timestamp": batch.max_timestamp, "records": []}
        if batch.is_control:
            control_type, coordinator_epoch = read_control_record(batch)
            b["control"] = {"marker": "COMMIT" if control_type == CONTROL_TYPE_COMMIT else "ABORT",
                            "coordinator_epoch": coordinator_epoch}
        for r in records:
            if batch.is_control:
                seen = "control"
            elif r.offset >= lso:
                seen = "past-lso"
            elif batch.is_transactional and any(pid == batch.producer_id and first <= r.offset <= last
                                                for pid, first, last in aborted):
                seen = "aborted"
            else:
                seen = "visible"
            record = {"offset": r.offset, "timestamp": r.timestamp, "read_committed": seen,
                      "sequence": -1 if batch.base_sequence < 0 else
                      increment_sequence(batch.base_sequence, r.offset - batch.base_offset),
                      "key": _shown(r.key), "value": _shown(r.value),
                      "headers": [{"key": k, "value": _shown(v)} for k, v in r.headers]}
            if topic == TRANSACTION_STATE:
                record["decoded"] = transaction_state_text(r.key, r.value)
            elif topic == CONSUMER_OFFSETS:
                record["decoded"] = consumer_offsets_text(r.key, r.value)
            b["records"].append(record)
        out.append(b)
    return {"log_start_offset": partition.log_start_offset, "last_stable_offset": lso, "high_watermark": hw,
            "batches": out}


def _shown(data: bytes | None) -> dict | None:
    """The bytes as hex, as text when UTF-8, and as JSON when they parse."""
    if data is None:
        return None
    shown: dict = {"hex": data.hex()}
    try:
        shown["text"] = data.decode("utf-8")
    except UnicodeDecodeError:
        return shown
    try:
        shown["json"] = json.loads(shown["text"])
    except ValueError:
        pass
    return shown
