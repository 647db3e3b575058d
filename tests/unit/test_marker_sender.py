"""The marker sender against a leader that answers that the marker is fenced."""

from __future__ import annotations

import asyncio
import gc

import pytest
import uvloop

from broker.coordinators.transaction_service import MARKERS_VERSION, WRITE_TXN_MARKERS, MarkerSender, marker_request
from coordinator.transaction.coordinator import SendMarkers
from protocol import answer_wire

MARKERS = SendMarkers("tid", 7, 3, 1, True, (("t", 0),))
ANSWER = answer_wire.answer_type(WRITE_TXN_MARKERS)


class _OneNodeMap:
    """Just the cluster map the sender consults: every partition is led by node 1."""

    def leader_of(self, topic: str, partition: int) -> int:
        return 1


class _AnsweringNetwork:
    """Stands in for the in-process network between nodes: every WriteTxnMarkers gets
    ``error`` for each of its partitions, as the handler's answer (what the network hands
    back untyped) or as the kio response (a fault rule's error answer)."""

    def __init__(self, error: int, typed: bool = True) -> None:
        self.error = error
        self.typed = typed
        self.requests = 0

    async def request(self, source, target, api_key, version, body, timeout=None, typed=True):
        self.requests += 1
        answer = ANSWER(markers=[ANSWER.WritableTxnMarkerResult(
            producer_id=m.producer_id,
            topics=[ANSWER.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                ANSWER.WritableTxnMarkerPartitionResult(partition_index=p, error_code=self.error)
                for p in t.partition_indexes]) for t in m.topics]) for m in body.markers])
        return answer_wire.build_response(api_key, version, answer) if self.typed else answer


def _run(scenario):
    """Runs under uvloop, as the broker does, collecting what the loop reports.

    The garbage collector runs at almost every allocation meanwhile: a connection
    dropped without closing its reader task leaves that task reachable only from
    garbage, and an eager collector destroys it while still pending."""
    problems: list[str] = []
    thresholds = gc.get_threshold()

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: problems.append(ctx["message"]))
        await scenario()
        gc.collect()
        await asyncio.sleep(0.05)
        gc.collect()

    gc.set_threshold(1, 1, 1)
    try:
        uvloop.run(main())
    finally:
        gc.set_threshold(*thresholds)
    return problems


async def _send_markers(network, settled):
    """A sender over ``network`` given MARKERS; returns it and the completed markers once
    ``settled(sender, done)`` holds (or after ~2 s, for the caller's asserts to tell)."""
    done = []

    async def on_done(m):
        done.append(m)

    sender = MarkerSender(network, _OneNodeMap(), 1, on_done)
    sender.send(MARKERS)
    for _ in range(200):
        if settled(sender, done):
            break
        await asyncio.sleep(0.01)
    return sender, done


@pytest.mark.parametrize("typed", [True, False], ids=["kio answer", "handler answer"])
def test_fenced_marker_is_cancelled_after_one_request(typed):
    async def scenario():
        network = _AnsweringNetwork(47, typed)  # INVALID_PRODUCER_EPOCH
        sender, done = await _send_markers(network, lambda sender, done: not sender._tasks)
        assert not sender._tasks  # delivery gave up
        assert (network.requests, done) == (1, [])  # one request; the transaction is not completed
        await sender.close()

    assert _run(scenario) == []


@pytest.mark.parametrize("typed", [True, False], ids=["kio answer", "handler answer"])
def test_acknowledged_markers_complete_the_transaction(typed):
    async def scenario():
        network = _AnsweringNetwork(0, typed)
        sender, done = await _send_markers(network, lambda sender, done: done)
        assert (network.requests, done) == (1, [MARKERS])
        await sender.close()

    assert _run(scenario) == []


def test_marker_request_is_what_the_generic_build_makes():
    """The sender builds its WriteTxnMarkers request of request_type: the same request,
    and the same bytes, as the generic build from Kafka's field names."""
    markers = SendMarkers("tid", 7, 3, 1, False, (("a", 0), ("b", 2), ("a", 1)), 2)
    built = answer_wire.build_request(WRITE_TXN_MARKERS, MARKERS_VERSION, {"markers": [{
        "producer_id": 7, "producer_epoch": 3, "transaction_result": False,
        "topics": [{"name": "a", "partition_indexes": [0, 1]}, {"name": "b", "partition_indexes": [2]}],
        "coordinator_epoch": 1, "transaction_version": 2}]})
    direct = marker_request(markers, list(markers.topic_partitions))
    assert direct == built
    assert answer_wire.encode(direct) == answer_wire.encode(built)
    # kept for the producer's next transaction: the same request again, and only for the same markers
    assert marker_request(markers, list(markers.topic_partitions)) == built
    next_epoch = SendMarkers("tid", 7, 4, 1, False, markers.topic_partitions, 2)
    assert marker_request(next_epoch, list(markers.topic_partitions)).markers[0].producer_epoch == 4
