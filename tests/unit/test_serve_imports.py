"""What a single-node serve start loads: the follower Fetch request type (every Fetch
schema version) is built at the first follower fetch, not when the broker is imported;
a group coordinator is made and loads offsets and classic groups without the code of the
KIP-848 consumer, KIP-932 share and KIP-1071 streams group types, which a record or
request of the type imports. (What an empty start imports on its way to the first
answer: tests/integration/test_startup_imports.py.)"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GROUP_TYPE_MODULES = ("coordinator.group.consumer_group", "coordinator.group.consumer_log_codec",
                      "coordinator.group.share_group", "coordinator.group.share_log_codec",
                      "coordinator.group.streams_group", "coordinator.group.streams_log_codec")


def _probe(code: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_broker_process_does_not_load_fetch_request_schemas():
    probe = ("import sys, broker.process; "
             "print(sorted(m for m in sys.modules if m.startswith('kio.schema.fetch.')))")
    assert _probe(probe) == "[]"


_GROUP_COORDINATOR_START = """
import asyncio, sys
from pathlib import Path
from broker.cli import _without_hypothesis
_without_hypothesis()
from broker.config import BrokerConfig
from broker.process import Broker

async def main():
    config = BrokerConfig.load(None, ["offsets.topic.num.partitions=1"])
    broker = Broker(config, Path(sys.argv[1]), "127.0.0.1", 0)
    await broker.start()
    groups = broker.nodes[0].groups  # the group coordinator, its __consumer_offsets made and loaded
    groups.ensure_ready()
    await groups.ready()
    print(sorted(m for m in sys.modules if m in {modules!r}))
    await broker.stop()

asyncio.run(main())
"""


def test_a_broker_makes_and_loads_its_group_coordinator_without_the_modern_group_types(tmp_path):
    assert _probe(_GROUP_COORDINATOR_START.format(modules=GROUP_TYPE_MODULES), str(tmp_path / "data")) == "[]"


_GROUP_LOAD = """
import sys
from coordinator.group import OffsetToCommit
from tests.unit.test_group_harness import Runtime

def group_types():
    return sorted(m for m in sys.modules if m in {modules!r})

rt = Runtime()
rt.stable_pair()  # a classic group with two members, and a group with offsets only:
rt.call("offset_commit", group_id="o", generation_id=-1, member_id="", group_instance_id=None,
        offsets=[OffsetToCommit("t", 0, 10)], api_version=8)
again = rt.restart()  # replays the classic group and the offsets
replayed = again.coordinator.group("g").state.value
again.advance(60_000)  # and runs its timers: the members' sessions run out
print(group_types(), replayed, again.coordinator.group("g").state.value,
      again.coordinator.committed_offset("o", "t", 0).offset)
{then}
"""

_CONSUMER_HEARTBEAT = """
from coordinator.group.consumer_group import HeartbeatRequest
rt = Runtime()
beat = HeartbeatRequest(group_id="c", member_id="m", member_epoch=0, rebalance_timeout_ms=30_000, owned={},
                        subscribed_topic_names=("t",))
rt.runtime.run(0, lambda: rt.coordinator.consumer_group_heartbeat(beat, rt.now), rt.now)
again = rt.restart()
print(group_types(), again.coordinator.consumer_group("c").group_epoch)
"""


def test_a_group_coordinator_loads_classic_groups_and_offsets_without_the_modern_group_types():
    before, after = _probe(_GROUP_LOAD.format(modules=GROUP_TYPE_MODULES, then=_CONSUMER_HEARTBEAT)).splitlines()
    assert before == "[] Stable Empty 10"
    # A consumer group's records import its type's code, and only its own.
    assert after == "['coordinator.group.consumer_group', 'coordinator.group.consumer_log_codec'] 1"
