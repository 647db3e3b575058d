"""The metadata journal: topics.json and partitions.json grow by a line per change (not a
rewrite of the whole file per topic created), read back as the same state, with a torn
last line ignored and a crash between the rewrite and the journal's removal harmless."""

from __future__ import annotations

import json
import uuid

from broker.cluster.replication import ReplicaState
from broker.log.files import JsonJournal
from broker.cluster.topics import TopicRegistry, read_topic_entries


def test_changes_append_lines_and_read_back_with_the_file(tmp_path):
    journal = JsonJournal(tmp_path / "m.json")
    whole: dict = {}
    for n in range(10):
        whole[f"k{n}"] = n
        journal.change(whole, {f"k{n}": n})
    del whole["k3"]
    journal.change(whole, {}, ["k3"])
    assert not journal.path.exists()  # 11 lines: no rewrite yet
    assert len(journal.journal_path.read_text().splitlines()) == 11
    assert JsonJournal(tmp_path / "m.json").load() == whole


def test_a_long_journal_is_folded_into_the_file(tmp_path):
    journal = JsonJournal(tmp_path / "m.json")
    whole: dict = {}
    for n in range(200):
        whole["k"] = n  # one key changed 200 times: the journal outgrows the object
        journal.change(whole, {"k": n})
    assert journal.path.exists()  # rewritten whole each time the journal passed 64 lines
    assert len(journal.journal_path.read_text().splitlines()) <= 64
    assert JsonJournal(tmp_path / "m.json").load() == {"k": 199}


def test_a_torn_last_line_is_ignored(tmp_path):
    journal = JsonJournal(tmp_path / "m.json")
    journal.change({"a": 1}, {"a": 1})
    with open(journal.journal_path, "a") as f:
        f.write('["b", 2')  # a crash in the middle of an append
    assert JsonJournal(tmp_path / "m.json").load() == {"a": 1}


def test_a_crash_before_the_journal_is_removed_replays_agreeing_lines(tmp_path):
    journal = JsonJournal(tmp_path / "m.json")
    journal.change({"k": 1}, {"k": 1})
    journal.change({"k": 2}, {"k": 2})
    kept = journal.journal_path.read_text()
    journal.rewrite({"k": 2})
    journal.journal_path.write_text(kept)  # as if the rewrite happened but not the removal
    assert JsonJournal(tmp_path / "m.json").load() == {"k": 2}


def test_topic_registry_creates_one_line_each_and_restarts_with_every_topic(tmp_path):
    registry = TopicRegistry(tmp_path)
    for n in range(100):
        registry.add(f"t{n}", n % 3 + 1, {"cleanup.policy": "compact"} if n == 7 else {})
    registry.set_partitions("t5", 9)
    registry.remove("t6")
    again = TopicRegistry(tmp_path)
    assert again.by_name == registry.by_name
    assert again.by_name["t5"].partitions == 9 and "t6" not in again.by_name
    assert again.by_name["t7"].configs == {"cleanup.policy": "compact"}
    assert isinstance(again.by_name["t1"].topic_id, uuid.UUID)
    # the file itself, once rewritten, is the list of entries sorted by name it always was
    again._journal.rewrite(again._entries)
    entries = json.loads((tmp_path / "meta" / "topics.json").read_text())
    assert [e["name"] for e in entries] == sorted(registry.by_name)
    assert sorted(e["name"] for e in read_topic_entries(tmp_path)) == sorted(registry.by_name)


def test_replica_state_saves_only_the_partitions_named(tmp_path):
    path = tmp_path / "partitions.json"
    state = ReplicaState(path, [0, 1])
    for i in range(4):
        state.assign("a", i, 2)
    state.save([("a", i) for i in range(4)])
    lines = JsonJournal(path).journal_path.read_text().splitlines()
    state.assign("b", 0, 1)
    state.save([("b", 0)])
    assert len(JsonJournal(path).journal_path.read_text().splitlines()) == len(lines) + 1
    state.forget("a", 3)
    state.save([])
    reopened = ReplicaState(path, [0, 1])
    assert reopened._stored == {"a-0": [[0, 1], 0, 0], "a-1": [[1, 0], 0, 1], "a-2": [[0, 1], 0, 0],
                                "b-0": [[0], 0, 0]}


def test_partitions_of_topics_with_equal_configs_share_one_log_config(tmp_path):
    from broker.cluster.cluster import Cluster
    from broker.config import BrokerConfig

    cluster = Cluster(BrokerConfig({}), tmp_path)
    cluster.create_topic("a", 2, 1)
    cluster.create_topic("b", 1, 1)
    cluster.create_topic("c", 1, 1, {"retention.ms": "1000"})
    try:
        a0, a1, b0, c0 = (cluster.partition(t, i) for t, i in (("a", 0), ("a", 1), ("b", 0), ("c", 0)))
        assert a0.log.config is a1.log.config is b0.log.config
        assert c0.log.config is not a0.log.config and c0.log.config.retention_ms == 1000
        cluster.alter_topic_configs("b", {"retention.ms": "1000"})
        assert b0.log.config is c0.log.config and a0.log.config.retention_ms != 1000
    finally:
        cluster.close()


def test_the_directory_is_synced_when_a_change_creates_the_journal(tmp_path, monkeypatch):
    """The journal's first line is durable only with its name: the directory is synced when
    a change creates the file, and not again for the lines appended after it."""
    import broker.log.files as files

    synced = []
    monkeypatch.setattr(files, "fsync_dir", synced.append)
    journal = JsonJournal(tmp_path / "t.json")
    journal.change({"a": 1}, {"a": 1})
    journal.change({"a": 1, "b": 2}, {"b": 2})
    assert synced == [tmp_path]
    journal.rewrite({"a": 1, "b": 2})
    synced.clear()
    journal.change({"a": 1, "b": 2, "c": 3}, {"c": 3})  # a new journal after the rewrite
    assert synced == [tmp_path]
    reopened = JsonJournal(tmp_path / "t.json")
    assert reopened.load() == {"a": 1, "b": 2, "c": 3}
    synced.clear()
    reopened.change({"d": 4}, {"d": 4})  # the journal exists: no directory sync
    assert synced == []
