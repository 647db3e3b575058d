"""Partitions opened on first use (broker.cluster.cluster): what start-up opens, and the
clean-shutdown marker after a run that left partitions unvalidated."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from broker.cluster.cluster import Cluster
from broker.config import BrokerConfig

from .test_log import make_batch, view


def _start(data: Path) -> Cluster:
    cluster = Cluster(BrokerConfig(), data)
    cluster.open_all()
    return cluster


def test_start_opens_nothing_and_first_use_opens_one(tmp_path: Path) -> None:
    cluster = _start(tmp_path)
    cluster.create_topic("t", 3)
    assert cluster.partitions == {}  # created: directories and registry only
    cluster.partition("t", 1).append(view(make_batch()), now_ms=0)
    assert set(cluster.partitions) == {("t", 1)}
    assert cluster.partition("t", 3) is None and cluster.partition("u", 0) is None
    cluster.close()

    cluster = _start(tmp_path)
    assert cluster.partitions == {}
    assert cluster.partition("t", 1).log.log_end_offset == 1
    cluster.close()


def test_no_clean_marker_while_partitions_are_unvalidated_since_a_crash(tmp_path: Path, caplog) -> None:
    cluster = _start(tmp_path)
    cluster.create_topic("t", 2)
    for i in range(2):
        cluster.partition("t", i).append(view(make_batch()), now_ms=0)
    # a crash: no close()
    cluster = _start(tmp_path)
    assert not cluster.clean_start
    cluster.partition("t", 0)
    with caplog.at_level(logging.INFO):
        cluster.close()
    assert "1 partitions not opened since the unclean shutdown" in caplog.text
    assert not cluster.clean_shutdown_path.exists()

    cluster = _start(tmp_path)
    assert not cluster.clean_start
    assert cluster.partition("t", 1).log.log_end_offset == 1  # validated now
    cluster.partition("t", 0)
    cluster.close()
    assert cluster.clean_shutdown_path.exists()
    assert _start(tmp_path).clean_start


def test_clean_stop_writes_every_snapshot_then_fsyncs_them_in_one_pass(tmp_path: Path, monkeypatch) -> None:
    """What a clean stop of many written partitions does to the disk: every partition's
    snapshot is written first, then one pass fsyncs every snapshot, segment and directory
    (not one fsync after each partition), and only then comes the clean-shutdown marker."""
    import os

    from broker.log.producer_snapshots import list_snapshots

    cluster = _start(tmp_path)
    cluster.create_topic("t", 4)
    for i in range(4):
        cluster.partition("t", i).append(view(make_batch()), now_ms=0)
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda src, dst: (events.append(("replace", str(dst))),
                                                         real_replace(src, dst))[1])
    cluster.close()

    snapshots = [str(list_snapshots(cluster.partition_dir("t", i))[-1][1]) for i in range(4)]
    replaced = [path for kind, path in events if kind == "replace"]
    fsynced = [path for kind, path in events if kind == "fsync"]
    assert set(snapshots) <= set(replaced) and set(snapshots) <= set(fsynced)
    first_fsync = next(n for n, (kind, _) in enumerate(events) if kind == "fsync")
    assert all(events.index(("replace", s)) < first_fsync for s in snapshots)  # all written before any fsync
    for i in range(4):
        directory = str(cluster.partition_dir("t", i))
        assert directory in fsynced and f"{directory}/00000000000000000000.log" in fsynced
        assert fsynced.count(directory) == 1  # one pass, each directory once
    marker = str(cluster.clean_shutdown_path)
    assert events.index(("replace", marker)) > max(n for n, (kind, path) in enumerate(events)
                                                  if kind == "fsync" and path in snapshots)
    assert _start(tmp_path).clean_start


def test_a_start_after_a_clean_stop_replays_no_journal_and_reads_no_recovery_points(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """What a start costs per partition: after a clean stop the registries are whole files
    (their journals folded in at the stop), and the recovery points, a line per partition,
    are read only when a partition opens."""
    import broker.cluster.cluster as cluster_module

    cluster = _start(tmp_path)
    cluster.create_topic("t", 3)
    cluster.partition("t", 0).append(view(make_batch()), now_ms=0)
    assert (tmp_path / "meta" / "topics.json.journal").exists()
    cluster.close()
    for name in ("topics.json", "partitions.json"):
        assert (tmp_path / "meta" / name).exists() and not (tmp_path / "meta" / f"{name}.journal").exists()

    reads = []
    real_read = cluster_module.read_recovery_points
    monkeypatch.setattr(cluster_module, "read_recovery_points", lambda path: (reads.append(path), real_read(path))[1])
    cluster = _start(tmp_path)
    assert cluster.clean_start and cluster.partitions == {} and reads == []
    # no leadership assigned, nor the recorded ones read, before one is asked for
    assert cluster.replicas.partitions == {} and cluster.replicas._stored_value is None
    assert cluster.leader_of("t", 2) == 1  # the registry and the leaderships are there
    assert set(cluster.replicas.partitions) == {("t", 0), ("t", 1), ("t", 2)}
    assert cluster.partition("t", 0).log.log_end_offset == 1 and len(reads) == 1
    assert cluster.partition("t", 0).recovery_point == 1
    cluster.close()


def test_a_first_use_lists_the_partition_directory_once(tmp_path: Path, monkeypatch) -> None:
    """Opening a partition (leftovers, interrupted cleaning, segments, snapshots, the
    leader-epoch and log-start-offset files) works from one listing of its directory,
    and opens no file the listing did not hold."""
    import os

    cluster = _start(tmp_path)
    cluster.create_topic("t", 2)
    for i in range(2):
        cluster.partition("t", i).append(view(make_batch()), now_ms=0)
    cluster.close()
    directory = str(cluster.partition_dir("t", 1))
    listed: list[str] = []
    missing: list[str] = []
    real_listdir, real_scandir, real_open = os.listdir, os.scandir, os.open

    def listdir(path=".") -> list[str]:
        listed.append(str(path))
        return real_listdir(path)

    def scandir(path="."):
        listed.append(str(path))
        return real_scandir(path)

    def open_(path, flags, *args, **kwargs):
        try:
            return real_open(path, flags, *args, **kwargs)
        except FileNotFoundError:
            missing.append(str(path))
            raise

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "open", open_)
    for clean in (True, False):
        cluster = _start(tmp_path)
        if not clean:
            assert not cluster.clean_start
        listed.clear()
        assert cluster.partition("t", 1).log.log_end_offset == 1
        assert listed.count(directory) == 1 and missing == []
        # a crash: no close(), so the next start validates beyond the recovery point
    monkeypatch.undo()


def test_a_partition_opened_after_a_config_change_gets_the_new_config(tmp_path: Path) -> None:
    """A topic's log config is built once for all its partitions' opens: a change of the
    topic's configs or of a dynamic broker default reaches the partitions opened after it."""
    from broker.cluster.dynamic_configs import BROKER, TOPIC, ConfigChange, DynamicConfigs

    cluster = _start(tmp_path)
    dynamic = DynamicConfigs(tmp_path / "meta", cluster.config)
    cluster.create_topic("t", 3)
    assert cluster.partition("t", 0).log.config.segment_ms == 604800000
    dynamic.alter(cluster, TOPIC, "t", [ConfigChange("segment.ms", "60000")], incremental=True, validate_only=False)
    assert cluster.partition("t", 0).log.config.segment_ms == 60000
    assert cluster.partition("t", 1).log.config.segment_ms == 60000
    assert cluster.partition("t", 1).log.config.retention_ms == 604800000
    dynamic.alter(cluster, BROKER, "", [ConfigChange("log.retention.ms", "1000")], incremental=True,
                  validate_only=False)
    assert cluster.partition("t", 1).log.config.retention_ms == 1000
    assert cluster.partition("t", 2).log.config.retention_ms == 1000
    assert cluster.partition("t", 2).log.config.segment_ms == 60000
    cluster.delete_topic("t")
    cluster.create_topic("t", 1)  # a new topic of the same name: its own (default) configs
    assert cluster.partition("t", 0).log.config.segment_ms == 604800000
    cluster.close()


