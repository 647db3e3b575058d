"""KIP-932 share groups with confluent-kafka's ShareConsumer: delivery, implicit and
explicit acknowledgement, release and reject, the delivery-count limit, redelivery when
a lock expires and when a consumer dies, and share.isolation.level around committed,
aborted and open transactions. Each scenario takes a bootstrap and a way to let
``share.record.lock.duration.ms`` pass; tests/reference/test_share_groups_kafka.py runs
the same scenarios against Apache Kafka 4.4 (there the time really passes)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode

pytestmark = pytest.mark.timeout(180)

LOCK_MS = 15_000  # the least Kafka's group.share.min.record.lock.duration.ms allows
PROFILE = {"emulate.kafka.version": "4.4"}
# A new group's partitions come a heartbeat after its first (once their state is
# initialized, as on Kafka), and no sooner than the assignment interval after the first
# assignment: a short heartbeat interval and no assignment interval keep the tests quick.
QUICK = {**PROFILE, "group.share.heartbeat.interval.ms": 500, "group.share.assignment.interval.ms": 0}


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def new_group(bootstrap: str, group: str | None = None, **configs: str) -> str:
    """A share group id (new unless given) with its group configs set (earliest, the lock
    of LOCK_MS, ...)."""
    group = group or f"share-{uuid.uuid4().hex[:8]}"
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in {"share_auto_offset_reset": "earliest",
                            "share_record_lock_duration_ms": str(LOCK_MS), **configs}.items()]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)
    return group


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, group: str, topic: str, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def poll_until(c: ShareConsumer, done, timeout: float = 90, explicit_ack=None) -> list:
    """Messages polled until ``done(messages so far)``; ``explicit_ack(message)`` gives
    the type each is acknowledged with (explicit mode), acknowledged right away."""
    got = []
    deadline = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < deadline, f"gave up polling, got {[(m.offset(), m.value()) for m in got]}"
        for m in c.poll(1.0):
            assert m.error() is None, m.error()
            got.append(m)
            if explicit_ack is not None:
                c.acknowledge(m, explicit_ack(m))
    return got


def values(messages) -> list[bytes]:
    return [m.value() for m in messages]


# -- the scenarios ------------------------------------------------------------------------

def delivery_with_implicit_acknowledgement(bootstrap: str, topic: str) -> None:
    """Every record once, delivery count 1; accepted records are not delivered again."""
    create(bootstrap, topic)
    group = new_group(bootstrap)
    produce(bootstrap, topic, [b"r%d" % i for i in range(10)])
    first = consumer(bootstrap, group, topic)
    got = poll_until(first, lambda ms: len(ms) >= 10)
    assert sorted(values(got)) == [b"r%d" % i for i in range(10)]
    assert {m.delivery_count() for m in got} == {1}
    assert first.commit_sync() is not None  # the implicit acceptance, sent now
    first.close()
    produce(bootstrap, topic, [b"after"])
    second = consumer(bootstrap, group, topic)
    assert values(poll_until(second, lambda ms: b"after" in values(ms))) == [b"after"]
    second.close()


def explicit_accept_release_reject(bootstrap: str, topic: str) -> None:
    """Released records come back (delivery count 2), rejected ones never do."""
    create(bootstrap, topic)
    group = new_group(bootstrap)
    produce(bootstrap, topic, [b"accept", b"release", b"reject"])
    kinds = {b"accept": AcknowledgeType.ACCEPT, b"release": AcknowledgeType.RELEASE,
             b"reject": AcknowledgeType.REJECT}
    c = consumer(bootstrap, group, topic, explicit=True)
    got = poll_until(c, lambda ms: len(ms) >= 3, explicit_ack=lambda m: kinds[m.value()])
    assert [(m.value(), m.delivery_count()) for m in got] == [(b"accept", 1), (b"release", 1), (b"reject", 1)]
    results = c.commit_sync()
    assert results and all(error is None for error in results.values()), results
    produce(bootstrap, topic, [b"end"])
    again = poll_until(c, lambda ms: b"end" in values(ms), explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert sorted((m.value(), m.delivery_count()) for m in again) == [(b"end", 1), (b"release", 2)]
    c.commit_sync()
    c.close()


def delivery_count_limit_archives(bootstrap: str, topic: str) -> None:
    """A record released as often as share.delivery.count.limit allows is archived."""
    create(bootstrap, topic)
    group = new_group(bootstrap, share_delivery_count_limit="2")
    produce(bootstrap, topic, [b"poison"])
    c = consumer(bootstrap, group, topic, explicit=True)
    counts = []
    for _ in range(2):
        got = poll_until(c, lambda ms: len(ms) >= 1, explicit_ack=lambda m: AcknowledgeType.RELEASE)
        counts += [m.delivery_count() for m in got]
        c.commit_sync()
    assert counts == [1, 2]
    produce(bootstrap, topic, [b"next"])
    assert values(poll_until(c, lambda ms: b"next" in values(ms), explicit_ack=lambda m: AcknowledgeType.ACCEPT)
                  ) == [b"next"]
    c.commit_sync()
    c.close()


def redelivery_after_lock_expiry(bootstrap: str, topic: str, let_lock_expire) -> None:
    """Records a member holds without acknowledging go to another when the lock ends;
    the first member's late acknowledgement then changes nothing."""
    create(bootstrap, topic)
    group = new_group(bootstrap)
    produce(bootstrap, topic, [b"a", b"b"])
    slow = consumer(bootstrap, group, topic, explicit=True)
    held = poll_until(slow, lambda ms: len(ms) >= 2)
    assert [m.delivery_count() for m in held] == [1, 1]
    other = consumer(bootstrap, group, topic, explicit=True)
    let_lock_expire()
    again = poll_until(other, lambda ms: len(ms) >= 2, explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert [(m.value(), m.delivery_count()) for m in again] == [(b"a", 2), (b"b", 2)]
    assert all(e is None for e in other.commit_sync().values())
    # The first member's late acknowledgement changes nothing: librdkafka drops it once
    # the lock has passed on its own clock (on Kafka), else the broker passes it over, the
    # records being below the share-partition's start by now (as Kafka does).
    for m in held:
        slow.acknowledge(m, AcknowledgeType.RELEASE)
    slow.commit_sync()
    slow.close()
    produce(bootstrap, topic, [b"end"])
    rest = poll_until(other, lambda ms: b"end" in values(ms), explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert values(rest) == [b"end"]
    other.close()


DYING_CONSUMER = """
import os, sys
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
got = 0
while got < int(sys.argv[4]):
    got += len(c.poll(1.0))
print(got, flush=True)
os.kill(os.getpid(), 9)
"""


def redelivery_after_a_consumer_dies(bootstrap: str, topic: str, let_lock_expire, lock_ms: int = LOCK_MS,
                                     timeout: float = 90) -> None:
    """A consumer killed with records in hand: another gets them, delivered a second time."""
    create(bootstrap, topic)
    group = new_group(bootstrap, share_record_lock_duration_ms=str(lock_ms))
    produce(bootstrap, topic, [b"x%d" % i for i in range(5)])
    dying = subprocess.run([sys.executable, "-c", DYING_CONSUMER, bootstrap, group, topic, "5"],
                           capture_output=True, text=True, timeout=120)
    assert dying.returncode == -9 and dying.stdout.strip() == "5", dying.stderr
    let_lock_expire()
    c = consumer(bootstrap, group, topic, explicit=True)
    got = poll_until(c, lambda ms: len(ms) >= 5, timeout, explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert [(m.value(), m.delivery_count()) for m in got] == [(b"x%d" % i, 2) for i in range(5)]
    c.commit_sync()
    c.close()


def read_committed_around_transactions(bootstrap: str, topic: str) -> None:
    """read_committed: committed records only, never an aborted one, nothing past the
    LSO while a transaction is open; read_uncommitted: everything."""
    create(bootstrap, topic)
    committed_group = new_group(bootstrap, share_isolation_level="read_committed")
    uncommitted_group = new_group(bootstrap, share_isolation_level="read_uncommitted")
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(30)
    for value, commit in ((b"c1", True), (b"a1", False), (b"c2", True), (b"a2", False)):
        txn.begin_transaction()
        txn.produce(topic, value, partition=0)
        assert txn.flush(30) == 0  # written before the abort (an abort purges what is unsent)
        txn.commit_transaction(30) if commit else txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce(topic, b"open", partition=0)
    assert txn.flush(30) == 0
    produce(bootstrap, topic, [b"after-open"])  # past the LSO until the transaction ends

    reader = consumer(bootstrap, committed_group, topic)
    seen = poll_until(reader, lambda ms: b"c2" in values(ms))
    seen += reader.poll(2.0)  # one more fetch: what lies past the LSO stays there
    assert values(seen) == [b"c1", b"c2"]
    txn.commit_transaction(30)
    seen += poll_until(reader, lambda ms: b"after-open" in values(ms))
    assert values(seen) == [b"c1", b"c2", b"open", b"after-open"]
    reader.close()

    everything = consumer(bootstrap, uncommitted_group, topic)
    all_seen = poll_until(everything, lambda ms: b"after-open" in values(ms))
    assert values(all_seen) == [b"c1", b"a1", b"c2", b"a2", b"open", b"after-open"], [(m.offset(), m.value()) for m in all_seen]
    everything.close()


# -- against eosbroker ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):
    from broker.testing.plugin import new_broker

    broker = new_broker(tmp_path_factory.mktemp("share") / "data", QUICK, admin=True).start()
    yield broker
    broker.stop()


def lock_expiry(broker):
    return lambda: broker.control().clock_advance(by=f"{LOCK_MS + 1000}ms")


def test_delivery_with_implicit_acknowledgement(share_broker, topic_name):
    delivery_with_implicit_acknowledgement(share_broker.bootstrap, topic_name)


def test_explicit_accept_release_reject(share_broker, topic_name):
    explicit_accept_release_reject(share_broker.bootstrap, topic_name)


def test_delivery_count_limit_archives(share_broker, topic_name):
    delivery_count_limit_archives(share_broker.bootstrap, topic_name)


def test_redelivery_after_lock_expiry(share_broker, topic_name):
    redelivery_after_lock_expiry(share_broker.bootstrap, topic_name, lock_expiry(share_broker))


def test_redelivery_after_a_consumer_dies(share_broker, topic_name):
    redelivery_after_a_consumer_dies(share_broker.bootstrap, topic_name, lock_expiry(share_broker))


def test_read_committed_around_transactions(share_broker, topic_name):
    read_committed_around_transactions(share_broker.bootstrap, topic_name)


def test_a_killed_consumers_records_come_back_when_its_connection_closes(share_broker, topic_name):
    # No lock expiry needed (a minute's lock, given half that): the share session ends
    # with its connection (KAFKA-19015).
    redelivery_after_a_consumer_dies(share_broker.bootstrap, topic_name, lambda: None, lock_ms=60_000, timeout=30)


def test_share_partition_state_survives_a_restart(broker_factory, topic_name):
    """Acknowledged records stay done and released ones keep their delivery count across
    a broker restart: the state is in __share_group_state, replayed at load."""
    broker = broker_factory(QUICK)
    create(broker.bootstrap, topic_name)
    group = new_group(broker.bootstrap)
    produce(broker.bootstrap, topic_name, [b"r%d" % i for i in range(6)])
    c = consumer(broker.bootstrap, group, topic_name, explicit=True)
    got = poll_until(c, lambda ms: len(ms) >= 6,
                     explicit_ack=lambda m: AcknowledgeType.ACCEPT if m.offset() < 3 else AcknowledgeType.RELEASE)
    assert all(e is None for e in c.commit_sync().values())
    c.close()
    assert len(got) == 6
    broker.restart()
    again = consumer(broker.bootstrap, group, topic_name, explicit=True)
    rest = poll_until(again, lambda ms: len(ms) >= 3, explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert [(m.value(), m.delivery_count()) for m in rest] == [(b"r3", 2), (b"r4", 2), (b"r5", 2)]
    again.commit_sync()
    again.close()


def _request(broker, api_key: int, version: int, body: dict):
    import asyncio

    from broker.wire.client import KafkaConnection

    async def call():
        conn = await KafkaConnection.connect("127.0.0.1", broker.port, client_id="share-offsets")
        try:
            return await conn.request(api_key, version, body)
        finally:
            await conn.close()

    return asyncio.run(call())


def _start_offsets(broker, group: str, topic: str) -> list[tuple]:
    r = _request(broker, 90, 1, {"groups": [{"group_id": group, "topics": [{"topic_name": topic,
                                                                           "partitions": [0]}]}]})
    g = r.groups[0]
    return [(g.error_code, p.partition_index, p.start_offset, p.lag) for t in g.topics for p in t.partitions]


def test_share_group_offsets_described_altered_and_deleted(share_broker, topic_name):
    bootstrap = share_broker.bootstrap
    create(bootstrap, topic_name)
    group = new_group(bootstrap)
    produce(bootstrap, topic_name, [b"r%d" % i for i in range(6)])
    c = consumer(bootstrap, group, topic_name, explicit=True)
    poll_until(c, lambda ms: len(ms) >= 6,
               explicit_ack=lambda m: AcknowledgeType.ACCEPT if m.offset() < 3 else AcknowledgeType.RELEASE)
    c.commit_sync()
    alter = {"group_id": group, "topics": [{"topic_name": topic_name,
                                            "partitions": [{"partition_index": 0, "start_offset": 5}]}]}
    assert _request(share_broker, 91, 0, alter).error_code == ErrorCode.non_empty_group
    c.close()
    assert _start_offsets(share_broker, group, topic_name) == [(0, 0, 3, 3)]

    answer = _request(share_broker, 91, 0, alter)
    assert (answer.error_code, answer.responses[0].partitions[0].error_code) == (0, 0)
    assert _start_offsets(share_broker, group, topic_name) == [(0, 0, 5, 1)]
    again = consumer(bootstrap, group, topic_name, explicit=True)
    got = poll_until(again, lambda ms: len(ms) >= 1, explicit_ack=lambda m: AcknowledgeType.ACCEPT)
    assert [(m.value(), m.delivery_count()) for m in got] == [(b"r5", 1)]
    again.commit_sync()
    again.close()

    deleted = _request(share_broker, 92, 0, {"group_id": group, "topics": [{"topic_name": topic_name}]})
    assert (deleted.error_code, deleted.responses[0].error_code) == (0, 0)
    assert _start_offsets(share_broker, group, topic_name) == [(0, 0, -1, -1)]
    fresh = consumer(bootstrap, group, topic_name)
    assert len(poll_until(fresh, lambda ms: len(ms) >= 6)) == 6  # from the log start again (earliest)
    fresh.close()
    unknown = _request(share_broker, 90, 1, {"groups": [{"group_id": "nobody", "topics": None}]})
    assert unknown.groups[0].error_code == ErrorCode.group_id_not_found


def test_share_partitions_in_metrics_the_console_and_the_history(share_broker, topic_name):
    """/metrics and the console's groups show each share-partition's records in flight by
    state and its start offset, from one source; the history tells the members coming
    and going."""
    import json
    import urllib.request

    from broker.testing import wait_until

    from tests.integration.test_admin_metrics_console import _metric

    bootstrap = share_broker.bootstrap
    create(bootstrap, topic_name)
    group = new_group(bootstrap)
    produce(bootstrap, topic_name, [b"m%d" % i for i in range(4)])
    c = consumer(bootstrap, group, topic_name, explicit=True)
    got = poll_until(c, lambda ms: len(ms) >= 4)
    c.acknowledge(got[0], AcknowledgeType.ACCEPT)
    c.acknowledge(got[1], AcknowledgeType.REJECT)
    c.commit_sync()
    with urllib.request.urlopen(share_broker.admin_url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    labels = {"group": group, "topic": topic_name, "partition": "0"}
    assert _metric(text, "eosbroker_share_partition_start_offset", **labels) == 2
    assert _metric(text, "eosbroker_share_partition_records", state="acquired", **labels) == 2
    assert _metric(text, "eosbroker_share_partition_records", state="archived", **labels) == 0
    with urllib.request.urlopen(share_broker.admin_url + "/console/state", timeout=30) as answer:
        (shown,) = [g for g in json.load(answer)["groups"] if g["group_id"] == group]
    assert (shown["protocol"], shown["state"], len(shown["members"])) == ("share", "Stable", 1)
    (row,) = shown["share_partitions"]
    assert (row["topic"], row["partition"], row["start_offset"], row["in_flight"]) == (topic_name, 0, 2, 2)
    assert row["counts"] == {"available": 0, "acquired": 2, "acknowledged": 0, "archived": 0}
    c.close()

    def history():
        with urllib.request.urlopen(share_broker.admin_url + "/events", timeout=30) as answer:
            return [e for e in json.load(answer)["events"] if e["kind"] == "group" and e["group_id"] == group]
    moves = wait_until(lambda: (lambda ms: ms if ms and ms[-1]["left"] else None)(history()), 30,
                       message="the share member's leaving on the history")
    assert {e["protocol"] for e in moves} == {"share"}
    assert moves[0]["joined"] == shown["members"] and moves[-1]["left"] == shown["members"]
    assert moves[-1]["members"] == 0 and moves[-1]["generation"] > moves[0]["generation"]


def test_a_groups_assignment_interval_holds_its_next_assignment_on_the_brokers_clock(broker_factory, topic_name):
    """share.assignment.interval.ms (a group config here): after the first target
    assignment, the one giving the member its initialized partitions waits until the
    interval has passed on the broker's clock, as Kafka 4.4 computes at most one per interval."""
    broker = broker_factory({**QUICK, "share.coordinator.state.topic.num.partitions": 1}, admin=True)
    create(broker.bootstrap, topic_name)
    group = new_group(broker.bootstrap, share_assignment_interval_ms="60000")
    member = uuid.uuid4().hex[:22]

    def heartbeat(epoch: int, topics=None):
        r = _request(broker, 76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                     "rack_id": None, "subscribed_topic_names": topics})
        assert r.error_code == 0, r
        return r

    def epochs() -> tuple[int, int]:
        (g,) = _request(broker, 77, 1, {"group_ids": [group], "include_authorized_operations": False}).groups
        return g.group_epoch, g.assignment_epoch

    assert heartbeat(0, [topic_name]).member_epoch == 2  # the first assignment: at once (nothing to wait for)
    deadline = time.monotonic() + 30
    while epochs() != (3, 2):  # its partitions initialized: the group epoch moves, the assignment waits
        assert time.monotonic() < deadline, epochs()
        assert heartbeat(2).member_epoch == 2
        time.sleep(0.1)
    for _ in range(2):  # 40 s of the 60: still waiting (heartbeats keep the session)
        broker.control().clock_advance(by="20s")
        assert heartbeat(2).member_epoch == 2
    broker.control().clock_advance(by="20s")
    assigned = heartbeat(2)
    assert assigned.member_epoch == 3 and [sorted(t.partitions) for t in assigned.assignment.topic_partitions] == [[0]]
    assert epochs() == (3, 3)


def test_acknowledgements_sent_after_the_members_leave_still_count(share_broker, topic_name):
    """A closing client sends its leave heartbeat and its last acknowledgements at once
    (librdkafka does); as on Kafka 4.4, the leave does not release what the member holds
    (only the end of its share session does), so acknowledgements arriving after the leave
    are applied and the accepted records are not delivered again."""
    import asyncio

    from broker.wire.client import KafkaConnection

    bootstrap = share_broker.bootstrap
    create(bootstrap, topic_name)
    group = new_group(bootstrap)
    produce(bootstrap, topic_name, [b"a", b"b"])
    member = uuid.uuid4().hex[:22]

    async def fetch_leave_acknowledge():
        conn = await KafkaConnection.connect("127.0.0.1", share_broker.port, client_id="late-acks")
        try:
            def heartbeat(epoch, topics=None):
                return conn.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                            "rack_id": None, "subscribed_topic_names": topics})
            joined = await heartbeat(0, [topic_name])
            for _ in range(300):  # until its partition's state is initialized and assigned
                answer = await heartbeat(joined.member_epoch)
                if answer.assignment and answer.assignment.topic_partitions:
                    break
                await asyncio.sleep(0.1)
            topic_id = answer.assignment.topic_partitions[0].topic_id
            fetched = await conn.request(78, 1, {
                "group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait": 5000, "min_bytes": 1,
                "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100, "forgotten_topics_data": [],
                "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                                  "acknowledgement_batches": []}]}]})
            acquired = [(a.first_offset, a.last_offset) for a in fetched.responses[0].partitions[0].acquired_records]
            left = await heartbeat(-1)
            acknowledged = await conn.request(79, 1, {
                "group_id": group, "member_id": member, "share_session_epoch": 1,
                "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}]}]}]})  # 1: accept
            partition_error = acknowledged.responses[0].partitions[0].error_code if acknowledged.responses else None
            return acquired, left.member_epoch, acknowledged.error_code, partition_error
        finally:
            await conn.close()

    assert asyncio.run(fetch_leave_acknowledge()) == ([(0, 1)], -1, 0, 0)
    produce(bootstrap, topic_name, [b"c"])
    c = consumer(bootstrap, group, topic_name)
    assert values(poll_until(c, lambda ms: b"c" in values(ms))) == [b"c"]  # a and b were accepted
    c.close()
