"""The scenario format: the catalogue parses, and every kind of mistake is refused
with a message naming the field, before anything is applied."""

from __future__ import annotations

import pytest

from broker.faults.scenarios import ScenarioError, catalogue, parse, read_scenario

GOOD = """
name = "x"
nodes = 3
[settings]
"transaction.abort.timed.out.transaction.cleanup.interval.ms" = 500
[[faults]]
action = "drop_response"
api = "Produce"
count = 1
[[triggers]]
when = { api = "EndTxn", committed = true, transactional_id = "app", at = "answer" }
do = [{ op = "node_kill", node_id = "$node" }, { op = "network_heal" }]
[[triggers]]
when = { api = "Produce", nth = 100 }
do = [{ op = "clock_advance", by = "2h" }]
"""


def test_every_catalogue_scenario_parses_and_is_named_after_its_file():
    shipped = catalogue()
    assert len(shipped) >= 1
    for name in shipped:
        assert read_scenario(name).name == name


def test_a_good_scenario():
    s = parse(GOOD)
    assert (s.name, s.nodes, s.settings) == ("x", 3, {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500})
    assert s.faults == ({"action": "drop_response", "api_key": 0, "count": 1},)
    first, second = s.triggers
    assert (first.when.api_key, first.when.at, first.when.fields) == (26, "answer",
                                                                      {"committed": True, "transactional_id": "app"})
    assert (first.when.skip, first.when.count) == (0, 1)
    assert [(d.op, d.args) for d in first.do] == [("node_kill", {"node_id": "$node"}), ("network_heal", {})]
    assert (second.when.skip, second.when.count) == (99, 1)


@pytest.mark.parametrize("change, field", [
    (("nodes = 3", "nodes = 0"), "nodes"),
    (('name = "x"', 'nam = "x"'), "nam"),
    (('"transaction.abort', '"transaction.abbort'), "settings.transaction.abbort.timed.out.transaction.cleanup.interval.ms"),
    (("interval.ms\" = 500", "interval.ms\" = \"soon\""), "settings.transaction.abort.timed.out.transaction.cleanup.interval.ms"),
    (('action = "drop_response"', 'action = 7'), "faults[0].action"),
    (('api = "Produce"\n', 'api = "Prodoce"\n'), "faults[0].api"),
    (("count = 1", "count = 0"), "faults[0].count"),
    (("committed = true", "commited = true"), "triggers[0].when.commited"),
    (("committed = true", 'committed = "yes"'), "triggers[0].when.committed"),
    (('at = "answer"', 'at = "later"'), "triggers[0].when.at"),
    (('"node_kill"', '"node_explode"'), "triggers[0].do[0].op"),
    (('node_id = "$node"', 'node_id = 4'), "triggers[0].do[0].node_id"),
    (('"node_kill"', '"scenario_unload"'), "triggers[0].do[0].op"),
    (('node_id = "$node"', 'nod_id = 1'), "triggers[0].do[0].nod_id"),
    (('by = "2h"', 'by = "2 fortnights"'), "triggers[1].do[0].by"),
    (("nth = 100", "nth = 100, count = 2"), "triggers[1].when.nth"),
    (('do = [{ op = "clock_advance", by = "2h" }]', "do = []"), "triggers[1].do"),
])
def test_mistakes_name_their_field(change, field):
    old, new = change
    assert old in GOOD
    with pytest.raises(ScenarioError) as refused:
        parse(GOOD.replace(old, new, 1))
    assert refused.value.field == field, refused.value


def test_not_toml_and_unknown_names():
    with pytest.raises(ScenarioError, match="not valid TOML"):
        parse("name = ")
    with pytest.raises(ScenarioError) as unknown:
        read_scenario("zombie-fensing")
    assert unknown.value.field == "scenario" and "did you mean 'zombie-fencing'" in unknown.value.message
    with pytest.raises(ScenarioError, match="only means something in a trigger"):
        parse('name = "x"\n[[setup]]\nop = "node_pause"\nnode_id = "$node"\n')


def test_a_mistyped_setting_gets_the_closest_one():
    with pytest.raises(ScenarioError) as refused:
        parse(GOOD.replace('"transaction.abort', '"transaction.abbort', 1))
    assert "did you mean 'transaction.abort.timed.out.transaction.cleanup.interval.ms'?" in refused.value.message