def test_only_a_data_directory_without_the_intent_journal_is_scanned_once(tmp_path: Path, monkeypatch) -> None:
    scans = []
    real_scan = Cluster._repair_half_made_topics
    monkeypatch.setattr(Cluster, "_repair_half_made_topics", lambda self: (scans.append(1), real_scan(self))[1])
    cluster = _start(tmp_path)
    cluster.create_topic("t", 2)
    cluster.close()
    assert scans == [1]  # the first start: no journal yet

    (tmp_path / "ghost-0").mkdir()  # as an older version's crash leaves it
    (tmp_path / "ghost-0" / f"{0:020d}.log").write_bytes(b"")
    _start(tmp_path).close()
    (tmp_path / "meta" / "clean-shutdown").unlink()  # as a kill -9 leaves it
    _start(tmp_path).close()
    assert scans == [1]  # neither a clean nor an unclean start lists the directories again

    (tmp_path / "meta" / "topic-intents.json").unlink()  # a data directory from before the journal
    _start(tmp_path).close()
    assert scans == [1, 1] and not (tmp_path / "ghost-0").exists() and (tmp_path / "t-1").is_dir()



def test_a_fresh_data_directory_starts_without_writing_a_file(tmp_path: Path) -> None:
    _start(tmp_path).close()
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["meta/clean-shutdown"]  # the stop's marker; the start wrote nothing
    cluster = _start(tmp_path)
    cluster.create_topic("t", 1)  # the first create writes the journal before its directory
    assert (tmp_path / "meta" / "topic-intents.json").read_bytes() == b"[]"
    cluster.close()

