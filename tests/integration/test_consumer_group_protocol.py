"""KIP-848 consumer groups (group.protocol=consumer) with librdkafka: the broker assigns
the partitions, a second member takes half of them after the first revokes them, offsets
are committed with the member epoch, consume-transform-produce commits offsets in a
transaction, and a restart replays the group from __consumer_offsets."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import wait_until

PARTITIONS = 4


def _create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def _produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        p.produce(topic, b"%04d" % i, partition=i % PARTITIONS)
    assert p.flush(10) == 0


def _consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})


def _poll_until(consumers, done, seen: dict, deadline_s: float = 60) -> None:
    """Polls every consumer in turn until ``done()``; ``seen``: consumer index -> values."""
    end = time.monotonic() + deadline_s
    while not done():
        assert time.monotonic() < end, f"not done in {deadline_s} s: {seen}"
        for i, c in enumerate(consumers):
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.setdefault(i, []).append(msg.value())
                c.commit(msg, asynchronous=False)


def _assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_assignment_rebalance_commit_and_restart(broker_factory, topic_name):
    broker = broker_factory()
    bootstrap = broker.bootstrap
    _create(bootstrap, topic_name)
    _produce(bootstrap, topic_name, 40)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = _consumer(bootstrap, group)
    first.subscribe([topic_name])
    seen: dict = {}
    _poll_until([first], lambda: len(seen.get(0, [])) >= 40, seen)
    assert _assigned(first) == set(range(PARTITIONS))
    assert sorted(seen[0]) == [b"%04d" % i for i in range(40)]

    second = _consumer(bootstrap, group)
    second.subscribe([topic_name])
    _poll_until([first, second], lambda: len(_assigned(second)) == PARTITIONS // 2
                and len(_assigned(first)) == PARTITIONS // 2, seen)
    assert _assigned(first).isdisjoint(_assigned(second))
    _produce(bootstrap, topic_name, 40, start=40)
    _poll_until([first, second], lambda: sum(len(v) for v in seen.values()) >= 80, seen)
    values = sorted(v for vs in seen.values() for v in vs)
    assert values == [b"%04d" % i for i in range(80)]  # nothing lost, nothing twice
    assert seen.get(1), "the second member consumed nothing"

    second.close()  # leaves (epoch -1): the first member gets everything back
    _poll_until([first], lambda: _assigned(first) == set(range(PARTITIONS)), seen)
    committed = first.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], 10)
    assert sum(tp.offset for tp in committed) == 80
    first.close()

    # The group is described by ConsumerGroupDescribe and listed as a consumer group.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(10)
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].type.name == "CONSUMER" and mine[0].state.name == "EMPTY"

    broker.restart()
    again = _consumer(broker.bootstrap, group)
    again.subscribe([topic_name])
    committed = again.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)], 10)
    assert sum(tp.offset for tp in committed) == 80
    _produce(broker.bootstrap, topic_name, 4, start=80)
    resumed: dict = {}
    _poll_until([again], lambda: len(resumed.get(0, [])) >= 4, resumed)
    assert sorted(resumed[0]) == [b"%04d" % i for i in range(80, 84)]  # from the committed offsets
    again.close()


def test_new_partitions_are_assigned(shared_broker, topic_name):
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, topic_name, 2)
    c = _consumer(bootstrap, f"g-{uuid.uuid4().hex[:8]}", **{"topic.metadata.refresh.interval.ms": 500})
    c.subscribe([topic_name])
    seen: dict = {}
    _poll_until([c], lambda: _assigned(c) == {0, 1}, seen)
    from confluent_kafka.admin import NewPartitions
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(10)
    _poll_until([c], lambda: _assigned(c) == {0, 1, 2, 3}, seen)
    c.close()


def test_regex_subscription(shared_broker, topic_name):
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, topic_name + "-a", 1)
    c = _consumer(bootstrap, f"g-{uuid.uuid4().hex[:8]}", **{"topic.metadata.refresh.interval.ms": 500})
    c.subscribe([f"^{topic_name}-.*"])
    seen: dict = {}
    _poll_until([c], lambda: {tp.topic for tp in c.assignment()} == {topic_name + "-a"}, seen)
    _create(bootstrap, topic_name + "-b", 1)
    _poll_until([c], lambda: {tp.topic for tp in c.assignment()} == {topic_name + "-a", topic_name + "-b"}, seen)
    c.close()


def test_consume_transform_produce(shared_broker, topic_name):
    bootstrap = shared_broker.bootstrap
    _create(bootstrap, topic_name)
    _create(bootstrap, topic_name + "-out")
    _produce(bootstrap, topic_name, 20)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = _consumer(bootstrap, group, **{"isolation.level": "read_committed"})
    c.subscribe([topic_name])
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"ctp-{group}"})
    p.init_transactions(10)
    done = 0
    end = time.monotonic() + 60
    while done < 20:
        assert time.monotonic() < end
        msgs = [m for m in c.consume(10, 0.5) if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(topic_name + "-out", m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 10)
        p.commit_transaction(10)
        done += len(msgs)
    committed = c.committed([TopicPartition(topic_name, q) for q in range(PARTITIONS)], 10)
    assert sum(tp.offset for tp in committed) == 20
    c.close()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{group}", "auto.offset.reset": "earliest",
                       "isolation.level": "read_committed"})
    reader.subscribe([topic_name + "-out"])
    out: list = []
    wait_until(lambda: out.extend(m.value() for m in reader.consume(20, 0.5) if m.error() is None) or len(out) >= 20,
               timeout=60)
    reader.close()
    assert sorted(out) == [b"%04d" % i for i in range(20)]
