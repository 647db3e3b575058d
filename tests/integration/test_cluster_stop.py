"""A node that stops or dies falls silent, as a Kafka broker does, and a deposed
coordinator cannot write: stock clients (confluent-kafka) and raw requests against
`--nodes 3` while the transaction coordinator's node, paused with requests parked on it
and markers in flight, is stopped or killed; and a transaction whose timeout passed
while the whole broker was down is fenced and aborted when its coordinator loads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from broker.wire.client import KafkaConnection
from broker.testing.helpers import wait_until
from coordinator.partitioning import partition_for
from protocol.records import build_batch
from tests.integration.test_cluster import assert_exactly_once, create, read_committed

pytestmark = pytest.mark.timeout(180)
INIT_PRODUCER_ID = 22
TRANSACTION_STATE_PARTITIONS = 50
RETRIABLE_COORDINATOR_ERRORS = (14, 15, 16)  # load in progress, not available, not coordinator


@pytest.fixture
def cluster(broker_factory):
    return broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}, nodes=3, admin=True)


def _every_node(cluster) -> str:
    return ",".join(f"127.0.0.1:{port}" for port in cluster.node_ports.values())


def _leader(control, topic: str, index: int) -> int:
    return next(p["leader"] for p in control.cluster()["partitions"] if p["topic"] == topic and p["partition"] == index)


def _ids_coordinated_by(control, node_id: int, prefix: str, count: int) -> list[str]:
    found = []
    for i in range(10_000):
        candidate = f"{prefix}-{i}"
        if _leader(control, "__transaction_state", partition_for(candidate, TRANSACTION_STATE_PARTITIONS)) == node_id:
            found.append(candidate)
            if len(found) == count:
                return found
    raise AssertionError(f"no {count} transactional ids coordinated by node {node_id}")


def _state(cluster, txn_id: str) -> dict | None:
    return next((t for t in cluster.transactions() if t["transactional_id"] == txn_id), None)


async def _request(port: int, api_key: int, version: int, body: dict):
    async with await KafkaConnection.connect("127.0.0.1", port) as conn:
        return await conn.request(api_key, version, body)


def _producer(cluster, txn_id: str, **settings) -> Producer:
    p = Producer({"bootstrap.servers": _every_node(cluster), "transactional.id": txn_id,
                  "socket.timeout.ms": 10000, **settings})
    p.init_transactions(30)
    return p


@pytest.mark.parametrize("action", ["stop", "kill"])
def test_a_paused_coordinator_that_stops_answers_nothing_and_its_parked_commit_moves_with_it(
        cluster, topic_name, action):
    """The coordinator's node is paused with markers in flight, an EndTxn(commit) from a
    stock client and a raw InitProducerId parked on it, then stopped or killed. Neither
    request is answered by it (before the fix, the node woke them and ran them on its
    deposed coordinator: the commit was answered OK while the new coordinator held the
    transaction Ongoing, and then aborted it at its timeout). The client's retry commits
    on the new coordinator."""
    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    holder_id = f"h-{topic_name}"
    holder = _producer(cluster, holder_id)
    coordinator = _state(cluster, holder_id)["coordinator"]
    if _leader(control, topic_name, 0) == coordinator:  # the data's leader stays up throughout
        other = next(n["node_id"] for n in control.cluster()["nodes"] if n["node_id"] != coordinator)
        control.partition_move(topic=topic_name, partition=0, leader=other)
    committer_id, raw_id = _ids_coordinated_by(control, coordinator, f"c-{topic_name}", 2)

    # Markers in flight on the coordinator's node: each delivery is refused and retried.
    control.fault_add(action="close_before", api_key=27, client_id=f"eosbroker-node-{coordinator}")
    holder.begin_transaction()
    holder.produce(topic_name, b"held", partition=0)
    holder.commit_transaction(30)  # answered once PREPARE_COMMIT is written; markers pending

    committer = _producer(cluster, committer_id, **{"transaction.timeout.ms": 60000})
    committer.begin_transaction()
    committer.produce(topic_name, b"committed", partition=0)
    assert committer.flush(30) == 0

    control.node_pause(node_id=coordinator)
    outcome: list = []

    def commit() -> None:
        try:
            committer.commit_transaction(90)
            outcome.append("ok")
        except KafkaException as e:
            outcome.append(e)

    committing = threading.Thread(target=commit)
    committing.start()

    async def parked_init_producer_id():
        port = cluster.node_ports[coordinator]
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            answer = conn.send(INIT_PRODUCER_ID, 4, {"transactional_id": raw_id, "transaction_timeout_ms": 60000,
                                                     "producer_id": -1, "producer_epoch": -1})
            await asyncio.sleep(1.0)  # the request and the client's EndTxn reach the paused node
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: getattr(control, f"node_{action}")(node_id=coordinator))
            try:
                response = await asyncio.wait_for(answer, 10)
            except (ConnectionError, asyncio.TimeoutError):
                return None
            return response

    answered = asyncio.run(parked_init_producer_id())
    control.faults_clear()
    committing.join(120)
    assert answered is None, f"node {coordinator} answered after it was {action}ped: {answered}".replace("killped", "killed")
    assert outcome == ["ok"]
    # The new coordinator committed it: never Ongoing after the client was told OK.
    wait_until(lambda: (_state(cluster, committer_id) or {}).get("state") == "CompleteCommit", timeout=30)
    # The raw request was never applied: the new coordinator gives the id its first epoch.
    async def init_on_new_coordinator():
        new = _state(cluster, holder_id)["coordinator"]
        assert new != coordinator
        async with await KafkaConnection.connect("127.0.0.1", cluster.node_ports[new]) as conn:
            return await conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": raw_id, "transaction_timeout_ms": 60000,
                                                            "producer_id": -1, "producer_epoch": -1})
    fresh = asyncio.run(init_on_new_coordinator())
    assert (fresh.error_code, fresh.producer_epoch) == (0, 0)
    wait_until(lambda: (_state(cluster, holder_id) or {}).get("state") == "CompleteCommit", timeout=30)
    assert_exactly_once(read_committed(_every_node(cluster), topic_name, 1, 2), [b"held", b"committed"])
    holder.flush(5)
    committer.flush(5)


def test_a_transaction_whose_timeout_passed_while_the_broker_was_down_is_aborted_at_load(broker_factory, topic_name):
    """Kill -9, down longer than the transaction's timeout, restart: the coordinator's
    load fences the producer and aborts, before the client's commit is served (the
    timer that also aborts timed-out transactions is set far off, so only the load can)."""
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 3_600_000},
                            in_process=False)
    create(broker.bootstrap, topic_name, 1)
    txn_id = f"r-{topic_name}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"outlived", partition=0)
    assert producer.flush(30) == 0
    broker.kill()
    time.sleep(3.0)  # the broker is down past the transaction's timeout
    broker.start()
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(30)
    error = fenced.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.PRODUCER_FENCED), error
    assert read_committed(broker.bootstrap, topic_name, 1, 1, timeout=3) == []


@pytest.mark.parametrize("action", ["stop", "kill"])
def test_no_producer_epoch_is_handed_out_twice_across_a_coordinator_failure_under_load(cluster, topic_name, action):
    """Connections keep sending InitProducerId for ids coordinated by one node, with
    marker deliveries in flight there, while that node stops or dies; each then goes on
    at the new coordinator. No (producer id, epoch) is given to two requests for one id
    (before the fix, the failing node went on answering, and writing, after its
    partitions had moved, and the new coordinator handed out the same epochs again)."""
    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    holder_id = f"h-{topic_name}"
    holder = _producer(cluster, holder_id)
    coordinator = _state(cluster, holder_id)["coordinator"]
    if _leader(control, topic_name, 0) == coordinator:
        other = next(n["node_id"] for n in control.cluster()["nodes"] if n["node_id"] != coordinator)
        control.partition_move(topic=topic_name, partition=0, leader=other)
    control.fault_add(action="close_before", api_key=27, client_id=f"eosbroker-node-{coordinator}")
    holder.begin_transaction()
    holder.produce(topic_name, b"held", partition=0)
    holder.commit_transaction(30)
    ids = _ids_coordinated_by(control, coordinator, f"i-{topic_name}", 6)
    ports = dict(cluster.node_ports)
    handed_out: dict[str, list[tuple[int, int, int]]] = {t: [] for t in ids}  # (node, pid, epoch)

    async def keep_initializing(txn_id: str, failed: asyncio.Event) -> None:
        order = [coordinator] + [n for n in ports if n != coordinator]
        after_failure = 0
        while after_failure < 3:
            node = order[0]
            try:
                async with await KafkaConnection.connect("127.0.0.1", ports[node]) as conn:
                    while after_failure < 3:
                        r = await conn.request(INIT_PRODUCER_ID, 4, {
                            "transactional_id": txn_id, "transaction_timeout_ms": 60000,
                            "producer_id": -1, "producer_epoch": -1}, timeout=15)
                        if r.error_code == 0:
                            handed_out[txn_id].append((node, r.producer_id, r.producer_epoch))
                            after_failure += failed.is_set()
                        elif r.error_code in (14, 51):  # loading, markers pending: again
                            await asyncio.sleep(0.02)
                        else:  # NOT_COORDINATOR: the next node
                            break
            except (ConnectionError, OSError, asyncio.TimeoutError):
                pass
            order.append(order.pop(0))
            await asyncio.sleep(0.02)

    async def run() -> None:
        failed = asyncio.Event()
        workers = [asyncio.ensure_future(keep_initializing(t, failed)) for t in ids]
        await asyncio.sleep(0.5)  # every connection is busy
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: getattr(control, f"node_{action}")(node_id=coordinator))
        failed.set()
        await asyncio.wait_for(asyncio.gather(*workers), 90)

    asyncio.run(run())
    control.faults_clear()
    for txn_id, given in handed_out.items():
        pairs = [(pid, epoch) for _, pid, epoch in given]
        twice = sorted({p for p in pairs if pairs.count(p) > 1})
        assert not twice, f"{txn_id}: handed out twice: {twice} ({given})"
        assert any(node != coordinator for node, _, _ in given)
    holder.flush(5)


def test_an_acknowledged_add_partitions_survives_kill_9_and_its_abort_is_accepted(broker_factory, topic_name):
    """AddPartitionsToTxn is answered only once its record is in the log (the page
    cache, which a process crash keeps): after kill -9 and a restart the coordinator
    holds the transaction Ongoing with the partition, and the producer's abort is
    accepted, not INVALID_TXN_STATE. The broker's DEBUG log names the record's offset."""
    broker = broker_factory(in_process=False, log_level="DEBUG")
    create(broker.bootstrap, topic_name, 1)
    txn_id = f"a-{topic_name}"

    async def init_and_add():
        async with await KafkaConnection.connect("127.0.0.1", broker.port) as conn:
            for _ in range(100):  # the first use creates and loads __transaction_state
                init = await conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": txn_id,
                                                                "transaction_timeout_ms": 60000,
                                                                "producer_id": -1, "producer_epoch": -1})
                if init.error_code not in RETRIABLE_COORDINATOR_ERRORS:
                    break
                await asyncio.sleep(0.1)
            assert init.error_code == 0
            added = await conn.request(24, 3, {"v3_and_below_transactional_id": txn_id,
                                               "v3_and_below_producer_id": init.producer_id,
                                               "v3_and_below_producer_epoch": init.producer_epoch,
                                               "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            return init.producer_id, init.producer_epoch

    async def abort(pid: int, epoch: int):
        for _ in range(100):
            async with await KafkaConnection.connect("127.0.0.1", broker.port) as conn:
                r = await conn.request(26, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                               "committed": False})
            if r.error_code not in RETRIABLE_COORDINATOR_ERRORS:
                return r.error_code
            await asyncio.sleep(0.1)
        return r.error_code

    pid, epoch = asyncio.run(init_and_add())
    state_partition = partition_for(txn_id, TRANSACTION_STATE_PARTITIONS)
    assert f"transaction {txn_id} (producer {pid}, epoch {epoch}): Empty -> Ongoing, added {topic_name}-0; record " \
           f"at __transaction_state-{state_partition} offset " in broker.log_text()
    broker.kill()
    broker.start()
    assert asyncio.run(abort(pid, epoch)) == 0
    assert f"transaction {txn_id} (producer {pid}, epoch {epoch}) loaded from __transaction_state-{state_partition}: " \
           f"Ongoing, partitions {topic_name}-0, last updated at " in broker.log_text()


def test_a_coordinator_cut_off_from_its_followers_cannot_complete_a_commit(broker_factory, topic_name):
    """Coordinator writes need transaction.state.log.min.isr (2) in sync, as an acks=all
    append: with the coordinator's node cut off from both others, once they have left
    the ISR (replica.lag.time.max.ms on the broker's clock), EndTxn is answered
    COORDINATOR_NOT_AVAILABLE and nothing is written: the transaction stays Ongoing. When
    the links heal the retry commits."""
    cluster = broker_factory(nodes=3, admin=True)
    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    txn_id = f"i-{topic_name}"

    async def retried(port: int, api_key: int, version: int, body: dict):
        async with await KafkaConnection.connect("127.0.0.1", port) as conn:
            for _ in range(100):
                r = await conn.request(api_key, version, body)
                if r.error_code not in RETRIABLE_COORDINATOR_ERRORS:
                    return r
                await asyncio.sleep(0.1)
            return r

    async def find_coordinator() -> int:
        async with await KafkaConnection.connect("127.0.0.1", next(iter(cluster.node_ports.values()))) as conn:
            r = await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
            return r.coordinators[0].node_id

    coordinator = asyncio.run(find_coordinator())
    port = cluster.node_ports[coordinator]
    init = asyncio.run(retried(port, INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 120000,
                                                          "producer_id": -1, "producer_epoch": -1}))
    pid, epoch = init.producer_id, init.producer_epoch
    added = asyncio.run(_request(port, 24, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                              "v3_and_below_producer_epoch": epoch,
                                              "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]}))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    for other in cluster.node_ports:
        if other != coordinator:
            control.network_cut(source=coordinator, target=other)
    control.clock_advance(by="31s")  # the others leave the ISR of the coordinator's partitions
    end = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": True}

    assert asyncio.run(_request(port, 26, 3, end)).error_code == 15  # COORDINATOR_NOT_AVAILABLE
    assert _state(cluster, txn_id)["state"] == "Ongoing"
    control.network_heal()
    assert asyncio.run(retried(port, 26, 3, end)).error_code == 0
    wait_until(lambda: _state(cluster, txn_id)["state"] == "CompleteCommit", timeout=30)



async def test_a_commit_whose_write_misses_the_isr_sends_no_marker_and_is_undone(broker_factory, topic_name):
    """EndTxn's PrepareCommit is appended while the coordinator's followers cannot fetch:
    no marker is written while it waits for the ISR (Kafka sends them once the append
    completes), and when the wait fails (COORDINATOR_NOT_AVAILABLE) the transaction is
    back to Ongoing, as Kafka clears the pending state: the retry once the links heal
    commits it, exactly once."""
    cluster = broker_factory(nodes=3, admin=True)
    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    txn_id = f"u-{topic_name}"
    async with await KafkaConnection.connect("127.0.0.1", next(iter(cluster.node_ports.values()))) as conn:
        coordinator = (await conn.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})).coordinators[0].node_id
    if _leader(control, topic_name, 0) != coordinator:  # its markers then cross no link
        control.partition_move(topic=topic_name, partition=0, leader=coordinator)
    async with await KafkaConnection.connect("127.0.0.1", cluster.node_ports[coordinator]) as conn:
        async def retried(api_key: int, version: int, body: dict):
            for _ in range(100):
                r = await conn.request(api_key, version, body)
                if r.error_code not in RETRIABLE_COORDINATOR_ERRORS:
                    return r
                await asyncio.sleep(0.1)
            return r

        init = await retried(INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout_ms": 120000,
                                                   "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch
        added = await conn.request(24, 3, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                           "v3_and_below_producer_epoch": epoch,
                                           "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        batch = bytes(build_batch([(None, b"once", (), 1)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                                  transactional=True))
        produced = await conn.request(0, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 30000,
                                             "topic_data": [{"name": topic_name, "partition_data": [
                                                 {"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code == 0
        for other in cluster.node_ports:
            if other != coordinator:
                control.network_cut(source=coordinator, target=other)
        end = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": True}
        answer = conn.send(26, 3, end)
        wait_until(lambda: _state(cluster, txn_id)["state"] != "Ongoing", timeout=30)
        assert _state(cluster, txn_id)["state"] == "PrepareCommit"  # written; no marker while the ISR lacks it
        control.clock_advance(by="31s")  # the followers leave the ISR: below transaction.state.log.min.isr
        assert (await asyncio.wait_for(answer, 30)).error_code == 15  # COORDINATOR_NOT_AVAILABLE
        assert _state(cluster, txn_id)["state"] == "Ongoing"  # the transition undone
        control.network_heal()
        assert (await retried(26, 3, end)).error_code == 0
    wait_until(lambda: _state(cluster, txn_id)["state"] == "CompleteCommit", timeout=30)
    assert_exactly_once(read_committed(_every_node(cluster), topic_name, 1, 1), [b"once"])


def _group(cluster, group_id: str) -> dict | None:
    import json
    import urllib.request

    with urllib.request.urlopen(cluster.admin_url + "/console/state", timeout=30) as answer:
        return next((g for g in json.load(answer)["groups"] if g["group_id"] == group_id), None)


def test_a_paused_group_coordinator_fires_no_timer_until_it_resumes(cluster, topic_name):
    """A hung machine runs nothing: with the group coordinator's node paused and the
    broker's clock moved past the member's session timeout (short of
    broker.session.timeout.ms, so the node is not fenced), the member is still in the
    group (before the fix the paused node's timers expelled it)."""
    from confluent_kafka import Consumer

    create(_every_node(cluster), topic_name, 1)
    control = cluster.control()
    group_id = f"g-{topic_name}"
    consumer = Consumer({"bootstrap.servers": _every_node(cluster), "group.id": group_id,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([topic_name])
    try:
        def joined() -> bool:
            consumer.poll(0.2)
            g = _group(cluster, group_id)
            return g is not None and g["state"] == "Stable" and len(g["members"]) == 1

        wait_until(joined, timeout=60)
        before = _group(cluster, group_id)
        control.node_pause(node_id=before["coordinator"])
        control.clock_advance(by="7s")  # past the session (6 s), short of broker.session.timeout.ms (9 s)
        time.sleep(0.5)  # a timer that fired would have run by now
        during = _group(cluster, group_id)
        assert (during["state"], during["members"], during["generation"]) == \
               (before["state"], before["members"], before["generation"])
        control.node_resume(node_id=before["coordinator"])
    finally:
        consumer.close()