class _Killed(BaseException):
    """Stands for a kill -9: nothing after it runs, no clean-up."""


def _kill_at(monkeypatch, owner, name: str) -> None:
    def killed(*args, **kwargs):
        raise _Killed
    monkeypatch.setattr(owner, name, killed)


def _killed_during(step, tmp_path: Path, monkeypatch, caplog, owner, name: str) -> Cluster:
    """Runs ``step`` killed at ``owner.name`` and starts the cluster again from its disk."""
    _kill_at(monkeypatch, owner, name)
    try:
        step()
    except _Killed:
        pass
    return _restart(tmp_path, monkeypatch, caplog)


def _restart(tmp_path: Path, monkeypatch, caplog) -> Cluster:
    monkeypatch.undo()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="broker.cluster.cluster"):
        return _start(tmp_path)


def test_create_killed_at_each_point_leaves_the_whole_topic_or_none(tmp_path: Path, monkeypatch, caplog) -> None:
    from broker.cluster.topic_intents import TopicIntents
    from broker.cluster.topics import TopicRegistry

    _start(tmp_path).close()
    # before the journal write: nothing recorded, nothing made
    cluster = _start(tmp_path)
    cluster = _killed_during(lambda: cluster.create_topic("a", 3), tmp_path, monkeypatch, caplog, TopicIntents, "begin")
    assert "a" not in cluster.topics.by_name and not list(tmp_path.glob("a-*")) and caplog.records == []

    # after the directories, before the registry: rolled back, with a log line
    _kill_at(monkeypatch, TopicRegistry, "add")
    try:
        cluster.create_topic("b", 3)
    except _Killed:
        pass
    assert (tmp_path / "b-2").is_dir()
    cluster = _restart(tmp_path, monkeypatch, caplog)
    assert "b" not in cluster.topics.by_name and not list(tmp_path.glob("b-*"))
    assert "rolled back the topic create of b: removed its partition directories (0-2)" in caplog.text

    # after the registry, before the intent is cleared: the topic stays, whole
    cluster = _killed_during(lambda: cluster.create_topic("c", 3), tmp_path, monkeypatch, caplog, TopicIntents, "clear")
    assert cluster.topics.by_name["c"].partitions == 3 and len(list(tmp_path.glob("c-*"))) == 3
    assert "completed the topic create of c" in caplog.text
    assert TopicIntents(tmp_path / "meta").load() and not cluster.intents.pending

    # a partition add killed before the registry: the topic as it was
    cluster = _killed_during(lambda: asyncio.run(cluster.add_partitions("c", 5)), tmp_path, monkeypatch, caplog, TopicRegistry, "set_partitions")
    assert cluster.topics.by_name["c"].partitions == 3 and len(list(tmp_path.glob("c-*"))) == 3
    assert "rolled back the partition add of c" in caplog.text

    # a delete killed after the registry, before its directories went: they go at start
    import broker.cluster.cluster as cluster_module
    cluster = _killed_during(lambda: cluster.delete_topic("c"), tmp_path, monkeypatch, caplog, cluster_module, "_remove_dirs")
    assert "c" not in cluster.topics.by_name and not list(tmp_path.glob("c-*"))
    assert "completed the delete of topic c" in caplog.text
    cluster.close()


