"""The index of what each follower replicates from each leader (ReplicaState.followed,
which the replica fetchers ask every round) stays equal to a walk over every partition
through topic creates and deletes, added partitions, leader moves, reassignments and
nodes going down, coming up, joining and leaving."""

from __future__ import annotations

import random

from broker.cluster.replication import ReplicaState

NODES = [0, 1, 2]


def walked(state: ReplicaState, follower: int, leader: int) -> set[tuple[str, int]]:
    return {key for key, s in state.assign_all().items() if s.leader == leader and follower in s.replicas
            and follower != leader}


def assert_index_matches(state: ReplicaState) -> None:
    for follower in state.node_ids:
        for leader in state.node_ids:
            assert set(state.followed(follower, leader)) == walked(state, follower, leader), (follower, leader)
            for key, leadership in state.followed(follower, leader).items():
                assert leadership is state.partitions[key]  # the live object: its epoch is current


def test_the_index_follows_leader_moves_and_topic_deletes(tmp_path):
    state = ReplicaState(tmp_path / "partitions.json", list(NODES))
    for i in range(6):
        state.assign("a", i, 3)
    state.declare("b", 4, 2)  # assigned when the index is built
    assert_index_matches(state)
    assert ("a", 0) in state.followed(1, 0)

    state.set_leader("a", 0, 2, "test")  # a leader move: 1 now follows a-0 from 2, not from 0
    assert ("a", 0) not in state.followed(1, 0) and ("a", 0) in state.followed(1, 2)
    assert ("a", 0) in state.followed(0, 2)
    assert_index_matches(state)

    for i in range(6):  # a topic delete
        state.forget("a", i)
    assert not any(key[0] == "a" for f in NODES for l in NODES for key in state.followed(f, l))
    assert_index_matches(state)

    for i in range(3):  # created again under the name, and partitions added
        state.assign("a", i, 2)
    state.assign("b", 4, 2)
    assert_index_matches(state)


def test_the_index_follows_nodes_reassignments_and_elections(tmp_path):
    state = ReplicaState(tmp_path / "partitions.json", list(NODES))
    for i in range(8):
        state.assign("t", i, 3)
        state.assign("u", i, 1)
    state.followed(0, 1)  # built
    rng = random.Random(5)
    state.node_down(1)
    assert_index_matches(state)
    state.node_up(1)
    state.elect_preferred()
    assert_index_matches(state)
    state.shuffle(rng)
    assert_index_matches(state)
    state.reassign("t", 3, [2, 0], None)  # replicas change, the leader may stay
    state.reassign("u", 2, [1], 1)
    assert_index_matches(state)
    state.add_node(3)
    state.reassign("t", 4, [3, 1, 2], 3)
    assert_index_matches(state)
    state.remove_node(0, state.plan_removal(0, [1, 2, 3]))
    assert_index_matches(state)

    state.drop_followed()  # fetching stopped: rebuilt at the next ask, from what holds then
    state.set_leader("t", 5, state.get("t", 5).isr[-1], "test")
    assert_index_matches(state)
