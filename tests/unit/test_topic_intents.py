"""The topic intent journal: what a start does with each intent a kill -9 left, at each
crash point of a create, partition add and delete (the registry being the commit point)."""

from __future__ import annotations

from pathlib import Path

from broker.cluster.topic_intents import ADD, CREATE, DELETE, Intent, TopicIntents, resolve


def test_create_killed_before_the_registry_is_rolled_back():
    # killed between the journal write and the directories, or between them and the registry
    outcome = resolve(Intent(CREATE, "t", 0, 4), registered_partitions=None)
    assert outcome.remove == range(0, 4) and outcome.make == range(0)
    assert outcome.message == ("rolled back the topic create of t: removed its partition directories (0-3), "
                               "which the registry never named")


def test_create_killed_after_the_registry_is_completed_never_lost():
    outcome = resolve(Intent(CREATE, "t", 0, 4), registered_partitions=4)
    assert outcome.remove == range(0) and outcome.make == range(0, 4)
    assert "completed the topic create of t" in outcome.message


def test_partition_add_rolls_back_only_the_new_partitions_or_completes_them():
    back = resolve(Intent(ADD, "t", 2, 5), registered_partitions=2)
    assert back.remove == range(2, 5) and back.make == range(0)
    done = resolve(Intent(ADD, "t", 2, 5), registered_partitions=5)
    assert done.remove == range(0) and done.make == range(2, 5)


def test_delete_before_the_registry_keeps_the_topic_and_after_it_removes_the_directories():
    kept = resolve(Intent(DELETE, "t", 0, 3), registered_partitions=3)
    assert kept.remove == range(0) and kept.make == range(0) and "kept" in kept.message
    gone = resolve(Intent(DELETE, "t", 0, 3), registered_partitions=None)
    assert gone.remove == range(0, 3) and gone.make == range(0)


def test_the_journal_file_holds_only_pending_intents(tmp_path: Path):
    journal = TopicIntents(tmp_path)
    assert journal.load() is False  # no file yet: the caller scans once
    first = Intent(CREATE, "a", 0, 2, (("cleanup.policy", "compact"),))
    second = Intent(ADD, "b", 1, 3)
    journal.begin(first)
    journal.begin(second)
    journal.clear(first)
    again = TopicIntents(tmp_path)
    assert again.load() is True and again.pending == [second]
    again.clear_all()
    third = TopicIntents(tmp_path)
    assert third.load() is True and third.pending == []


def test_a_journal_emptied_by_a_crash_after_an_unsynced_clear_reads_as_no_intent(tmp_path: Path):
    (tmp_path / "topic-intents.json").write_bytes(b"")
    journal = TopicIntents(tmp_path)
    assert journal.load() is True and journal.pending == []


def test_a_delete_whose_directories_were_renamed_aside_removes_them_too():
    intent = Intent(DELETE, "t", 0, 3, aside="ab12")
    assert intent.aside_name(2) == "t-2.ab12-delete"
    gone = resolve(intent, registered_partitions=None)
    assert gone.remove == range(0, 3) and gone.remove_aside == range(0, 3)
    # created again before the kill: the new topic's directories stay, the old ones go
    again = resolve(intent, registered_partitions=5, registered_id="cd34")
    assert again.remove == range(0) and again.make == range(0) and again.remove_aside == range(0, 3)
    assert "since created again" in again.message
    kept = resolve(intent, registered_partitions=3, registered_id="ab12")  # stopped before the registry
    assert kept.remove == kept.remove_aside == range(0) and "kept" in kept.message


def test_the_journal_keeps_a_deletes_aside_name(tmp_path: Path):
    journal = TopicIntents(tmp_path)
    journal.begin(Intent(DELETE, "t", 0, 2, aside="ab12"))
    again = TopicIntents(tmp_path)
    assert again.load() is True and again.pending == [Intent(DELETE, "t", 0, 2, aside="ab12")]
