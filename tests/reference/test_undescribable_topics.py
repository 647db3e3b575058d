"""Topics a client may not describe, with the authorizer on: what Metadata and Produce
answer for them, existing or not, with auto-creation asked for or not, on every Metadata
version librdkafka and the Java client use. librdkafka's producer test (0115, "topic not
known") relies on these answers: it queues records for such a topic and fails them in its
delivery report once Metadata says TOPIC_AUTHORIZATION_FAILED."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from broker.wire.client import KafkaConnection
from tests.acl_setup import OPEN_AUTHORIZER
from tests.integration.test_kafka_parity import _produce
from tests.reference.kafka_broker import KafkaBroker

# A second Kafka (with the authorizer) takes its own start: outside the CI subset.
pytestmark = pytest.mark.reference_extended

# An ACL on a resource ends "allow.everyone.if.no.acl.found" for it: with only a DENY of
# CREATE, DESCRIBE is refused too.

HOST = "127.0.0.1"
TOPIC, PREFIXED = 2, 4
ALL, CREATE = 2, 7
DENY = 2


@pytest.fixture(scope="module")
def kafka_with_authorizer(tmp_path_factory):
    """Apache Kafka with StandardAuthorizer, open where no ACL names a resource."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-authorizer"), OPEN_AUTHORIZER).start()
    yield broker
    broker.stop()


async def _metadata(conn: KafkaConnection, version: int, name: str, auto_create: bool) -> tuple:
    r = await conn.request(3, version, {"topics": [{"name": name, "topic_id": None}],
                                        "allow_auto_topic_creation": auto_create,
                                        "include_topic_authorized_operations": version >= 8,
                                        "include_cluster_authorized_operations": False})
    t = r.topics[0]
    return (t.error_code, t.name, getattr(t, "topic_id", None), t.is_internal, len(t.partitions),
            getattr(t, "topic_authorized_operations", None))


async def _acl(conn: KafkaConnection, name: str, pattern: int, operation: int, permission: int = DENY) -> None:
    """An ACL for every user on topics named ``name`` (literal) or starting with it (prefixed)."""
    r = await conn.request(30, 3, {"creations": [{
        "resource_type": TOPIC, "resource_name": name, "resource_pattern_type": pattern, "principal": "User:*",
        "host": "*", "operation": operation, "permission_type": permission}]})
    assert r.results[0].error_code == 0


async def _answers(port: int, tag: str) -> dict:
    hidden, no_create = f"hidden-{tag}", f"nocreate-{tag}"
    async with await KafkaConnection.connect(HOST, port) as conn:
        r = await conn.request(19, 7, {"topics": [{"name": hidden, "num_partitions": 1, "replication_factor": 1,
                                                   "assignments": [], "configs": []}],
                                       "timeout_ms": 10000, "validate_only": False})
        assert r.topics[0].error_code == 0
        await _acl(conn, hidden, PREFIXED, ALL)  # the topic and any name it starts
        await _acl(conn, no_create, PREFIXED, CREATE)  # and so DESCRIBE too (see above)
        # Kafka's brokers learn new ACLs a little after the controller accepts them
        deadline = time.monotonic() + 15
        while (await _metadata(conn, 12, hidden, False))[0] == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        answers = {}
        for version in (1, 4, 9, 12, 13):
            for auto_create in (True, False):
                for label, name in (("existing", hidden), ("missing", hidden + "-x"),
                                    ("only CREATE denied", no_create + "-x")):
                    if version < 4 and not auto_create:
                        continue  # v1-v3 always ask for auto-creation
                    answer = await _metadata(conn, version, name, auto_create)
                    answers[version, auto_create, label] = (answer[0], answer[1].replace(tag, "T"), *answer[2:])
        r = await conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
        answers["listed among all topics"] = any(t.name == hidden for t in r.topics)
        for label, name in (("produce existing", hidden), ("produce missing", hidden + "-x")):
            answers[label] = (await _produce(conn, name, [(b"k", b"v", (), 1)])).error_code
        return answers


async def test_undescribable_topics_answered_as_kafka(broker_factory, kafka_with_authorizer):
    eos = broker_factory(OPEN_AUTHORIZER)
    tag = uuid.uuid4().hex[:8]
    kafka = await _answers(kafka_with_authorizer.port, tag)
    ours = await _answers(eos.port, tag)
    assert ours == kafka
    assert kafka[12, True, "missing"][:2] == (29, "hidden-T-x")  # TOPIC_AUTHORIZATION_FAILED, named
    assert kafka["produce existing"] == 29 and not kafka["listed among all topics"]