def test_an_unreadable_intent_journal_falls_back_to_the_directory_scan(tmp_path: Path, caplog) -> None:
    _start(tmp_path).close()
    (tmp_path / "ghost-0").mkdir()
    (tmp_path / "meta" / "topic-intents.json").write_bytes(b"[{\"op\": ")  # torn by a failing disk
    with caplog.at_level(logging.WARNING, logger="broker.cluster.cluster"):
        cluster = _start(tmp_path)
    assert "topic-intents.json is unreadable" in caplog.text and not (tmp_path / "ghost-0").exists()
    assert cluster.intents.pending == [] and cluster.intents.load()
    cluster.close()


def test_a_deleted_topics_recovery_points_never_reach_a_topic_made_again_under_its_name(tmp_path: Path) -> None:
    """A delete leaves its points in the recovery-points file (no rewrite of every
    partition's); they go at the next write, at the latest before partitions of the name
    are made again, also when a crash came between the delete and that write."""
    from broker.log.recovery_points import read_recovery_points

    cluster = _start(tmp_path)
    for name in ("t", "other"):
        cluster.create_topic(name, 2)
        for i in range(2):
            cluster.partition(name, i).append(view(make_batch()), now_ms=0)
    cluster.close()  # records every point: 1 each
    recorded = lambda: read_recovery_points(cluster.recovery_points_path)  # noqa: E731
    assert recorded()[("t", 1)] == 1

    cluster = _start(tmp_path)
    cluster.delete_topic("t")
    assert ("t", 1) in recorded()  # left for the next write
    # a kill -9 here; the next run made the topic again
    cluster = _start(tmp_path)
    assert cluster.unopened_log_end("t", 1) is None
    cluster.create_topic("t", 3)
    assert set(recorded()) == {("other", 0), ("other", 1)}  # gone before the new partitions exist
    cluster = _start(tmp_path)  # a kill -9 again
    assert cluster.partition("t", 1).log.log_end_offset == 0
    assert cluster.partition("t", 1).recovery_point in (None, 0)

    cluster.delete_topic("t")  # in the same run as the make again: the points were read
    cluster.create_topic("t", 1)
    asyncio.run(cluster.add_partitions("t", 2))
    assert set(recorded()) <= {("other", 0), ("other", 1), ("t", 0), ("t", 1)}
    assert all(recorded().get(("t", i), 0) == 0 for i in range(2))
    assert cluster.partition("other", 1).log.log_end_offset == 1
    cluster.close()
