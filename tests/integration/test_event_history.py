"""The event history behind the console's timeline (GET /events): a committed, a fenced
and an open transaction, a fault firing and a control operation, driven by real
clients against a real broker; and its bound (the memory it holds, measured)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.cluster.event_history import EventHistory
from broker.testing import wait_until


def _events(broker, since: int = 0) -> list[dict]:
    with urllib.request.urlopen(f"{broker.admin_url}/events?since={since}", timeout=30) as answer:
        return json.load(answer)["events"]


def _txn_steps(events, transactional_id):
    return [(e["state"], e.get("outcome")) for e in events
            if e["kind"] == "txn" and e["transactional_id"] == transactional_id]


def test_the_history_tells_each_transaction_its_markers_faults_and_the_held_lso(eosbroker_cluster):
    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    committed, held = "history-ok-" + topic, "history-held-" + topic

    ok = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": committed})
    ok.init_transactions(10)
    ok.begin_transaction()
    ok.produce(topic, b"kept", partition=0)
    ok.commit_transaction(10)

    hanging = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": held,
                        "transaction.timeout.ms": 600_000})
    hanging.init_transactions(10)
    hanging.begin_transaction()
    hanging.produce(topic, b"held", partition=0)
    assert hanging.flush(10) == 0
    broker.fault("delay", api_key=3, delay_ms=1)  # Metadata: the next one fires it
    broker.read_committed(topic)

    events = _events(broker)
    assert _txn_steps(events, committed)[-3:] == [
        ("Ongoing", None), ("PrepareCommit", None), ("CompleteCommit", "committed")]
    marker = [e for e in events if e["kind"] == "marker" and e["transactional_id"] == committed]
    assert marker and marker[-1]["marker"] == "COMMIT" and marker[-1]["partitions"] == [f"{topic}-0"]
    assert _txn_steps(events, held)[-1] == ("Ongoing", None)
    ongoing = [e for e in events if e["kind"] == "txn" and e["transactional_id"] == held][-1]
    assert ongoing["partitions"] == [f"{topic}-0"]
    assert any(e["kind"] == "fault" and e["action"] == "delay" for e in events)
    assert any(e["kind"] == "control" and e["op"] == "fault_add" for e in events)
    # the open transaction holds the LSO, and the history names it
    lso = [e for e in events if e["kind"] == "partition" and e["topic"] == topic]
    assert lso[-1]["last_stable_offset"] < lso[-1]["high_watermark"] and lso[-1]["held_by"] == held
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)

    # aborted from the control API: fenced, with its ABORT marker; the LSO moves on
    last = events[-1]["seq"]
    broker.control().transaction_abort(transactional_id=held)
    wait_until(lambda: _txn_steps(_events(broker, last + 1), held)[-1:] == [("CompleteAbort", "fenced")], 15,
               message="the fenced transaction's end")
    later = _events(broker, last + 1)
    assert ("PrepareAbort", None) in _txn_steps(later, held)
    assert any(e["kind"] == "marker" and e["marker"] == "ABORT" for e in later)
    assert any(e["kind"] == "control" and e["op"] == "transaction_abort" for e in later)
    offsets = [e for e in later if e["kind"] == "partition" and e["topic"] == topic]
    assert offsets[-1]["held_by"] is None and offsets[-1]["last_stable_offset"] == offsets[-1]["high_watermark"]


def test_the_history_keeps_its_size_and_its_memory_stays_bounded():
    clock = iter(range(10**9))
    history = EventHistory(1000, lambda: next(clock))

    def fill(n):
        for i in range(n):
            # ids and partitions never seen again, as a long torture run makes them
            history.transaction(f"id-{i // 3}", ("Ongoing", "PrepareAbort", "CompleteAbort")[i % 3], i // 3, 0,
                                [f"t-{i}-0"], reason="timed out")
            history.partition(f"t-{i}", 0, i, i - 1, None)
            history.offsets(f"g-{i}", {f"t-{i}-0": i}, "pending", i // 3)
            history.group(f"g-{i}", "classic", i, frozenset({f"member-{i}"}), "Stable", rebalancing=i % 2 == 0)
            if i % 5 == 0:
                history.group_deleted(f"g-{i - 1}", "classic", [f"t-{i}-0"])
                history.producers_named({i: f"named-{i}"})

    tracemalloc.start()
    fill(2000)  # full: the events and the per-id memories, each at its size
    full = tracemalloc.get_traced_memory()[0]
    fill(10_000)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(history.events) == 1000 and history.next_seq > 40_000
    assert history.since(0)[0]["seq"] == history.next_seq - 1000
    last = history.next_seq - 1
    assert [e["seq"] for e in history.since(last - 2)] == [last - 2, last - 1, last]
    assert [e["seq"] for e in history.since(0, limit=2)] == [last - 1, last] and history.since(last + 1) == []
    # 10,000 more rounds (40,000 events) hold no more than the full history did, and
    # that is well under 2 KiB per event kept, its share of the memories included
    assert held < full * 1.1 + 64 * 1024, (full, held)
    assert full < 1000 * 2048, full


def test_the_log_browser_marks_what_read_committed_sees(eosbroker_cluster):
    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "browse-" + topic,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(10)
    for value, end in ((b"dropped", producer.abort_transaction), (b'{"kept": 1}', producer.commit_transaction),
                       (b"open", None)):
        producer.begin_transaction()
        producer.produce(topic, value, key=b"k", partition=0, headers=[("h", b"\xff")])
        assert producer.flush(10) == 0
        if end is not None:
            end(10)
    answer = broker.control().log_batches(topic=topic, partition=0)
    assert (answer["last_stable_offset"], answer["high_watermark"]) == (4, 5)
    rows = [(b["base_offset"], b["transactional"], b["control"] and b["control"]["marker"],
             [r["read_committed"] for r in b["records"]]) for b in answer["batches"]]
    assert rows == [(0, True, None, ["aborted"]), (1, True, "ABORT", ["control"]), (2, True, None, ["visible"]),
                    (3, True, "COMMIT", ["control"]), (4, True, None, ["past-lso"])]
    kept = answer["batches"][2]["records"][0]
    assert kept["value"] == {"hex": b'{"kept": 1}'.hex(), "text": '{"kept": 1}', "json": {"kept": 1}}
    assert kept["headers"] == [{"key": "h", "value": {"hex": "ff"}}]
    assert answer["batches"][1]["control"]["coordinator_epoch"] >= 0
    assert answer["batches"][0]["producer_id"] == answer["batches"][4]["producer_id"] >= 0
    assert len(broker.control().log_batches(topic=topic, partition=0, from_offset=2, max_batches=2)["batches"]) == 2

    # __transaction_state, decoded as dump-log decodes it
    state = [r["decoded"] for p in range(50)
             for b in broker.control().log_batches(topic="__transaction_state", partition=p)["batches"]
             for r in b["records"]]
    assert any(f"transactionalId: browse-{topic}" in d and "state: CompleteCommit" in d for d in state)


FAILING_TEST = '''
from confluent_kafka import Producer


def test_fails(eosbroker_cluster):
    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "exported-id"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.commit_transaction(10)
    assert False, "on purpose"


def test_passes(eosbroker_cluster):
    eosbroker_cluster(admin=True)
'''


def test_the_plugin_writes_a_failed_tests_timeline(tmp_path):
    (tmp_path / "test_export.py").write_text(FAILING_TEST)
    out = tmp_path / "timelines"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          f"--eosbroker-timeline={out}", str(tmp_path / "test_export.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == ["test_export.py_test_fails.html"]
    page = (out / written[0]).read_text()
    # self-contained: nothing to load, nothing to fetch
    assert "renderTimeline(DATA.now_ms)" in page and "<script src" not in page and "fetch(" not in page
    data = json.loads(page.split("const DATA = ", 1)[1].split(";\n", 1)[0].replace("<\\/", "</"))
    steps = [(e["state"], e.get("outcome")) for e in data["events"]
             if e["kind"] == "txn" and e["transactional_id"] == "exported-id"]
    assert steps[-1] == ("CompleteCommit", "committed")


def test_the_log_browser_decodes_consumer_offsets(eosbroker_cluster):
    from confluent_kafka import Consumer, TopicPartition

    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    group = "browse-group-" + topic
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    finally:
        consumer.close()
    decoded = [r["decoded"] for p in range(50)
               for b in broker.control().log_batches(topic="__consumer_offsets", partition=p)["batches"]
               for r in b["records"]]
    assert any(d.startswith(f"offsetCommit: group: {group} partition: {topic}-0 offset: 7 ") for d in decoded), decoded

    # dump-log --offsets-decoder prints the same words
    from click.testing import CliRunner

    from broker.tools.dump_log import dump_log

    segments = sorted(broker.data_dir.glob("__consumer_offsets-*/*.log"))
    printed = CliRunner().invoke(dump_log, ["--offsets-decoder", *map(str, segments)])
    assert printed.exit_code == 0, printed.output
    assert f"offsetCommit: group: {group} partition: {topic}-0 offset: 7 " in printed.output


def test_the_history_tells_node_stops_and_coordinator_moves(eosbroker_cluster):
    broker = eosbroker_cluster(nodes=3, admin=True)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "moved-id"})
    producer.init_transactions(10)
    control = broker.control()
    moves = lambda: [e for e in _events(broker) if e["kind"] == "coordinator"]  # noqa: E731
    before = moves()
    for to in (1, 2, 3):  # to the nodes in turn: at most one of them already leads it
        control.coordinator_move(to=to, transactional_id="moved-id")
        if moves() != before:
            break
    move = moves()[-1]
    assert (move["topic"], move["node_to"]) == ("__transaction_state", to) and move["node_from"] != to
    assert move["coordinator_epoch"] >= 1
    other = next(n for n in (1, 2, 3) if n != to)
    control.node_stop(node_id=other)
    assert any(e["kind"] == "node" and (e["node"], e["change"]) == (other, "stopped") for e in _events(broker))


def test_a_timed_out_transaction_and_the_event_stream(eosbroker_cluster):
    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "late-" + topic,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"never", partition=0)
    assert producer.flush(10) == 0
    broker.control().clock_advance(by="5m")  # past its timeout: the coordinator aborts it
    wait_until(lambda: _txn_steps(_events(broker), "late-" + topic)[-1:] == [("CompleteAbort", "timed out")], 15,
               message="the timed-out transaction's end")
    abort = [e for e in _events(broker) if e["kind"] == "txn" and e["state"] == "PrepareAbort"][-1]
    assert abort["reason"] == "timed out" and abort["transactional_id"] == "late-" + topic

    # the console's stream: its first message carries the history, from its start
    with urllib.request.urlopen(broker.admin_url + "/console/events", timeout=30) as stream:
        line = b""
        while not line.startswith(b"data: "):
            line = stream.readline()
    first = json.loads(line[len(b"data: "):])
    assert first["events"][0]["seq"] == 0 and first["events"] == _events(broker)[:len(first["events"])]
    assert "log_batches" in first["actions"]


def test_the_history_of_a_coordinator_dying_after_prepare_commit(broker_factory):
    broker = broker_factory(scenario="coordinator-dies-after-prepare-commit")
    topic = broker.create_topic(partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "payments",
                         "socket.timeout.ms": 5000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(3):
        producer.produce(topic, b"a", partition=p)
    producer.commit_transaction(60)  # rolled forward by the next coordinator

    events = _events(broker)
    steps = _txn_steps(events, "payments")
    assert steps[-2:] == [("PrepareCommit", None), ("CompleteCommit", "committed")], steps
    killed = [e for e in events if e["kind"] == "node" and e["change"] == "killed"]
    assert len(killed) == 1
    # the triggers' link cut and kill are on the timeline, saying which trigger made them
    made = [(e["op"], e.get("by")) for e in events if e["kind"] == "control"]
    assert made[-3:] == [("network_cut", "scenario trigger 1"), ("node_kill", "scenario trigger 2"),
                    ("network_heal", "scenario trigger 2")], made
    moved = [e for e in events if e["kind"] == "coordinator" and e["topic"] == "__transaction_state"
             and e["node_from"] == killed[0]["node"] and e["seq"] > killed[0]["seq"]]
    assert moved, "the coordinator's move off the killed node"
    # the markers came from the new coordinator, after the kill, and reached every partition
    markers = [e for e in events if e["kind"] == "marker" and e["transactional_id"] == "payments"
               and e["seq"] > killed[0]["seq"]]
    assert sorted(p for m in markers for p in m["partitions"]) == [f"{topic}-{p}" for p in range(3)]
    assert all(m["marker"] == "COMMIT" and m["coordinator_epoch"] >= 1 for m in markers)


def group_story(broker, topic: str, group: str, transactional_id: str) -> None:
    """A classic group's member joins, commits offset 3 of ``topic``-0 and leaves; a
    transaction commits the group's offset 5 (pending until its marker); another
    transaction stays open, so the LSO (7) trails the high watermark (8)."""
    from confluent_kafka import Consumer, TopicPartition

    plain = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(5):
        plain.produce(topic, b"%d" % i, partition=0)
    assert plain.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    wait_until(lambda: got.append(consumer.poll(0.2)) or sum(m is not None and m.error() is None for m in got) >= 5,
               30, message="the consumer's records")
    consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    txn = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": transactional_id})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, b"t", partition=0)
    txn.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), 10)
    txn.commit_transaction(10)
    consumer.close()  # leaves: the group's next generation has no member
    held = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": transactional_id + "-open",
                     "transaction.timeout.ms": 600_000})
    held.init_transactions(10)
    held.begin_transaction()
    held.produce(topic, b"open", partition=0)
    assert held.flush(10) == 0


def test_the_history_tells_a_groups_offsets_rebalances_and_deletions(eosbroker_cluster):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    broker = eosbroker_cluster(admin=True)
    topic = broker.create_topic()
    group, transactional_id = "history-group-" + topic, "history-offsets-" + topic
    group_story(broker, topic, group, transactional_id)

    events = _events(broker)
    offsets = [(e["state"], e["offsets"], e.get("transactional_id")) for e in events
               if e["kind"] == "offsets" and e["group_id"] == group]
    assert offsets == [("committed", {f"{topic}-0": 3}, None), ("pending", {f"{topic}-0": 5}, transactional_id),
                       ("committed", {f"{topic}-0": 5}, transactional_id)], offsets
    rebalances = [e for e in events if e["kind"] == "group" and e["group_id"] == group]
    # the rebalance's start (PreparingRebalance, written nowhere) as well as its end
    assert [(e["protocol"], e["state"], e.get("rebalance"), e["members"], len(e["joined"]), len(e["left"]))
            for e in rebalances] == [
        ("classic", "PreparingRebalance", "started", 1, 1, 0), ("classic", "CompletingRebalance", None, 1, 0, 0),
        ("classic", "Stable", "ended", 1, 0, 0), ("classic", "Empty", None, 0, 0, 1)], rebalances
    assert rebalances[0]["joined"] == rebalances[-1]["left"]
    assert rebalances[-1]["generation"] > rebalances[1]["generation"] > rebalances[0]["generation"]
    with urllib.request.urlopen(f"{broker.admin_url}/console/state", timeout=30) as answer:
        (state,) = [g for g in json.load(answer)["groups"] if g["group_id"] == group]
    assert [(o["offset"], o["last_stable_offset"], o["high_watermark"], o["lag_lso"], o["lag_hw"])
            for o in state["offsets"]] == [(5, 7, 8, 2, 3)]

    # a consumer group (KIP-848): its epoch moves as its member joins and leaves
    other = "history-848-" + topic
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": other,
                         "group.protocol": "consumer", "enable.auto.commit": False})
    consumer.subscribe([topic])
    wait_until(lambda: consumer.poll(0.2) is not None or bool(consumer.assignment()), 30, message="an assignment")
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    moves = [e for e in _events(broker) if e["kind"] == "group" and e["group_id"] == other]
    assert [e["protocol"] for e in moves] == ["consumer"] * len(moves) and moves[0]["joined"] and moves[-1]["left"]
    assert moves[-1]["members"] == 0 and moves[-1]["generation"] > moves[0]["generation"]

    # deletions: the classic group's offset (OffsetDelete), then the consumer group with its offset
    last = _events(broker)[-1]["seq"]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        assert admin.delete_group_offsets(group, [KafkaTopicPartition(topic, 0)])
    finally:
        admin.close()
    deleting = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    deleting.delete_consumer_groups([other])[other].result(30)
    later = [e for e in _events(broker, last + 1) if e["kind"] in ("group", "offsets")]
    assert [(e["kind"], e["group_id"], e.get("state"), e.get("offsets"), e.get("deleted"), e.get("offsets_deleted"))
            for e in later] == [("offsets", group, "deleted", {f"{topic}-0": None}, None, None),
                                ("group", other, "Dead", None, True, [f"{topic}-0"])], later
    assert later[1]["protocol"] == "consumer" and later[1]["generation"] == moves[-1]["generation"]


def test_an_lso_held_from_before_a_restart_is_on_the_history(broker_factory):
    """No move tells an LSO held since before a restart. An open transaction: its
    coordinator's load records it (from when it began) and its partition's offsets,
    naming it, before any client opens the partition. A hanging one (its coordinator
    finished it, a late write reopened the partition: the hanging-transaction scenario):
    the partition, opened lazily (here by a client's ListOffsets), records its held LSO,
    named by the transactional id the load gave its producer."""
    import asyncio

    from tests.scenarios.helpers import create_topic
    from tests.scenarios.test_hanging_transaction import _abort_with_a_late_write

    broker = broker_factory(scenario="hanging-transaction", admin=True)
    hanging, topic = create_topic(broker), create_topic(broker)
    assert asyncio.run(_abort_with_a_late_write(broker, hanging))["late_write"] == ("NONE", 2)
    held = "held-over-" + topic
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": held,
                         "transaction.timeout.ms": 600_000})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(10) == 0
    broker.restart()

    def offsets(of: str) -> list[dict]:
        return [e for e in _events(broker) if e["kind"] == "partition" and e["topic"] == of]

    def loaded():
        txn = [e for e in _events(broker) if e["kind"] == "txn" and e["transactional_id"] == held]
        lso = offsets(topic)
        return txn and lso and (txn[-1], lso[-1])
    txn, lso = wait_until(loaded, 30, message="the loaded transaction and its partition's offsets")
    assert (txn["state"], txn["loaded"], txn["partitions"]) == ("Ongoing", True, [f"{topic}-0"])
    assert txn["start_time_ms"] > 0  # the clock before the restart (the scenario's jump is not kept across it)
    assert (lso["high_watermark"], lso["last_stable_offset"], lso["held_by"]) == (1, 0, held)

    assert not offsets(hanging)  # its coordinator knows of nothing open: told once the partition opens
    reader = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "watermarks"})
    reader.get_watermark_offsets(TopicPartition(hanging, 0), timeout=30)  # a ListOffsets opens the partition
    reader.close()
    named = lambda: (lambda lso: lso and lso[-1]["held_by"] == "late-app" and lso[-1])(offsets(hanging))  # noqa: E731
    lso = wait_until(named, 30, message="the hanging transaction's held LSO named late-app")
    assert (lso["high_watermark"], lso["last_stable_offset"]) == (3, 2)
