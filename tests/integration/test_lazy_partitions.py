"""Start-up independent of the partition count: a restart (clean or after kill -9)
answers Metadata for every partition without opening one; a partition is opened on its
first use, after a kill -9 also by a background validation; retention and compaction
still reach partitions no client has touched since the restart."""

from __future__ import annotations

import os
import re
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from broker.testing import BrokerProcess

TOPICS, PARTITIONS = 2, 200


def _wait_for(broker: BrokerProcess, pattern: str, since: int, timeout: float = 30.0) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, broker.log_text()[since:])
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in the log:\n{broker.log_tail()}")


def _restart(broker: BrokerProcess, kill: bool) -> tuple[int, str]:
    broker.kill() if kill else broker.stop()
    seen = len(broker.log_text())
    broker.start()
    return seen, broker.log_text()[seen:]


def test_restarts_answer_metadata_without_opening_partitions(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [f"lazy-{uuid.uuid4().hex[:6]}-{t}" for t in range(TOPICS)]
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
            future.result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        for t in topics:
            for p in range(PARTITIONS):
                producer.produce(t, b"v", partition=p)
        assert producer.flush(60) == 0
        total = TOPICS * PARTITIONS

        for kill in (False, True):
            seen, started = _restart(broker, kill)
            assert f"{total} partitions known, readied in" in started
            assert ("unclean" in started) == kill
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            listed = admin.list_topics(timeout=10).topics
            assert all(len(listed[t].partitions) == PARTITIONS for t in topics)
            if not kill:
                # nothing opened: no partition holds a descriptor
                fds = os.listdir(f"/proc/{broker.proc.pid}/fd")
                assert len(fds) < 64, len(fds)
                targets = [os.readlink(f"/proc/{broker.proc.pid}/fd/{fd}") for fd in fds
                           if os.path.exists(f"/proc/{broker.proc.pid}/fd/{fd}")]
                assert not [t for t in targets if re.search(r"/\d{20}\.(log|index|timeindex)$", t)], targets
            else:
                # validated in the background, whether or not a client comes
                _wait_for(broker, rf"validated the {total} partitions not used since the unclean shutdown", seen)
            # and each opens on first use (asked by ListOffsets: a consumer's group lookup
            # would create __consumer_offsets, whose partitions the next start would count)
            last = TopicPartition(topics[-1], PARTITIONS - 1)
            assert [admin.list_offsets({last: spec})[last].result(10).offset
                    for spec in (OffsetSpec.earliest(), OffsetSpec.latest())] == [0, 1]
        assert "Traceback" not in broker.log_text()
    finally:
        broker.kill()


def test_retention_and_compaction_reach_partitions_nobody_touched(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        deleted, compacted = f"ret-{uuid.uuid4().hex[:6]}", f"cmp-{uuid.uuid4().hex[:6]}"
        admin.create_topics([
            NewTopic(deleted, 1, 1, config={"retention.ms": "60000"}),
            NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "1024",
                                              "min.cleanable.dirty.ratio": "0.01"}),
        ])[compacted].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        old = int(time.time() * 1000) - 3_600_000  # an hour old: past retention.ms
        for i in range(20):
            producer.produce(deleted, b"old", partition=0, timestamp=old + i)
        for i in range(200):
            producer.produce(compacted, b"x" * 40, key=b"k%d" % (i % 5), partition=0)
            producer.poll(0)
        assert producer.flush(30) == 0

        # restarted with the duties running often; no client touches either partition
        broker.overrides.update({"log.retention.check.interval.ms": 200, "log.cleaner.backoff.ms": 200})
        seen, started = _restart(broker, kill=False)
        assert "partitions known, readied in" in started
        _wait_for(broker, rf"retention deleted 1 segments of {deleted}-0", seen)
        _wait_for(broker, rf"cleaned {compacted}-0: \d+ -> \d+ bytes, \d+ records removed", seen)

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lazy", "enable.auto.commit": False})
        assert consumer.get_watermark_offsets(TopicPartition(deleted, 0), timeout=10) == (20, 20)
        consumer.close()
    finally:
        broker.kill()


def _series(text: str, name: str) -> dict[tuple[str, str], float]:
    """{(topic, partition): value} of a per-partition gauge in a /metrics answer."""
    found = {}
    for m in re.finditer(rf'^{name}\{{partition="(\d+)",topic="([^"]+)"\}} (\S+)$', text, re.M):
        found[(m.group(2), m.group(1))] = float(m.group(3))
    return found


def test_a_scrape_opens_no_partition(tmp_path):
    """/metrics and the console's state report a partition nobody used without opening
    it: its log end where known without reading the log, nothing else."""
    import json
    import urllib.request

    from broker.testing import InProcessBroker

    def get(path: str) -> str:
        with urllib.request.urlopen(b.admin_url + path, timeout=30) as answer:
            return answer.read().decode()

    b = InProcessBroker(tmp_path / "data", admin=True).start()
    try:
        topic = f"scraped-{uuid.uuid4().hex[:6]}"
        b.create_topic(topic, partitions=40)
        producer = Producer({"bootstrap.servers": b.bootstrap})
        producer.produce(topic, b"v", partition=0)
        assert producer.flush(30) == 0
        opened = set(b.broker.cluster.partitions)
        assert (topic, 0) in opened and (topic, 1) not in opened

        for restarted in (False, True):
            text = get("/metrics")
            state = json.loads(get("/console/state"))
            assert set(b.broker.cluster.partitions) == opened, "a scrape opened partitions"
            assert f"eosbroker_partitions_opened {float(len(opened))}" in text
            assert _series(text, "kafka_log_log_logendoffset")[(topic, "0")] == 1
            assert _series(text, "kafka_log_log_logstartoffset").get((topic, "0")) == (None if restarted else 0)
            assert (topic, "1") not in _series(text, "kafka_log_log_logstartoffset")
            assert (topic, "1") not in _series(text, "eosbroker_partition_last_stable_offset")
            rows = {p["partition"]: p for p in state["partitions"] if p["topic"] == topic}
            assert len(rows) == 40 and rows[0]["opened"] == (not restarted) and not rows[1]["opened"]
            if not restarted:
                # created this run and never opened: empty, so its end is known
                assert _series(text, "kafka_log_log_logendoffset")[(topic, "1")] == 0
                assert rows[1]["high_watermark"] == 0
                b.restart()
                opened = set(b.broker.cluster.partitions)  # the coordinator partitions, if any
                assert (topic, 0) not in opened
            else:
                # after a clean stop: partition 0's end is its recorded recovery point;
                # partition 1 has none recorded, so its end is not known without opening it
                assert rows[0]["log_end_offset"] == 1 and rows[0]["log_start_offset"] is None
                assert rows[1]["log_end_offset"] is None
                assert (topic, "1") not in _series(text, "kafka_log_log_logendoffset")
    finally:
        b.stop()
