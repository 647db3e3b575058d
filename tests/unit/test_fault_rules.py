"""The fault engine's sans-IO parts: what a request names, the error answer built from
any API's response schema, and rule counting (skip, count, nth, seeded probability)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from broker.faults.answers import error_answer, parse_error
from broker.faults.fields import kinds_named_by, named_in
from broker.faults.requests import FaultRules, Match, RequestSeen
from broker.wire.server import HANDLERS
from protocol import answer_wire
from protocol.request_wire import ApiTable
from protocol.records import build_batch


def _every_served_version():
    table = ApiTable(set(HANDLERS), "4.4")
    for key in sorted(table.ranges):
        r = table.get(key)
        for version in range(r.accepted_min, r.max + 1):
            yield key, version


def test_every_api_version_gets_an_encodable_error_answer():
    for key, version in _every_served_version():
        request = answer_wire.build_request(key, version, {})
        answer = error_answer(key, version, request, 7)
        if answer is not None:
            encoded = answer_wire.encode(answer)
            assert answer_wire.decode_response(key, version, encoded) == answer, (key, version)


def test_the_error_goes_on_each_partition_or_entry_and_on_the_top_level_only_otherwise():
    produce = answer_wire.build_request(0, 11, {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": None}, {"index": 3, "records": None}]}]})
    answer = error_answer(0, 11, produce, 19)
    [topic] = answer.responses
    assert topic.name == "t"
    assert [(p.index, int(p.error_code)) for p in topic.partition_responses] == [(0, 19), (3, 19)]

    batched = answer_wire.build_request(24, 5, {"transactions": [
        {"transactional_id": "x", "producer_id": 5, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": "t", "partitions": [1, 2]}]}]})
    answer = error_answer(24, 5, batched, 51)
    assert int(answer.error_code) == 0
    [txn] = answer.results_by_transaction
    assert txn.transactional_id == "x"
    assert [(p.partition_index, int(p.partition_error_code)) for p in txn.topic_results[0].results_by_partition] \
        == [(1, 51), (2, 51)]

    keys = answer_wire.build_request(10, 4, {"key_type": 1, "coordinator_keys": ["a", "b"]})
    assert [(c.key, int(c.error_code)) for c in error_answer(10, 4, keys, 15).coordinators] == [("a", 15), ("b", 15)]

    init = answer_wire.build_request(22, 5, {"transactional_id": "x", "producer_id": 4, "producer_epoch": 1})
    answer = error_answer(22, 5, init, 15)
    assert (int(answer.error_code), answer.producer_id) == (15, -1)

    assert error_answer(0, 11, answer_wire.build_request(0, 11, {"acks": 0, "timeout_ms": 1, "topic_data": []}),
                        19) is None  # acks=0 expects no answer


def test_a_request_names_its_ids_topics_partitions_and_batch_producer_ids():
    records = build_batch([(None, b"v", (), 1000)], producer_id=4242, producer_epoch=0, base_sequence=0)
    produce = answer_wire.build_request(0, 9, {"transactional_id": "tx", "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 2, "records": bytes(records)}]}]})
    named = named_in(0, produce, lambda _: None)
    assert named.transactional_ids == {"tx"} and named.producer_ids == {4242} and named.partitions == {("t", 2)}

    commit = answer_wire.build_request(28, 3, {"transactional_id": "tx", "group_id": "g", "producer_id": 7,
                                            "producer_epoch": 0, "topics": [
                                                {"name": "u", "partitions": [{"partition_index": 0}]}]})
    named = named_in(28, commit, lambda _: None)
    assert (named.group_ids, named.producer_ids, named.partitions) == ({"g"}, {7}, {("u", 0)})

    metadata = answer_wire.build_request(3, 12, {"topics": [{"name": "m", "topic_id": None}]})
    assert named_in(3, metadata, lambda _: None).partitions == {("m", None)}
    find = answer_wire.build_request(10, 3, {"key": "grp", "key_type": 0})
    assert named_in(10, find, lambda _: None).group_ids == {"grp"}

    assert kinds_named_by(22, 5) == {"transactional_id", "producer_id"}
    assert {"topic", "partition", "producer_id", "transactional_id"} <= kinds_named_by(0, 11)
    assert "topic" not in kinds_named_by(18, 3)


def _seen(api_key=0, version=9, node_id=1, client_id="c", request=None):
    return RequestSeen(node_id, api_key, version, client_id, request, lambda _: None)


def test_skip_count_nth_and_version_ranges():
    rules = FaultRules()
    rule = rules.add("drop_response", Match(api_key=0, min_version=8, max_version=9), skip=1, count=2)
    fired = [rules.consult(_seen(version=v)) is rule for v in (9, 9, 7, 9, 8, 9)]
    assert fired == [False, True, False, True, False, False]
    assert (rule.matched, rule.fired) == (5, 2)
    rules.clear()
    nth = rules.add("close_before", Match(client_id="c"), skip=2, count=1, nth=3)
    assert [rules.consult(_seen()) is nth for _ in range(5)] == [False, False, True, False, False]
    assert rules.firings[(nth.id, "close_before")] == 1


@pytest.mark.parametrize("seed", [1, 99, 2024])
def test_the_same_seed_fires_on_the_same_requests(seed):
    def run():
        rules = FaultRules()
        rules.add("close_before", Match(api_key=0), probability=0.3, seed=seed)
        return [rules.consult(_seen()) is not None for _ in range(200)]

    first = run()
    assert first == run()
    draws = random.Random(seed)
    assert first == [draws.random() < 0.3 for _ in range(200)]


def test_active_says_whether_any_rule_or_observer_is_set_after_every_change():
    rules = FaultRules()
    changes = []
    rules.on_change = lambda: changes.append(rules.active)
    first, second = rules.add("delay", delay_ms=1), rules.add("hold")
    rules.remove(first.id)
    assert rules.active
    rules.remove(second.id)
    assert not rules.active
    rules.add("drop_response")
    rules.clear()
    assert changes == [True, True, True, False, True, False] and not rules.active


def test_observers_see_every_request_before_the_rules_and_a_failing_one_is_contained():
    rules = FaultRules()
    seen = []
    assert not rules.active
    rules.observe(lambda s: seen.append((s.api_key, s.node_id)))
    rules.observe(lambda s: 1 / 0)
    assert rules.active
    assert rules.consult(_seen(api_key=3, node_id=2)) is None
    assert seen == [(3, 2)]


def test_error_names_and_codes():
    assert parse_error("not_enough_replicas") == parse_error("NOT_ENOUGH_REPLICAS") == parse_error(19) == 19
    for bad in ("NONE", "0", "nope", "31337"):
        with pytest.raises(ValueError):
            parse_error(bad)


def test_a_lossy_link_loses_the_messages_its_seed_says():
    from broker.cluster.network import LinkFaults

    link = LinkFaults(loss=0.3, seed=5)
    draws = random.Random(5)
    assert [link.lost() for _ in range(100)] == [draws.random() < 0.3 for _ in range(100)]
    assert not any(LinkFaults(delay_ms=10).lost() for _ in range(100))
    assert LinkFaults(loss=0.5).describe()["seed"] is not None  # chosen, so a run can be repeated


def test_a_fresh_process_builds_the_rule_classes_with_its_first_rule():
    """broker.faults.requests names Match and FaultRule from broker.faults.rules on first use (a
    broker without rules never builds them): the first rule and the first match that
    needs what a request names work from a process that had loaded neither."""
    script = """
import sys
import broker.faults.requests as faults
assert "broker.faults.rules" not in sys.modules and "broker.faults.fields" not in sys.modules
rules = faults.FaultRules()
rule = rules.add("error", error=7)
from broker.faults import rules as fault_rules
from broker.faults.requests import Match
assert Match is fault_rules.Match and faults.FaultRule is fault_rules.FaultRule and type(rule) is faults.FaultRule
assert rule.match == Match() and rules.rules == {rule.id: rule}
from protocol import answer_wire
request = answer_wire.build_request(22, 4, {"transactional_id": "tx", "producer_id": 5, "producer_epoch": 0})
seen = faults.RequestSeen(1, 22, 4, "c", request, lambda topic_id: None)
assert Match(transactional_id="tx").matches(seen) and not Match(transactional_id="other").matches(seen)
assert "broker.faults.fields" in sys.modules
try:
    faults.NoSuchName
except AttributeError:
    pass
else:
    raise AssertionError("an unknown name must raise AttributeError")
print("ok")
"""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
